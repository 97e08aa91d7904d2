"""Resume: a run stopped and restarted ends bit-for-bit where an uninterrupted run ends.

The runs stopped from outside (Ctrl-C, SIGKILL while saving) are `opt-train train` processes
forked by one process that imported TensorFlow (`forked`): one import for them all. The other
runs and every resume are `opt-train train` in this process.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.support import END_WITHOUT_TEARDOWN, REPO, checkpoint_tensors, read_json

# Dropout (RNG state), momentum slots and a decaying lr all have to come back.
RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [16], "dropout": 0.2},
    "data": "digits",
    "batch_size_per_gpu": 16,
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.05, "momentum": 0.9},
    "lr_policy": "exp",
    "lr_policy_params": {"decay_steps": 10, "decay_rate": 0.5},
    "print_loss_steps": 5,
    "save_checkpoint_steps": 10,
    "random_seed": 3,
}


# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")

# `opt-train train --config CONFIG` for each line `CONFIG<tab>STDERR` read from stdin, each in a child
# process forked once TensorFlow is imported (this process runs nothing of TensorFlow's: each child starts
# its runtime afresh), its stderr into the file STDERR. Prints the child's pid as it starts and its exit
# code (as subprocess gives it: -N for signal N) once it ends.
FORKER = """
import os, sys, traceback
from opt_train import quiet
quiet.import_tensorflow()
from opt_train.cli.main import main
for line in sys.stdin:
    config, stderr = line.rstrip("\\n").split("\\t")
    child = os.fork()
    if child == 0:
        try:
            for fd, path in ((0, os.devnull), (1, os.devnull), (2, stderr)):
                os.dup2(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC), fd)
            sys.argv = ["opt-train", "train", "--config", config]
            main()  # as the console script: it ends the process with the command's exit code
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(1)
    print(child, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
""" + END_WITHOUT_TEARDOWN


class Forked:
    """One `opt-train train` the forking process started: its pid, a signal to it, its exit code."""

    def __init__(self, server, config, stderr):
        server.stdin.write(f"{config}\t{stderr}\n")
        server.stdin.flush()
        self.server, self.pid, self.stderr = server, int(server.stdout.readline()), stderr

    def send_signal(self, number):
        os.kill(self.pid, number)

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while os.path.exists(f"/proc/{self.pid}") and time.monotonic() < deadline:
            time.sleep(0.1)
        if os.path.exists(f"/proc/{self.pid}"):
            self.send_signal(signal.SIGKILL)
        return int(self.server.stdout.readline())


@pytest.fixture(scope="module")
def forked():
    """`forked(config, stderr) -> Forked`: `opt-train train --config config`, forked by one process that
    imported TensorFlow."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    server = subprocess.Popen([sys.executable, "-c", FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": path})
    started = []

    def start(config, stderr):
        started.append(Forked(server, config, stderr))
        return started[-1]

    try:
        yield start
    finally:
        for job in started:  # a test that failed before its job ended leaves no run behind
            if os.path.exists(f"/proc/{job.pid}"):
                job.send_signal(signal.SIGKILL)
        server.stdin.close()
        try:
            server.wait(timeout=60)
        finally:
            server.kill()


