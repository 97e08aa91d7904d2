"""`use_horovod: true` without Horovod is a config error naming the install step; validate shows the global batch."""

from __future__ import annotations

import sys

import pytest

from opt_train.distributed import HorovodUnavailableError, get_backend
from tests.processes import needs_horovod
from tests.support import CONFIGS

INSTALL = "bash scripts/install_horovod.sh"


@pytest.fixture
def no_horovod(monkeypatch):
    """Makes `import horovod.tensorflow` fail as on a machine without Horovod."""
    monkeypatch.setitem(sys.modules, "horovod", None)
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", None)


def test_backend_without_horovod_says_how_to_install(no_horovod):
    with pytest.raises(HorovodUnavailableError, match=INSTALL):
        get_backend("horovod")


def test_single_process_backend_needs_no_horovod(no_horovod):
    backend = get_backend()
    assert (backend.size, backend.rank, backend.is_chief) == (1, 0, True)


def test_train_without_horovod_exits_2_naming_the_key_and_the_install_step(no_horovod, cli, tmp_path):
    result = cli("train", "--config", CONFIGS / "horovod.yaml", "--set", f"logdir={tmp_path}")
    assert result.exit_code == 2
    assert "use_horovod" in result.output and INSTALL in result.output
    assert "Traceback" not in result.output
    assert not list(tmp_path.iterdir())  # failed before writing anything


# `validate --np N` gives train's verdict: without Horovod installed, that is exit 2
# (tests/config/test_distributed_config.py).
@needs_horovod
@pytest.mark.parametrize("ranks, overrides, global_batch", [
    (2, [], 64),
    (4, [], 128),
    (2, ["--set", "iter_size=2"], 128),
])
def test_validate_shows_the_global_batch(cli, ranks, overrides, global_batch):
    # batch_size_per_gpu x ranks x iter_size, with configs/horovod.yaml's 32 per rank
    result = cli("validate", "--config", CONFIGS / "horovod.yaml", "--np", ranks, *overrides)
    assert result.exit_code == 0, result.output
    assert f"global_batch: {global_batch}" in result.output
