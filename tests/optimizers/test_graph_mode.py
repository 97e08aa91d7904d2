"""Every optimizer updates alike traced in a `tf.function`, as the training loop runs it (and XLA-compiled,
as it runs it with `jit_compile: true`), and eagerly, where its parity test holds it to its reference
(TF1's kernels, Keras 3, OpenSeq2Seq, RETURNN).

One problem for all: a dense kernel and an embedding table whose gradient is a `tf.IndexedSlices`
naming a row twice, a learning rate that decays at every update (read at `iterations`), and a few
updates. The slots are built eagerly and the traced side is one `tf.function` without AutoGraph,
as `TrainOp` builds and traces them.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import tensorflow as tf

import keras

from opt_train.optimizers import registry
from opt_train.optimizers.table import OPTIMIZER_NAMES, TABLE

UPDATES = 4
# The parameters a rule requires beyond the learning rate.
REQUIRED = {"Momentum": {"momentum": 0.9}}
# Graph optimisations may fuse or reorder a rule's float32 ops (XLA more of them): a few ulps, never a
# different rule.
TOLERANCES = {"graph": (1e-6, 1e-7), "xla": (1e-5, 1e-6)}
# The rules whose sparse update is one of TF1's fused `ResourceSparseApply*` kernels.
SPARSE_KERNELS = ("Momentum", "Adagrad", "Ftrl", "RMSProp")


def _gradients(seed):
    rng = np.random.default_rng(seed)
    return [
        (tf.constant(rng.normal(size=(4, 3)), tf.float32),
         tf.IndexedSlices(tf.constant(rng.normal(size=(3, 3)), tf.float32), tf.constant([1, 4, 1]),
                          tf.constant([6, 3])))
        for _ in range(UPDATES)
    ]


@functools.lru_cache(maxsize=None)  # the eager run once for both traced kinds
def _trained(name, how):
    # Keras variables, as a model's are.
    kernel, table = _start()
    weights = [keras.Variable(kernel, name="kernel"), keras.Variable(table, name="table")]
    rate = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1, decay_rate=0.9)
    optimizer = registry.get(name, learning_rate=rate, **REQUIRED.get(name, {}))

    def apply(dense, sparse):
        optimizer.apply([dense, sparse], weights)

    # Slots built eagerly, as `TrainOp.build` builds them (keras#23085).
    optimizer.build(weights)
    step = apply if how == "eager" else tf.function(apply, autograph=False, jit_compile=how == "xla")
    for dense, sparse in _gradients(1):
        step(dense, sparse)
    # In creation order; names leave out the numbers Keras gives each instance (`adam_1/...`, `variable_1`).
    return [v.numpy() for v in weights], [(re.sub(r"_\d+", "", v.path.split("/", 1)[-1]), v.numpy())
                                          for v in optimizer.variables]


def _cases():
    for name in OPTIMIZER_NAMES:
        yield pytest.param(name, "graph")
        if TABLE[name].keras_class:
            continue  # Keras 3's own update, which Keras compiles for XLA itself
        # XLA compiles for ~0.3 s a rule: the fast subset keeps the rules with TF1's sparse kernels.
        marks = () if name in SPARSE_KERNELS else (pytest.mark.slow,)
        yield pytest.param(name, "xla", marks=marks)


@pytest.mark.parametrize("name, how", _cases())
def test_an_update_traced_as_the_loop_traces_it_equals_the_eager_one(name, how):
    """XLA: TF1's sparse kernels (`ResourceSparseApply*`) have no XLA form; before, Momentum,
    Adagrad, Ftrl and RMSProp failed to compile a sparse update (`jit_compile: true` with an
    embedding)."""
    rtol, atol = TOLERANCES[how]
    eager_weights, eager_slots = _trained(name, "eager")
    traced_weights, traced_slots = _trained(name, how)
    for eager, traced, start in zip(eager_weights, traced_weights, _start()):
        assert not np.array_equal(eager, start), f"{name} moved no weight"
        np.testing.assert_allclose(traced, eager, rtol=rtol, atol=atol)
    assert [path for path, _ in traced_slots] == [path for path, _ in eager_slots]
    for (path, traced), (_, eager) in zip(traced_slots, eager_slots):
        np.testing.assert_allclose(traced, eager, rtol=rtol, atol=atol, err_msg=path)


def _start():
    rng = np.random.default_rng(0)
    return [rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(6, 3)).astype(np.float32)]