@pytest.mark.slow  # 22 s measured on 2 loaded cores: three runs
def test_resumed_run_equals_uninterrupted_run(cli, write_config, tmp_path):
    whole = write_config({**RUN, "max_steps": 30, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0

    first_leg = write_config({**RUN, "max_steps": 15, "logdir": str(tmp_path / "legs")}, "leg1.yaml")
    assert cli("train", "--config", first_leg).exit_code == 0
    second_leg = write_config({**RUN, "max_steps": 30, "logdir": str(tmp_path / "legs")}, "leg2.yaml")
    result = cli("train", "--config", second_leg)
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output

    expected, actual = checkpoint_tensors(tmp_path / "whole"), checkpoint_tensors(tmp_path / "legs")
    assert expected.keys() == actual.keys()
    assert sum(name.startswith("model_variables/") for name in expected) == 5  # 4 weights + RNG
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    assert read_json(tmp_path / "legs" / "final_metrics.json")["global_step"] == 30


@pytest.mark.slow  # 6 s on 2 cores
def test_random_seed_makes_a_run_reproducible(cli, write_config, tmp_path):
    states = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        config = write_config({**RUN, "max_steps": 10, "random_seed": seed, "logdir": str(tmp_path / name)}, f"{name}.yaml")
        assert cli("train", "--config", config).exit_code == 0
        states[name] = checkpoint_tensors(tmp_path / name)
    for key in states["a"]:
        np.testing.assert_array_equal(states["a"][key], states["b"][key], err_msg=key)
    assert any(not np.array_equal(states["a"][k], states["c"][k]) for k in states["a"])


@pytest.mark.slow
def test_a_run_killed_while_saving_resumes_from_a_loadable_checkpoint(cli, write_config, tmp_path, forked):
    """SIGKILL a run that saves every update, then resume it (in this process): the index never points at a half checkpoint."""
    config = write_config({**RUN, "max_steps": 100000, "save_checkpoint_steps": 1, "print_loss_steps": 1000})
    index = tmp_path / "run" / "checkpoints" / "checkpoint"
    job = forked(config, tmp_path / "killed.err")
    deadline = time.monotonic() + 120
    while not index.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # into the stream of saves, one per update
    job.send_signal(signal.SIGKILL)
    assert job.wait(timeout=120) == -signal.SIGKILL, (tmp_path / "killed.err").read_text()[-2000:]
    assert index.exists()
    killed_at = tf.train.latest_checkpoint(str(index.parent))
    reader = tf.train.load_checkpoint(killed_at)  # loadable, not torn
    step = int(reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    assert step >= 1

    resumed = cli("train", "--config", config, "--set", f"max_steps={step + 5}")
    assert resumed.exit_code == 0, resumed.output[-2000:]
    # The newest checkpoint that restores: the one the index names, or the next one when the
    # kill came after its files were complete and before the index named it (seen once in CI-like runs).
    found = re.search(r"resumed from \S*ckpt-(\d+) at step (\d+)", resumed.output)
    assert found, resumed.output[-2000:]
    assert found.group(1) == found.group(2) and int(found.group(2)) in (step, step + 1)


@pytest.mark.slow  # 3 s on 2 cores
def test_restarting_a_finished_run_keeps_its_figures(cli, write_config, tmp_path):
    config = write_config({**RUN, "max_steps": 10, "logdir": str(tmp_path / "run")})
    assert cli("train", "--config", config).exit_code == 0
    before = read_json(tmp_path / "run" / "final_metrics.json")
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())

    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "nothing to train: step 10 has reached max_steps" in result.output
    after = read_json(tmp_path / "run" / "final_metrics.json")
    assert np.isfinite(before["train/loss"])
    assert after == before  # same loss, step and skipped count; the same weights evaluate the same
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == checkpoints


def _read_records(logdir):
    path = logdir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Ctrl-C from outside, here. A scheduler's SIGTERM takes the same handler (training/interrupt.py's SIGNALS):
# its exit 143, its line and its exact resume (every figure and tensor) are tests/training/test_stop_figures.py's
# on-SIGTERM case, and a SIGTERM sent from outside is test_tf_launch.py's, to the launcher.
@pytest.mark.slow
@pytest.mark.parametrize("sent", [signal.SIGINT], ids=["SIGINT"])
def test_a_signalled_run_saves_where_it_stopped_and_resumes_exactly(sent, cli, write_config, tmp_path, forked):
    """Ctrl-C: a checkpoint at an update boundary, exit 128 + signal."""
    leg = {**RUN, "max_steps": 100000, "save_checkpoint_steps": 100000, "logdir": str(tmp_path / "legs")}
    config = write_config(leg, "legs.yaml")
    job = forked(config, tmp_path / "legs.err")
    deadline = time.monotonic() + 120
    while not any(r["step"] >= 20 for r in _read_records(tmp_path / "legs")) and time.monotonic() < deadline:
        time.sleep(0.1)
    job.send_signal(sent)
    returncode = job.wait(timeout=120)
    stderr = (tmp_path / "legs.err").read_text()
    assert returncode == 128 + sent, stderr[-2000:]
    step = _read_records(tmp_path / "legs")[-1]["step"]
    assert _read_records(tmp_path / "legs")[-1]["interrupted"] == signal.Signals(sent).name
    assert f"interrupted by {signal.Signals(sent).name} at step {step}: checkpoint saved" in stderr
    assert "Traceback" not in stderr
    saved = tf.train.latest_checkpoint(str(tmp_path / "legs" / "checkpoints"))
    assert saved.endswith(f"ckpt-{step}") and step >= 20

    # Resumed to step + 10, it ends where a run of step + 10 updates without a stop ends.
    resumed = cli("train", "--config", config, "--set", f"max_steps={step + 10}")
    assert resumed.exit_code == 0, resumed.output
    whole = write_config({**leg, "max_steps": step + 10, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0
    expected, actual = checkpoint_tensors(tmp_path / "whole"), checkpoint_tensors(tmp_path / "legs")
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
