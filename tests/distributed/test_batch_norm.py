"""Batch normalization past one process: replicas normalize their own batches, and say so; synchronized, they equal one process.

Real `opt-train train` runs, 2 replicas on 2 logical CPU devices against 1 process on the
doubled batch. The two 2-replica runs share one fresh process (the CPU is split into
devices before TensorFlow starts, which this process cannot do once it ran TensorFlow),
one command after the other; the one-process reference trains in this process.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.support import END_WITHOUT_TEARDOWN, REPO, bare_environ, write_run

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


# Each run's output ends with END, on stdout and on stderr.
END = "@@ run ended"
RUNS_IN_ONE_PROCESS = (
    "import os, sys\n"
    "from opt_train.cli.main import main\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        main(['train', '--config', path])\n"
    "    except SystemExit as stop:\n"
    "        if stop.code:\n"
    "            raise\n"
    f"    print({END!r}, flush=True)\n"
    f"    print({END!r}, file=sys.stderr, flush=True)\n"
) + END_WITHOUT_TEARDOWN  # the runs' files are closed


def write_config(tmp_path, name, synchronized, replicas):
    config = {**RUN, "model_params": {"synchronized": synchronized}, "batch_size_per_gpu": 32 // replicas,
              "num_gpus": replicas}
    return write_run(tmp_path, config, f"{name}.yaml", logdir=name)


def train_replicas(tmp_path, runs):
    """Trains `runs` ({name: synchronized}, 2 replicas each) one after the other in one fresh process.

    Returns {name: (its output, its model variables)}.
    """
    paths = [str(write_config(tmp_path, name, synchronized, replicas=2)) for name, synchronized in runs.items()]
    job = subprocess.run([sys.executable, "-c", RUNS_IN_ONE_PROCESS, *paths], cwd=REPO,
                         capture_output=True, text=True, timeout=600,
                         env=bare_environ())
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    outs, errs = job.stdout.split(END), job.stderr.split(END)
    assert len(outs) == len(errs) == len(runs) + 1, job.stdout[-2000:] + job.stderr[-3000:]
    return {name: (out + err, model_variables(tmp_path / name)) for name, out, err in zip(runs, outs, errs)}


def model_variables(logdir):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model_variables/")}


def test_replicas_normalize_their_own_batch_and_say_so_synchronized_they_equal_one_process(tmp_path, cli):
    # One process: the layer's moments are its batch's.
    assert cli("train", "--config", write_config(tmp_path, "one", synchronized=True, replicas=1)).exit_code == 0
    one = model_variables(tmp_path / "one")
    # The synchronized run first: the note the local run must print cannot have been said before it.
    runs = train_replicas(tmp_path, {"synchronized": True, "local": False})
    (synchronized_output, synchronized), (local_output, local) = runs["synchronized"], runs["local"]
    assert len(one) == 8  # 2 dense kernels and biases; gamma, beta, moving mean and variance
    assert NOTE in local_output and "synchronized=True" in local_output
    assert NOTE not in synchronized_output
    for key, value in one.items():
        np.testing.assert_allclose(synchronized[key], value, rtol=0, atol=1e-5, err_msg=key)
    # Each replica's half-batch moments: the weights part from one process's.
    assert max(np.max(np.abs(local[key] - value)) for key, value in one.items()) > 1e-3
