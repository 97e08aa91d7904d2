"""Every worker's own output (what a pod's log shows) says which worker it is, what makes the global batch, and how it ended.

Two real `opt-train train` workers started by hand, each with its own TF_CONFIG, as a
cluster launcher starts them. Before: worker 1's log stayed empty all run, and no line said
how many workers and replicas ran.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.processes import JOB_TIMEOUT_SECONDS, free_ports, tf_config
from tests.support import REPO, unlaunched_environ, write_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("opt_train.distributed.tfdist") is None,
                       reason="the tf.distribute backend is not in this checkout"),
]

BATCH = 16


def start_workers(tmp_path, max_steps):
    config = write_run(tmp_path, {
        "model": "mlp", "model_params": {"hidden_units": [8]}, "data": "digits", "distributed": "tf",
        "batch_size_per_gpu": BATCH, "iter_size": 2, "max_steps": max_steps, "print_loss_steps": 4,
        "save_summaries_steps": None, "save_checkpoint_steps": None, "eval_steps": None, "export": False,
    }, "run.yaml")
    ports = free_ports(2)
    return [
        subprocess.Popen(
            [sys.executable, "-m", "opt_train", "train", "--config", str(config)], cwd=REPO,
            env=unlaunched_environ(TF_CONFIG=tf_config(ports, index), PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for index in range(2)
    ]


def finish(jobs):
    try:
        return [job.communicate(timeout=JOB_TIMEOUT_SECONDS) for job in jobs]
    finally:
        for job in jobs:
            job.kill()


def first_lines(outputs):
    """Each worker's first line, and the figures its global batch is made of (2 workers x 1 replica x 16 x 2)."""
    expected = f"global batch {2 * 1 * BATCH * 2} = 2 workers x 1 replica x batch_size_per_gpu {BATCH} x iter_size 2"
    return [out.splitlines()[0] for out, _ in outputs], expected


def test_each_worker_says_which_it_is_and_ends_with_its_own_done_line(tmp_path):
    outputs = finish(start_workers(tmp_path, 8))
    lines, batch = first_lines(outputs)
    assert lines == [f"worker 0 of 2 (the chief: reports progress, writes checkpoints and summaries): {batch}",
                     f"worker 1 of 2: {batch}"], outputs
    (chief_out, _), (worker_out, _) = outputs
    # The chief's own lines as before: its start line's global batch is the same figure.
    assert "updates, global batch 64" in chief_out and chief_out.strip().splitlines()[-1].startswith("done: step 8;")
    assert worker_out.strip().splitlines()[-1] == (
        f"done: step 8 (worker 1 of 2); worker 0 reports the figures in logdir {tmp_path / 'run'}"), outputs
    assert "step 4/8" not in worker_out  # progress from the chief alone


# Each worker's own `interrupted` line: tests/e2e/test_tf_launch.py's SIGTERM to the launcher.
