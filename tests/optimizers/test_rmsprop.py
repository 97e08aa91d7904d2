"""Tests for opt_train.optimizers.rmsprop: parity with TF1's RMSPropOptimizer, defaults, errors."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import REQUIRED, assert_defaults, assert_parity, signature_defaults

from opt_train.optimizers.rmsprop import RMSProp

TF1RMSProp = tf.compat.v1.train.RMSPropOptimizer

SETTINGS = {
    "defaults": {},
    "momentum": {"rho": 0.8, "momentum": 0.9, "epsilon": 1e-6},
    "centered": {"rho": 0.85, "momentum": 0.5, "epsilon": 1e-4, "centered": True},
}


def _tf1_params(params):
    renamed = {"rho": "decay"}
    return {renamed.get(k, k): v for k, v in params.items()}


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_parity_with_tf1_rmsprop(setting, sparse):
    params = SETTINGS[setting]
    assert_parity(
        lambda lr: RMSProp(lr, **params),
        lambda lr: TF1RMSProp(lr, **_tf1_params(params)),
        sparse=sparse,
        steps=100,
    )


def test_sparse_leaves_unnamed_rows_and_slots_alone():
    table = keras.Variable(np.ones((3, 2), np.float32))
    opt = RMSProp(0.1, momentum=0.9)
    for _ in range(2):
        grad = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([1]), tf.constant([3, 2]))
        opt.apply_gradients([(grad, table)])
    np.testing.assert_array_equal(table.numpy()[[0, 2]], np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(opt.get_slot(table, "rms").numpy()[[0, 2]], 1.0)
    assert np.all(table.numpy()[1] < 1.0)


def test_defaults_match_tf1():
    tf1 = signature_defaults(TF1RMSProp)
    assert tf1["learning_rate"] is REQUIRED  # ours defaults to 0.01 instead
    assert_defaults(
        RMSProp,
        {"learning_rate": 0.01, "rho": tf1["decay"], "momentum": tf1["momentum"],
         "epsilon": tf1["epsilon"], "centered": tf1["centered"]},
    )


def test_slots_follow_tf1_names_and_rms_starts_at_one():
    var = keras.Variable(np.zeros((2,), np.float32))
    plain, centered = RMSProp(0.1), RMSProp(0.1, centered=True)
    for opt in (plain, centered):
        opt.build([var])
    assert plain.get_slot_names() == ["momentum", "rms"]
    assert centered.get_slot_names() == ["mg", "momentum", "rms"]
    np.testing.assert_array_equal(plain.get_slot(var, "rms").numpy(), [1.0, 1.0])


def test_config_round_trip():
    opt = RMSProp(0.001, rho=0.8, momentum=0.9, epsilon=1e-6, centered=True, weight_decay=0.01)
    config = opt.get_config()
    assert (config["rho"], config["momentum"], config["centered"]) == (0.8, 0.9, True)
    assert RMSProp.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rho": 1.5}, "`rho` must be in [0, 1]. Received: rho=1.5"),
        ({"momentum": -0.1}, "`momentum` must be in [0, inf]. Received: momentum=-0.1"),
        ({"epsilon": -1e-3}, "`epsilon` must be in [0, inf]. Received: epsilon=-0.001"),
    ],
)
def test_invalid_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        RMSProp(**kwargs)
    assert str(error.value) == message


def test_keras_weight_decay_is_decoupled_and_scaled_by_lr():
    """The Keras base's weight_decay shrinks weights by lr * wd before the step."""
    var = keras.Variable(np.full(2, 2.0, np.float32))
    RMSProp(0.1, weight_decay=0.5).apply_gradients([(tf.zeros(2), var)])
    np.testing.assert_allclose(var.numpy(), 2.0 * (1 - 0.1 * 0.5), rtol=1e-6)
