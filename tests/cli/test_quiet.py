"""TensorFlow's and absl's own log lines are silenced in every command; `--verbose` shows them."""

import os
import subprocess
import sys

import pytest

from tests.support import REPO, SMALL_RUN, write_run

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).


def _opt_train(*args, cwd):
    # Without the suite's TF_CPP_MIN_LOG_LEVEL: what a user's shell has.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "OPT_TRAIN_VERBOSE")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "opt_train", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    """A logdir trained by `opt-train train` in a fresh process, that process's result, and a
    config of another model that names the logdir (its checkpoint does not fit)."""
    folder = tmp_path_factory.mktemp("quiet")
    trained = write_run(folder, SMALL_RUN, "trained.yaml")
    done = _opt_train("train", "-c", trained, cwd=folder)
    assert done.returncode == 0, done.stderr
    other = write_run(folder, {**SMALL_RUN, "model_params": {"hidden_units": [12]}}, "other.yaml")
    return folder, other, done


@pytest.mark.slow
@pytest.mark.parametrize("command", [["train", "--resume"], ["eval"]], ids=["train", "eval"])
def test_a_checkpoint_that_does_not_fit_is_the_error_line_alone(mismatched, command):
    folder, other, _ = mismatched
    quiet = _opt_train(*command, "-c", other, cwd=folder)
    assert quiet.returncode == 2, quiet.stderr
    assert [line for line in quiet.stderr.splitlines() if line.strip()] == [
        next(line for line in quiet.stderr.splitlines() if line.startswith("Error: "))], quiet.stderr
    assert "restores into this run" in quiet.stderr


@pytest.mark.slow
def test_verbose_shows_tensorflows_lines(mismatched):
    # Once, not per command: --verbose is the group's option, and every command imports
    # TensorFlow through the same opt_train.quiet.import_tensorflow (its CUDA probing line is enough).
    folder, other, _ = mismatched
    shown = _opt_train("--verbose", "train", "--resume", "-c", other, cwd=folder)
    assert shown.returncode == 2
    assert "WARNING:tensorflow:" in shown.stderr or "cuda" in shown.stderr.lower(), shown.stderr


@pytest.mark.slow
def test_a_successful_run_prints_no_tensorflow_line(mismatched):
    # The fixture's own run: a fresh `opt-train train` of a small run into an empty logdir.
    _, _, done = mismatched
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
    assert all(not line.startswith(("I0000", "E0000", "W0000", "WARNING:")) for line in done.stdout.splitlines())
