"""Mixed precision: dtype policy names against Keras's DTypePolicy, and float32 master weights
against a float32 Keras optimizer run on the same gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.mixed_precision import (
    MixedPrecisionOptimizerWrapper,
    dtype_policy_name,
    needs_master_weights,
)
from opt_train.optimizers.pipeline import optimize_loss


@pytest.mark.parametrize(
    "dtype, variable_dtype, computed",
    [("float32", "float32", "float32"), ("mixed", "float32", "float16"),
     ("mixed_bfloat16", "float32", "bfloat16"), ("float16", "float16", "float16"),
     ("bfloat16", "bfloat16", "bfloat16")],
)
def test_policy_names_match_keras(dtype, variable_dtype, computed):
    policy = keras.DTypePolicy(dtype_policy_name(dtype))
    assert (policy.variable_dtype, policy.compute_dtype) == (variable_dtype, computed)
    assert needs_master_weights(dtype) == (variable_dtype != "float32")


def test_unknown_dtype():
    with pytest.raises(ValueError, match="unknown dtype 'float61'"):
        dtype_policy_name("float61")


def test_master_weights_follow_a_float32_run():
    rng = np.random.default_rng(0)
    start = rng.normal(size=(5,)).astype(np.float32)
    grads = [rng.normal(size=(5,)).astype(np.float32) * 1e-3 for _ in range(30)]
    low = tf.Variable(start.astype(np.float16))
    plain = tf.Variable(start.astype(np.float16).astype(np.float32))
    bias = tf.Variable(np.ones(2, np.float32))  # a float32 variable is updated directly
    wrapper = MixedPrecisionOptimizerWrapper(keras.optimizers.Adam(0.01))
    reference = keras.optimizers.Adam(0.01)
    for g in grads:
        wrapper.apply([tf.constant(g), tf.constant([1.0, 1.0])], [low, bias])
        reference.apply([tf.constant(g)], [plain])
    np.testing.assert_allclose(wrapper.masters[0].numpy(), plain.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(low.numpy(), plain.numpy().astype(np.float16))
    assert len(wrapper.masters) == 1 and bias.dtype == tf.float32
    assert not np.array_equal(bias.numpy(), [1.0, 1.0])


def test_muon_follows_a_float32_run_and_routes_each_master_as_its_variable():
    """Keras 3's Muon reads a variable's `path` (an embedding's goes to its AdamW rule), so each
    master answers with its variable's path (before, float16 Muon failed: a plain tf.Variable has
    no `path`). Its updates follow a float32 Muon on the same gradients, the embedding by AdamW."""
    rng = np.random.default_rng(1)

    def layers(dtype):
        embedding = keras.layers.Embedding(6, 4, dtype=dtype, name="token_embedding")
        dense = keras.layers.Dense(3, dtype=dtype, name="head")
        embedding.build((None,))
        dense.build((None, 4))
        return [embedding.embeddings, dense.kernel, dense.bias]

    low, plain = layers("float16"), layers("float32")
    for variable, start in zip(plain, low):
        variable.assign(tf.cast(start, tf.float32))
    wrapper = MixedPrecisionOptimizerWrapper(keras.optimizers.Muon(learning_rate=0.01))
    reference = keras.optimizers.Muon(learning_rate=0.01)
    wrapper.build(low)
    assert [m.path for m in wrapper.masters] == [f"{v.path}_master" for v in low]
    routed = [reference._should_use_adamw(v) for v in low]
    assert routed == [True, False, True]  # the embedding and the bias; the 2-D kernel by Muon
    assert [wrapper.optimizer._should_use_adamw(m) for m in wrapper.masters] == routed
    for _ in range(5):
        grads = [tf.constant(rng.normal(size=v.shape).astype(np.float32) * 1e-2) for v in low]
        wrapper.apply(grads, low)
        reference.apply(grads, plain)
    for master, expected in zip(wrapper.masters, plain):
        np.testing.assert_allclose(master.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_mixed_policy_trains_with_float32_variables():
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    x = tf.ones([4, 3])
    start = [v.numpy() for v in model.trainable_variables]

    def loss(batch):
        return tf.reduce_mean(tf.square(tf.cast(model(batch), tf.float32) - 1.0))

    train_op = optimize_loss(loss, "SGD", {"learning_rate": 0.1}, None, var_list=model, dtype="mixed",
                             loss_scaling="Dynamic")
    for _ in range(3):
        result = train_op(x)
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    # Keras's rule: the scale halves once per overflow (float16 gradients above 65504).
    assert bool(result["applied"])
    assert float(result["loss_scale"]) == 2.0 ** (15 - int(result["skipped_steps"]))
    assert not np.array_equal(model.trainable_variables[0].numpy(), start[0])


@pytest.mark.parametrize("shape_of_unused", [(2,), (3,)])
def test_each_gradient_reaches_its_own_master_when_some_variable_has_none(shape_of_unused):
    """A variable the loss does not use is left out of apply; the others keep their own masters."""
    # Starts elsewhere than `used`, so a gradient sent to the wrong master shows.
    unused = tf.Variable(tf.fill(shape_of_unused, tf.constant(3.0, tf.float16)), name="unused")
    used = tf.Variable(tf.ones([2], tf.float16), name="used")
    batch = tf.constant([1.0, 2.0])

    def loss(x):
        return tf.reduce_sum(tf.cast(used, tf.float32) * x)

    train_op = optimize_loss(loss, "GradientDescent", {"learning_rate": 0.5}, var_list=[unused, used], dtype="float16")
    train_op(batch)
    # d loss / d used = batch; plain gradient descent from 1.0 in NumPy.
    np.testing.assert_array_equal(used.numpy(), (1.0 - 0.5 * np.array([1.0, 2.0])).astype(np.float16))
    np.testing.assert_array_equal(unused.numpy(), np.full(shape_of_unused, 3.0, np.float16))
