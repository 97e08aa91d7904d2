"""Under a real `horovodrun` with 2 ranks, every TFRecord record is read once per epoch across the ranks."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.test_tfrecord import params, write_records
from tests.distributed.test_horovod_e2e import JOB_TIMEOUT_SECONDS, LAUNCH_ENV, horovodrun_argv
from tests.support import REPO, read_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.horovod,
    pytest.mark.skipif(importlib.util.find_spec("horovod") is None,
                       reason="Horovod is not installed (bash scripts/install_horovod.sh)"),
]

WORKER = Path(__file__).resolve().parent / "tfrecord_rank_worker.py"


@pytest.mark.parametrize("files", [4, 1], ids=["by_file", "by_record"])
def test_two_ranks_read_every_record_once_per_epoch(tmp_path, files):
    write_records(tmp_path, files=files, per_file=48 // files)
    (tmp_path / "params.json").write_text(json.dumps(params(tmp_path)))
    job = subprocess.run(horovodrun_argv(sys.executable, str(WORKER), str(tmp_path / "params.json"), str(tmp_path)),
                         cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    ranks = [read_json(tmp_path / f"rank{r}.json") for r in (0, 1)]
    assert all(r["size"] == 2 and r["steps_per_epoch"] == 6 for r in ranks)
    for epoch in (0, 1):
        seen = [i for r in ranks for i in r["ids"][epoch * 24:(epoch + 1) * 24]]
        assert sorted(seen) == list(range(48)), f"epoch {epoch}"
