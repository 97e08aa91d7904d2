"""A DTensor mesh across two worker processes (`train --np 2` with `mesh:`) against one unsharded process.

Two tf workers of 2 logical CPU devices each form one `{batch: 2, model: 2}` mesh with every
kernel's output dimension on `model`; each worker reads its own half of the global batch of 32.
One run of the workers, with `lr_control`, `early_stopping` and `restore_best_checkpoint` decided
on the chief's evaluation: it must report the losses and evaluations (within 1e-4), change the
rate, stop and keep the best checkpoint, and end with the weights and optimizer state (within
1e-5), where one process without a mesh does on the same global batch; and the checkpoint the
workers wrote at step 4 (in a copy of their logdir without the newer one, as a run stopped after
it leaves it) must resume in one process without a mesh to that same end. The workers run as
real processes (the launcher's TF_CONFIG, DTensor's multi-client set-up); the one-process runs
train in this process.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.distributed.test_mesh import train_here
from tests.e2e.test_tf_launch import ENV, assert_equal_runs, opt_train
from tests.processes import JOB_TIMEOUT_SECONDS
from tests.support import REPO, read_jsonl

pytestmark = pytest.mark.slow

# Every evaluation "fails to improve" by min_delta 10 after the first: the rate halves at steps 4 and 6
# (plateau, patience 1) and early stopping (patience 2) ends the run at step 6 of 12; every evaluation's
# loss is the lowest so far (min_delta 0), so each replaces the best checkpoint, written by both workers.
RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [32]},
    "data": "digits",
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9, "use_nesterov": True},
    "max_steps": 12,
    "print_loss_steps": 1,
    "save_summaries_steps": None,
    "save_checkpoint_steps": 4,
    # The chief evaluates mid-run, alone, while the other worker waits in the next step.
    "eval_steps": 2,
    "early_stopping": {"monitor": "loss", "patience": 2, "min_delta": 10},
    "lr_control": {"mode": "plateau", "monitor": "loss", "patience": 1, "min_delta": 10, "factor": 0.5},
    "restore_best_checkpoint": True,
    "export": False,
    "random_seed": 0,
}
MESH = {"mesh": {"batch": 2, "model": 2}, "layouts": {".*kernel": [None, "model"]}, "batch_size_per_gpu": 16}


def write(tmp, name, config):
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**config, "logdir": str(tmp / name)}))
    return path


def workers(config_path, *settings):
    """`opt-train train --np 2` of `config_path`; its combined output (a failed job fails the test)."""
    import subprocess

    job = subprocess.run(opt_train("train", "--np", 2, "--config", config_path, *settings), cwd=REPO, env=ENV,
                         capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS)
    output = job.stdout + job.stderr
    assert job.returncode == 0, output[-4000:]
    return output


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mesh-workers")
    output = workers(write(tmp, "workers", {**RUN, **MESH, "export": True}))
    # The same mesh run as it stood at its step-4 checkpoint (without best/, which holds step 6's), then resumed
    # by one process without a mesh (which cuts metrics.jsonl back to that step, as after a run stopped there).
    half = write(tmp, "half", {**RUN, **MESH})
    shutil.copytree(tmp / "workers", tmp / "half", ignore=shutil.ignore_patterns("best"))
    newer = [path for path in (tmp / "half" / "checkpoints").iterdir() if path.name.startswith("ckpt-6.")]
    assert newer, sorted(path.name for path in (tmp / "half" / "checkpoints").iterdir())
    for path in newer:
        path.unlink()
    train_here(str(half), "--set", "mesh=null", "--set", "layouts={}", "--set", "batch_size_per_gpu=32", "--resume")
    train_here(str(write(tmp, "reference", {**RUN, "batch_size_per_gpu": 32})))
    return tmp, output


def evaluations(logdir):
    return {record["step"]: record["eval/loss"] for record in read_jsonl(logdir / "metrics.jsonl")
            if "eval/loss" in record}


def test_two_workers_on_one_2x2_mesh_equal_one_process_on_the_global_batch(runs):
    tmp, output = runs
    assert_equal_runs(tmp / "workers", tmp / "reference", range(1, 7))
    evaluated, expected = evaluations(tmp / "workers"), evaluations(tmp / "reference")
    assert sorted(evaluated) == sorted(expected) == [2, 4, 6]
    for step, loss in expected.items():
        assert abs(evaluated[step] - loss) <= 1e-4, (step, evaluated[step], loss)
    # Each worker says what it is, and that the mesh spans both.
    assert "mesh: 2 workers of 2 CPU devices each form one 4-device mesh" in output
    assert "[worker 1] worker 1 of 2: global batch 32 = 2 workers x 1 batch shard x batch_size_per_gpu" in output
    assert "[worker 1] step" not in output  # progress from the chief alone
    assert "Traceback" not in output


def test_the_export_of_a_mesh_across_workers_is_the_unsharded_model(runs):
    """The chief exports alone, after the other worker left: an ordinary model with the run's final weights."""
    import keras
    import numpy as np
    import tensorflow as tf

    tmp, _ = runs
    exported = keras.saving.load_model(tmp / "workers" / "export" / "model.keras", compile=False)
    reader = tf.train.load_checkpoint(str(tmp / "reference" / "checkpoints"))
    expected = [reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
                if key.startswith("model_variables/") and "seed" not in key]
    arrays = [np.asarray(weight) for weight in exported.weights]
    assert len(arrays) == len(expected)
    for value in expected:
        assert any(a.shape == value.shape and np.allclose(a, value, rtol=0, atol=1e-5) for a in arrays)


