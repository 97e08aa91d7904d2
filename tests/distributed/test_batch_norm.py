"""Batch normalization past one process: replicas normalize their own batches, and say so; synchronized, they equal one process.

Real `opt-train train` processes, 2 replicas on 2 logical CPU devices (a fresh process:
the devices are split before TensorFlow starts) against 1 process on the doubled batch.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import yaml

from tests.support import REPO

pytestmark = pytest.mark.slow

RUN = {
    "model": {"factory": "tests.distributed.batch_norm_model:build"},
    "data": "synthetic_classification",
    "data_params": {"num_examples": 2000, "num_features": 8, "num_classes": 4},
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
    "max_steps": 5,
    "print_loss_steps": 5,
    "save_checkpoint_steps": 5,
    "eval_steps": None,
}
NOTE = "BatchNormalization layer(s) normalize each replica's own batch_size_per_gpu=16 examples"


def train(tmp_path, name, synchronized, replicas):
    config = {**RUN, "model_params": {"synchronized": synchronized}, "logdir": str(tmp_path / name),
              "batch_size_per_gpu": 32 // replicas, "num_gpus": replicas}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    job = subprocess.run([sys.executable, "-m", "opt_train", "train", "--config", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    return job.stdout + job.stderr, model_variables(tmp_path / name)


def model_variables(logdir):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model_variables/")}


def test_replicas_normalize_their_own_batch_and_say_so_synchronized_they_equal_one_process(tmp_path):
    _, one = train(tmp_path, "one", synchronized=True, replicas=1)  # one process: the layer's moments are its batch's
    local_output, local = train(tmp_path, "local", synchronized=False, replicas=2)
    synchronized_output, synchronized = train(tmp_path, "synchronized", synchronized=True, replicas=2)
    assert len(one) == 8  # 2 dense kernels and biases; gamma, beta, moving mean and variance
    assert NOTE in local_output and "synchronized=True" in local_output
    assert NOTE not in synchronized_output
    for key, value in one.items():
        np.testing.assert_allclose(synchronized[key], value, rtol=0, atol=1e-5, err_msg=key)
    # Each replica's half-batch moments: the weights part from one process's.
    assert max(np.max(np.abs(local[key] - value)) for key, value in one.items()) > 1e-3
