"""Fixtures of the training tests: a trained logdir, and a small file system to fill or mount read-only."""

import subprocess

import pytest
import yaml


@pytest.fixture(scope="session")
def train_logdir():
    """`train(folder, run) -> (config, logdir)`: `run` written to folder/config.yaml and trained into folder/run."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    def train(folder, run):
        config = folder / "config.yaml"
        config.write_text(yaml.safe_dump({**run, "logdir": str(folder / "run")}, sort_keys=False))
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
