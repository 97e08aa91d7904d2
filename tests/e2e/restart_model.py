"""A model factory for the restart tests: an MLP whose process kills itself with SIGKILL at a given training call.

Used as `model: {factory: "tests.e2e.restart_model:build"}`. The layer counts the
training calls of its process (one per update) and, at the `kill_at_call`-th, SIGKILLs
the process when it is tf.distribute worker `kill_worker` (its TF_CONFIG task) and the
launcher's OPT_TRAIN_RESTART_COUNT is below `kill_before`. With `kill_before: 0` it is
the plain MLP, the uninterrupted reference: the layer holds no variable.
"""

from __future__ import annotations

import json
import os
import signal

import keras
import tensorflow as tf


class KillAt(keras.layers.Layer):
    """Identity; its `at_call`-th training call in this process kills the process when it is the worker to kill."""

    def __init__(self, at_call, worker, before, **kwargs):
        super().__init__(**kwargs)
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
        attempt = int(os.environ.get("OPT_TRAIN_RESTART_COUNT", "0"))
        self.armed = task.get("index") == worker and attempt < before
        self.at_call = at_call
        self.calls = 0

    def _count(self):
        self.calls += 1
        if self.armed and self.calls == self.at_call:
            os.kill(os.getpid(), signal.SIGKILL)
        return tf.constant(0.0)

    def call(self, inputs, training=False):
        if not training or not self.armed:
            return inputs
        return inputs + tf.cast(tf.py_function(self._count, [], tf.float32), inputs.dtype)


def build(task, hidden_units=8, kill_at_call=30, kill_worker=1, kill_before=0):
    """The MLP `inputs -> Dense(relu) -> Dense(logits) -> KillAt`."""
    inputs = keras.Input(task.input_shape)
    hidden = keras.layers.Dense(hidden_units, activation="relu")(inputs)
    logits = keras.layers.Dense(task.output_dim)(hidden)
    return keras.Model(inputs, KillAt(kill_at_call, kill_worker, kill_before)(logits))
