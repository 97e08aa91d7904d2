"""Fixtures of the training tests: a trained logdir, and a small file system to fill or mount read-only."""

import subprocess

import pytest

from tests.support import without_export, write_run


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
