"""Every optimizer updates alike traced in a `tf.function`, as the training loop runs it, and eagerly,
where its parity test holds it to its reference (TF1's kernels, Keras 3, OpenSeq2Seq, RETURNN).

One problem for all: a dense kernel and an embedding table whose gradient is a `tf.IndexedSlices`
naming a row twice, a learning rate that decays at every update (read at `iterations`), and a few
updates. The slots are built eagerly and the traced side is one `tf.function` without AutoGraph,
as `TrainOp` builds and traces them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import keras

from opt_train.optimizers import registry
from opt_train.optimizers.table import OPTIMIZER_NAMES

UPDATES = 4
# The parameters a rule requires beyond the learning rate.
REQUIRED = {"Momentum": {"momentum": 0.9}}
# Graph optimisations may fuse or reorder a rule's float32 ops: a few ulps, never a different rule.
RTOL, ATOL = 1e-6, 1e-7


def _gradients(seed):
    rng = np.random.default_rng(seed)
    return [
        (tf.constant(rng.normal(size=(4, 3)), tf.float32),
         tf.IndexedSlices(tf.constant(rng.normal(size=(3, 3)), tf.float32), tf.constant([1, 4, 1]),
                          tf.constant([6, 3])))
        for _ in range(UPDATES)
    ]


def _trained(name, traced):
    rng = np.random.default_rng(0)
    # Keras variables, as a model's are.
    weights = [keras.Variable(rng.normal(size=(4, 3)).astype(np.float32), name="kernel"),
               keras.Variable(rng.normal(size=(6, 3)).astype(np.float32), name="table")]
    rate = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1, decay_rate=0.9)
    optimizer = registry.get(name, learning_rate=rate, **REQUIRED.get(name, {}))

    def apply(dense, sparse):
        optimizer.apply([dense, sparse], weights)

    # Slots built eagerly, as `TrainOp.build` builds them (keras#23085).
    optimizer.build(weights)
    step = tf.function(apply, autograph=False) if traced else apply
    for dense, sparse in _gradients(1):
        step(dense, sparse)
    # In creation order; names leave out the numbers Keras gives each instance (`adam_1/...`, `variable_1`).
    return [v.numpy() for v in weights], [(re.sub(r"_\d+", "", v.path.split("/", 1)[-1]), v.numpy())
                                          for v in optimizer.variables]


@pytest.mark.parametrize("name", OPTIMIZER_NAMES)
def test_an_update_traced_as_the_loop_traces_it_equals_the_eager_one(name):
    eager_weights, eager_slots = _trained(name, traced=False)
    graph_weights, graph_slots = _trained(name, traced=True)
    for eager, graph in zip(eager_weights, graph_weights):
        assert not np.array_equal(eager, _trained_start(eager.shape)), f"{name} moved no weight"
        np.testing.assert_allclose(graph, eager, rtol=RTOL, atol=ATOL)
    assert [path for path, _ in graph_slots] == [path for path, _ in eager_slots]
    for (path, graph), (_, eager) in zip(graph_slots, eager_slots):
        np.testing.assert_allclose(graph, eager, rtol=RTOL, atol=ATOL, err_msg=path)


def _trained_start(shape):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(4, 3)).astype(np.float32)
    return kernel if shape == kernel.shape else rng.normal(size=(6, 3)).astype(np.float32)