def test_a_checkpoint_of_the_workers_resumes_in_one_process_without_a_mesh(runs):
    tmp, _ = runs
    assert_equal_runs(tmp / "half", tmp / "reference", range(1, 7))


def test_the_workers_of_a_mesh_share_the_chiefs_decisions_as_one_process_makes_them(runs):
    """lr_control's rates, early stopping's step and the best checkpoint of one process without a mesh."""
    import numpy as np
    import tensorflow as tf

    tmp, output = runs
    assert_equal_runs(tmp / "workers", tmp / "reference", range(1, 7))  # stopped at step 6 of 12
    rates = {logdir: {record["step"]: record["learning_rate"] for record in read_jsonl(tmp / logdir / "metrics.jsonl")
                      if "learning_rate" in record} for logdir in ("workers", "reference")}
    assert rates["workers"] == pytest.approx(rates["reference"], rel=1e-7)
    assert [round(rates["reference"][step], 6) for step in (4, 5, 6)] == [0.1, 0.05, 0.05]
    assert "early stopping at step 6" in output and "[worker 1] done: step 6" in output
    assert "Traceback" not in output
    kept = {logdir: tf.train.latest_checkpoint(str(tmp / logdir / "best")) for logdir in ("workers", "reference")}
    assert kept["workers"].endswith("ckpt-6") and kept["reference"].endswith("ckpt-6")
    best, expected = (tf.train.load_checkpoint(kept[logdir]) for logdir in ("workers", "reference"))
    names = sorted(expected.get_variable_to_shape_map())
    assert sorted(best.get_variable_to_shape_map()) == names
    for name in names:
        if name.startswith(("model_variables/", "optimizer/", "lr_control/", "early_stopping/")):
            # A control's `last` figure is NaN until its first evaluation: NaN on both sides is equal here.
            np.testing.assert_allclose(best.get_tensor(name), expected.get_tensor(name), atol=1e-5, err_msg=name,
                                       equal_nan=not name.startswith(("model_variables/", "optimizer/")))
    # Both hold the rate halved twice; the best was written before early stopping decided at that step.
    final = tf.train.load_checkpoint(str(tmp / "workers" / "checkpoints"))
    factor, stopped = "lr_control/scale/.ATTRIBUTES/VARIABLE_VALUE", "early_stopping/stopped/.ATTRIBUTES/VARIABLE_VALUE"
    assert final.get_tensor(factor) == best.get_tensor(factor) == 0.25
    assert final.get_tensor(stopped) and not best.get_tensor(stopped)
