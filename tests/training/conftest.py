"""Fixtures of the training tests: a trained logdir, runs without their export, and a small file system to fill or mount read-only."""

import contextlib
import subprocess
from unittest import mock

import pytest

from tests.support import write_run


@pytest.fixture(scope="session")
def train_logdir():
    """`train(folder, run) -> (config, logdir)`: `run` written to folder/config.yaml and trained into folder/run.

    Without the end-of-run export: none of its users looks at logdir/export.
    """
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    def train(folder, run):
        config = write_run(folder, run)
        with without_export():
            result = CliRunner().invoke(group, ["train", "--config", str(config)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return config, folder / "run"

    return train


@contextlib.contextmanager
def without_export():
    """Runs in this process skip the end-of-run export (for tests that never look at logdir/export).

    Writing the SavedModel traces the model again: about a sixth of a 60-update run of a
    small MLP on 2 cores. The export itself is tests/models/test_export.py's (and test_ema.py's).
    """
    from opt_train.training import export

    with mock.patch.object(export, "export_at_end", lambda run, say: None):
        yield


@pytest.fixture(scope="module")
def no_export():
    """`without_export()` for the rest of the module (its module fixtures too): use it module-wide."""
    with without_export():
        yield


@pytest.fixture
def tmpfs():
    """`mount(path, size="1m", *options)`: a tmpfs at `path` (made here), unmounted after the test; skips where none can be."""
    mounted = []

    def mount(path, size="1m", *options):
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}", *options)), "tmpfs", str(path)],
                              capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)
