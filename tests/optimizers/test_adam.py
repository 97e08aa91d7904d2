"""Tests for opt_train.optimizers.adam.Adam: parity with TF1's AdamOptimizer, defaults, errors."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import assert_defaults, assert_parity, signature_defaults

from opt_train.optimizers.adam import Adam

TF1Adam = tf.compat.v1.train.AdamOptimizer


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize(
    "params",
    [{}, {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-3}],
    ids=["defaults", "custom"],
)
def test_parity_with_tf1_adam(params, sparse):
    tf1_params = {"beta1": params.get("beta_1", 0.9), "beta2": params.get("beta_2", 0.999),
                  "epsilon": params.get("epsilon", 1e-8)}
    assert_parity(
        lambda lr: Adam(lr, **params),
        lambda lr: TF1Adam(lr, **tf1_params),
        sparse=sparse,
        steps=100,
    )


def test_sparse_moves_rows_the_gradient_does_not_name():
    """TF1's sparse Adam decays m on every row, so earlier rows keep moving."""
    table = keras.Variable(np.ones((3, 2), np.float32))
    opt = Adam(0.1)
    first = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), tf.constant([3, 2]))
    second = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([1]), tf.constant([3, 2]))
    opt.apply_gradients([(first, table)])
    after_first = table.numpy().copy()
    opt.apply_gradients([(second, table)])
    assert np.all(table.numpy()[0] < after_first[0])  # row 0 not named, still moves
    np.testing.assert_array_equal(table.numpy()[2], [1.0, 1.0])  # never named, m = 0


def test_defaults_match_tf1():
    tf1 = signature_defaults(TF1Adam)
    assert_defaults(
        Adam,
        {"learning_rate": tf1["learning_rate"], "beta_1": tf1["beta1"],
         "beta_2": tf1["beta2"], "epsilon": tf1["epsilon"]},
    )
    assert_defaults(Adam, {"learning_rate": 0.001, "beta_1": 0.9, "beta_2": 0.999,
                           "epsilon": 1e-8})


def test_config_round_trip():
    opt = Adam(0.02, beta_1=0.8, beta_2=0.9, epsilon=0.1, clipnorm=1.0, name="adam_x")
    config = opt.get_config()
    assert {k: config[k] for k in ("beta_1", "beta_2", "epsilon", "clipnorm")} == {
        "beta_1": 0.8, "beta_2": 0.9, "epsilon": 0.1, "clipnorm": 1.0}
    assert Adam.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.5}, "`beta_1` must be in [0, 1). Received: beta_1=1.5"),
        ({"beta_2": 1.0}, "`beta_2` must be in [0, 1). Received: beta_2=1.0"),
        ({"epsilon": -1.0}, "`epsilon` must be in [0, inf]. Received: epsilon=-1.0"),
    ],
)
def test_invalid_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        Adam(**kwargs)
    assert str(error.value) == message


def test_tf1_api_slots_and_global_step():
    var = keras.Variable(np.ones(3, np.float32))
    opt = Adam(0.1)
    global_step = tf.Variable(0, dtype=tf.int64)
    opt.minimize(lambda: tf.reduce_sum(var * var), var_list=[var], global_step=global_step)
    assert int(global_step.numpy()) == 1
    assert opt.get_slot_names() == ["m", "v"]
    # m after one step: (1 - beta_1) * g with g = 2 * var = 2
    np.testing.assert_allclose(opt.get_slot(var, "m").numpy(), np.full(3, 0.2), rtol=1e-6)


def test_keras_base_clipping_applies_before_the_update():
    """`global_clipnorm` from the Keras base is honoured: same as clipping by hand."""
    grad = tf.constant([3.0, 4.0])
    clipped = keras.Variable(np.zeros(2, np.float32))
    by_hand = keras.Variable(np.zeros(2, np.float32))
    Adam(0.1, global_clipnorm=1.0, epsilon=1.0).apply_gradients([(grad, clipped)])
    Adam(0.1, epsilon=1.0).apply_gradients([(grad / 5.0, by_hand)])
    np.testing.assert_allclose(clipped.numpy(), by_hand.numpy(), rtol=1e-6)
    assert not np.allclose(clipped.numpy(), 0.0)


def test_jit_compiled_step_matches_eager():
    grads = [tf.constant([[0.1, -0.2], [0.3, 0.4]]),
             tf.IndexedSlices(tf.constant([[1.0, 2.0]] * 2), tf.constant([0, 0]),
                              tf.constant([3, 2]))]
    results = []
    for jit in (False, True):
        dense = keras.Variable(np.ones((2, 2), np.float32))
        table = keras.Variable(np.ones((3, 2), np.float32))
        opt = Adam(0.1)
        opt.build([dense, table])
        step = tf.function(lambda g0, g1: opt.apply_gradients([(g0, dense), (g1, table)]),
                           jit_compile=True) if jit else (
            lambda g0, g1: opt.apply_gradients([(g0, dense), (g1, table)]))
        for _ in range(3):
            step(*grads)
        results.append((dense.numpy(), table.numpy()))
    for eager, compiled in zip(*results):
        np.testing.assert_allclose(compiled, eager, rtol=1e-6)
