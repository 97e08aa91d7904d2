"""A model factory for the distributed tests: an MLP whose loss overflows once, on one replica.

Used as `model: {factory: "tests.distributed.overflow_model:build"}`. The layer
counts its training calls (one per micro-batch) and adds +inf to its output on the
`overflow_at_call`-th call, but only on the replica whose number is `overflow_rank`:
Horovod's rank (HOROVOD_RANK) plus the tf.distribute replica's id in the job (a
plain process is 0). The gradient of that micro-batch is then non-finite there alone.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf


class OverflowOnce(keras.layers.Layer):
    """Identity, except that the `at_call`-th training call on rank `on_rank` returns +inf."""

    def __init__(self, at_call, on_rank, **kwargs):
        super().__init__(**kwargs)
        self.at_call = at_call
        self.on_rank = on_rank
        self.process_rank = int(os.environ.get("HOROVOD_RANK", "0"))
        # Each replica counts its own calls (ON_READ: replica-local under a strategy).
        self.calls = tf.Variable(0, dtype=tf.int64, trainable=False, name="training_calls",
                                 synchronization=tf.VariableSynchronization.ON_READ,
                                 aggregation=tf.VariableAggregation.SUM)

    def call(self, inputs, training=False):
        if not training:
            return inputs
        calls = self.calls.assign_add(1)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        here = tf.equal(tf.cast(replica, tf.int64) + self.process_rank, self.on_rank)
        overflow = tf.logical_and(here, tf.equal(calls, self.at_call))
        return inputs + tf.where(overflow, tf.constant(float("inf"), inputs.dtype), tf.zeros((), inputs.dtype))


def build(task, hidden_units=16, overflow_at_call=5, overflow_rank=1):
    """The MLP `inputs -> Dense(relu) -> Dense(logits) -> OverflowOnce`."""
    inputs = keras.Input(task.input_shape)
    hidden = keras.layers.Dense(hidden_units, activation="relu")(inputs)
    logits = keras.layers.Dense(task.output_dim)(hidden)
    outputs = OverflowOnce(overflow_at_call, overflow_rank)(logits)
    return keras.Model(inputs, keras.ops.cast(outputs, "float32"))
