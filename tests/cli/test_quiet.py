"""TensorFlow's and absl's own log lines are silenced in every command; `--verbose` shows them.

What a user's terminal shows is what the command writes to file descriptors 1 and 2
(TensorFlow's C++ lines go there directly), in a process with the user's environment.
Three commands run one after another in one fresh process (one TensorFlow import), each
one's descriptors 1 and 2 captured apart: the import's own lines fall in the first
command's, the lines of each command's own work in its own. `--verbose` is a real
`opt-train` process of its own (it changes how TensorFlow loads).
"""

import json
import os
import subprocess
import sys

import pytest

from tests.support import END_WITHOUT_TEARDOWN, REPO, SMALL_RUN, write_run

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).

# `opt-train ARGV` for each (name, argv) in turn, as the console script runs it (`main`), each
# command's descriptors 1 and 2 into folder/NAME.out and folder/NAME.err; prints the exit codes.
COMMANDS = """
import json, os, sys
from opt_train.cli.main import main
folder, commands = sys.argv[1], json.loads(sys.argv[2])
codes = {}
for name, argv in commands:
    sys.stdout.flush(), sys.stderr.flush()
    kept = {fd: os.dup(fd) for fd in (1, 2)}
    for fd, ending in ((1, ".out"), (2, ".err")):
        target = os.open(os.path.join(folder, name + ending), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd), os.close(target)
    try:
        main(argv)
        codes[name] = 0
    except SystemExit as end:
        codes[name] = end.code or 0
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        for fd, copy in kept.items():
            os.dup2(copy, fd), os.close(copy)
print(json.dumps(codes))
""" + END_WITHOUT_TEARDOWN


def _users_environment():
    # Without the suite's TF_CPP_MIN_LOG_LEVEL: what a user's shell has.
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "OPT_TRAIN_VERBOSE")}
    env["PYTHONPATH"] = str(REPO)
    return env


def _opt_train(*args, cwd):
    return subprocess.run([sys.executable, "-m", "opt_train", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=_users_environment(), timeout=600)


@pytest.fixture(scope="module")
def mismatched(tmp_path_factory):
    """A logdir trained by `opt-train train`, and `train --resume` and `eval` of a config of another model
    that names the logdir (its checkpoint does not fit), in one fresh process:
    `(folder, other config, {command: (exit code, stdout, stderr)})`."""
    folder = tmp_path_factory.mktemp("quiet")
    trained = write_run(folder, SMALL_RUN, "trained.yaml")
    other = write_run(folder, {**SMALL_RUN, "model_params": {"hidden_units": [12]}}, "other.yaml")
    commands = [("trained", ["train", "-c", str(trained)]), ("train", ["train", "--resume", "-c", str(other)]),
                ("eval", ["eval", "-c", str(other)])]
    done = subprocess.run([sys.executable, "-c", COMMANDS, str(folder), json.dumps(commands)], capture_output=True,
                          text=True, cwd=folder, env=_users_environment(), timeout=600)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    codes = json.loads(done.stdout)
    ended = {name: (codes[name], (folder / f"{name}.out").read_text(), (folder / f"{name}.err").read_text())
             for name, _ in commands}
    return folder, other, ended


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "eval"])
def test_a_checkpoint_that_does_not_fit_is_the_error_line_alone(mismatched, command):
    code, _, stderr = mismatched[2][command]
    assert code == 2, stderr
    assert [line for line in stderr.splitlines() if line.strip()] == [
        next(line for line in stderr.splitlines() if line.startswith("Error: "))], stderr
    assert "restores into this run" in stderr


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
    # The fixture's first command: `opt-train train` of a small run into an empty logdir, TensorFlow's import in it.
    code, stdout, stderr = mismatched[2]["trained"]
    assert code == 0, stderr
    assert stderr.strip() == "", stderr
    assert stdout.strip(), "its progress lines were not captured"
    assert all(not line.startswith(("I0000", "E0000", "W0000", "WARNING:")) for line in stdout.splitlines())
