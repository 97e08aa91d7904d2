"""`opt-train train --np 2` end to end on the tf.distribute backend: real training workers, one TF_CONFIG each.

2 workers equal one process on the doubled batch, also once one was killed and the job run
again; a SIGKILLed worker ends the job naming it; SIGTERM to the launcher stops every worker at
one update with a checkpoint there. Skipped until the tf backend (`opt_train/distributed/tfdist.py`) is in
this checkout. The one-process references train in this process (`cli`): what they are
compared on is what they wrote, not how their process was started.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import JOB_TIMEOUT_SECONDS
from tests.support import REPO, read_json, read_jsonl, unlaunched_environ

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("opt_train.distributed.tfdist") is None,
                       reason="the tf.distribute backend is not in this checkout"),
]

RANK_TIMEOUT = 5
ENV = unlaunched_environ(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
RUN = """\
model: mlp
model_params: {hidden_units: [8]}
data: digits
batch_size_per_gpu: 16
optimizer: Adam
optimizer_params: {learning_rate: 0.01}
max_steps: 20
print_loss_steps: 5
save_summaries_steps: 5
eval_steps: null
"""


def config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    return path


def opt_train(*args):
    return [sys.executable, "-m", "opt_train", *map(str, args)]


def run(argv):
    job = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS)
    return job, job.stdout + job.stderr


def losses(logdir):
    return {record["step"]: record["loss"] for record in read_jsonl(Path(logdir) / "metrics.jsonl") if "loss" in record}


def model_weights(logdir):
    """The model's weights and the optimizer's state in the newest checkpoint, by checkpoint key."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(Path(logdir) / "checkpoints"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if key.startswith(("model_variables/", "optimizer/", "global_step/"))}


def assert_equal_runs(logdir, reference, steps):
    """The run in `logdir` reported the losses of the one-process run in `reference` at `steps` (within 1e-4) and
    ended with its weights and optimizer state (within 1e-5)."""
    import numpy as np

    reported, expected = losses(logdir), losses(reference)
    assert sorted(reported) == sorted(expected) == list(steps)
    for step, loss in expected.items():
        assert abs(reported[step] - loss) <= 1e-4, (step, reported[step], loss)
    weights, expected_weights = model_weights(logdir), model_weights(reference)
    assert expected_weights and sorted(weights) == sorted(expected_weights)
    for key, value in expected_weights.items():
        np.testing.assert_allclose(weights[key], value, atol=1e-5, err_msg=key)


def worker_pid(index, marker):
    """The pid of tf worker `index` (its TF_CONFIG task) whose command line contains `marker`."""
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if marker.encode() not in cmdline or b"--np" in cmdline:
            continue
        for item in environ:
            if item.startswith(b"TF_CONFIG="):
                if json.loads(item[len(b"TF_CONFIG="):])["task"]["index"] == index:
                    return int(entry.name)
    return None


def start_long_run(tmp_path, *extra):
    logdir = tmp_path / "run"
    argv = opt_train("train", "--np", 2, "--config", config_file(tmp_path), "--set", "max_steps=100000",
                     "--set", f"logdir={logdir}", *extra)
    job = subprocess.Popen(argv, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    records = logdir / "metrics.jsonl"
    while time.monotonic() < deadline and job.poll() is None:
        if records.exists() and any(record.get("step", 0) >= 10 for record in read_jsonl(records)):
            return job, logdir
        time.sleep(0.2)
    raise AssertionError("training did not start: " + (job.communicate()[0] or "")[-3000:])


def assert_ended_naming(job, output, logdir, words):
    """The launcher exited 1, its last line the error naming the worker, and no worker is left."""
    assert job.returncode == 1, output[-4000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and words in last, output[-4000:]
    assert worker_pid(0, str(logdir)) is None and worker_pid(1, str(logdir)) is None


# A hung (SIGSTOPped) worker: the launcher's verdict on it (Launcher._watch, the same for both
# backends) is shown on real Horovod ranks (tests/distributed/test_launcher.py, a hung rank named
# within the timeout) and on stand-in tf workers (tests/distributed/test_tf_launcher.py); a worker's
# side of a peer the launcher then kills is the SIGKILL of the killed-and-run-again test below.


def test_sigterm_to_the_launcher_checkpoints_and_exits_143(tmp_path):
    import tensorflow as tf

    job, logdir = start_long_run(tmp_path, "--set", "save_checkpoint_steps=100000")
    try:
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=JOB_TIMEOUT_SECONDS)
    finally:
        job.kill()
    assert job.returncode == 143, output[-4000:]
    last = read_jsonl(logdir / "metrics.jsonl")[-1]
    assert last["interrupted"] == "SIGTERM", output[-4000:]
    saved = tf.train.latest_checkpoint(str(logdir / "checkpoints"))
    assert saved is not None and saved.endswith(f"ckpt-{last['step']}")
    assert "Traceback" not in output and "Error:" not in output
    # Each worker's own lines: which worker it is, first, and its own stop.
    assert "[worker 1] worker 1 of 2: global batch 32 = 2 workers x 1 replica" in output, output[-4000:]
    assert f"[worker 1] worker 1 of 2: interrupted by SIGTERM at step {last['step']}: checkpoint saved" in output


def test_two_workers_killed_and_run_again_equal_one_uninterrupted_process_on_the_doubled_batch(tmp_path, cli):
    """2 workers x 16, worker 0 alone reporting; SIGKILL one worker mid-run: the job ends naming it;
    the same command again resumes from the last checkpoint, and the run ends at the same step
    count, weights, optimizer state and reported losses as one process x 32 that was never stopped
    (the losses up to the kill are the first, uninterrupted launch's)."""
    config = config_file(tmp_path)
    logdir = tmp_path / "run"
    settings = ["--set", "max_steps=200", "--set", "save_checkpoint_steps=20", "--set", "print_loss_steps=20",
                "--set", "save_summaries_steps=null", "--set", f"rank_timeout_secs={RANK_TIMEOUT}"]
    argv = opt_train("train", "--np", 2, "--config", config, *settings, "--set", f"logdir={logdir}")
    job = subprocess.Popen(argv, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
        records = logdir / "metrics.jsonl"
        while time.monotonic() < deadline and job.poll() is None:
            if records.exists() and any(record.get("step", 0) >= 40 for record in read_jsonl(records)):
                break
            time.sleep(0.1)
        pid = worker_pid(1, str(logdir))
        assert pid is not None, "worker 1 ended before it could be killed: " + str(job.poll())
        os.kill(pid, signal.SIGKILL)
        output, _ = job.communicate(timeout=JOB_TIMEOUT_SECONDS)
    finally:
        job.kill()
    assert_ended_naming(job, output, logdir, "worker 1 failed (killed by SIGKILL)")
    assert "global batch 32" in output
    assert "[worker 1] step" not in output  # progress from worker 0 alone
    killed_at = max(record.get("step", 0) for record in read_jsonl(logdir / "metrics.jsonl"))
    assert killed_at < 200, "the kill came after the end"

    again, output = run(argv)
    assert again.returncode == 0, output[-4000:]
    assert "resumed from" in output, output[-4000:]
    assert "global batch 32" in again.stdout
    assert "[worker 1] step" not in again.stdout
    one = cli("train", "--config", config, *settings, "--set", "batch_size_per_gpu=32",
              "--set", f"logdir={tmp_path / 'one'}")
    assert one.exit_code == 0, one.output[-4000:]
    assert read_json(logdir / "final_metrics.json")["global_step"] == 200
    assert_equal_runs(logdir, tmp_path / "one", range(20, 201, 20))
