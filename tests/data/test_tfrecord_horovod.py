"""Under a real `horovodrun` with 2 ranks, every TFRecord record is read once per epoch across the ranks."""

import json
import subprocess
import sys

import pytest

from tests.data.test_tfrecord import params, write_records
from tests.processes import JOB_TIMEOUT_SECONDS, LAUNCH_ENV, horovodrun_argv, needs_horovod
from tests.support import END_WITHOUT_TEARDOWN, REPO, read_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.horovod,
    needs_horovod,
]

LAYOUTS = {"by_file": 4, "by_record": 1}  # files the 48 records are written to
# Each rank runs tests/data/tfrecord_rank_worker.py once per layout, in one process: one
# launch and one TensorFlow import per rank for both layouts (each its own records and folder).
# Then Horovod is shut down and the rank ends without the interpreter's teardown of TensorFlow
# (1-4 s a process on a loaded 2-core host), as `opt-train` ends its ranks.
RANK_CODE = (
    "import sys\n"
    "from tests.data.tfrecord_rank_worker import main\n"
    "for params_path, outdir in zip(sys.argv[1::2], sys.argv[2::2]):\n"
    "    main(params_path, outdir)\n"
    "import horovod.tensorflow as hvd\n"
    "hvd.shutdown()\n"
) + END_WITHOUT_TEARDOWN


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """{layout: folder}: the records of each layout, and what each rank read from them, in one horovodrun job."""
    folders = {}
    arguments = []
    for name, files in LAYOUTS.items():
        folder = folders[name] = tmp_path_factory.mktemp(name)
        write_records(folder, files=files, per_file=48 // files)
        (folder / "params.json").write_text(json.dumps(params(folder)))
        arguments += [str(folder / "params.json"), str(folder)]
    job = subprocess.run(horovodrun_argv(sys.executable, "-c", RANK_CODE, *arguments),
                         cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    return folders


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_two_ranks_read_every_record_once_per_epoch(layouts, layout):
    ranks = [read_json(layouts[layout] / f"rank{r}.json") for r in (0, 1)]
    assert all(r["size"] == 2 and r["steps_per_epoch"] == 6 for r in ranks)
    for epoch in (0, 1):
        seen = [i for r in ranks for i in r["ids"][epoch * 24:(epoch + 1) * 24]]
        assert sorted(seen) == list(range(48)), f"epoch {epoch}"
