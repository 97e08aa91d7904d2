"""`on_nonfinite: stop` past one process: a non-finite loss on one worker stops every worker at the same update.

Each process's loss is its own (the loop reduces it only where it reports it), so the
verdict on it must be asked of every process. Before, under Horovod, the rank whose
loss overflowed stopped alone, and the job ended blaming the healthy rank for a broken
connection. Real processes through `opt-train train --np 2`, tf.distribute workers. The
model overflows at its 5th training call, so one process stops at update 5 too
(tests/training/test_metrics.py holds one process to `on_nonfinite: stop`).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.processes import LAUNCH_ENV
from tests.support import REPO, write_run

pytestmark = pytest.mark.slow

STOP_LINE = "stopped at step 5: the loss is not finite (on_nonfinite: stop)"


def _config(tmp_path, distributed):
    payload = {
        # The 5th training call's output is +inf on one replica only (the one numbered overflow_rank).
        "model": {"factory": "tests.distributed.overflow_model:build"},
        "model_params": {"hidden_units": 16, "overflow_at_call": 5, "overflow_rank": 1},
        "data": "synthetic_classification",
        "data_params": {"num_examples": 2000, "num_features": 8, "num_classes": 4},
        "optimizer": "Momentum",
        "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
        # An adaptive scale skips a non-finite gradient; only the loss's verdict stops the run.
        "loss_scaling": "Backoff",
        "on_nonfinite": "stop",
        "batch_size_per_gpu": 16,
        "max_steps": 12,
        "print_loss_steps": 4,
        "eval_steps": None,
        "save_checkpoint_steps": None,
        "save_summaries_steps": None,
        "random_seed": 7,
        "rank_timeout_secs": 60,
        "distributed": distributed,
    }
    return write_run(tmp_path, payload, "stop.yaml", logdir="logdir")


def _train(config, *extra):
    return subprocess.run(
        [sys.executable, "-m", "opt_train", "train", "--config", str(config), *extra],
        cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True, timeout=600,
    )


# One backend: the verdict is the loop's (training/stops.py asks every process through
# `Backend.allreduce_scalar`, op max), the same for Horovod ranks, whose allreduce_scalar is held to
# every rank's values in tests/distributed/test_horovod_backend.py and
# tests/e2e/test_equal_to_one_process.py (test_a_number_reduced_across_processes_is_every_processs).
def test_a_non_finite_loss_on_one_worker_stops_every_worker_at_that_update(tmp_path):
    job = _train(_config(tmp_path, "tf"), "--np", "2")
    output = job.stdout + job.stderr
    assert job.returncode == 1, output
    lines = output.splitlines()
    # The chief's line as it is, the other worker's behind its name: both stopped, for the loss.
    assert f"Error: {STOP_LINE}" in lines, output
    assert f"[worker 1] Error: {STOP_LINE}" in lines, output
    assert "another" not in output, output  # no worker blamed for a broken connection
