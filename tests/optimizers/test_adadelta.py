"""Tests for opt_train.optimizers.adadelta: parity with TF1's AdadeltaOptimizer, defaults."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import assert_defaults, assert_parity, signature_defaults

from opt_train.optimizers.adadelta import Adadelta

TF1Adadelta = tf.compat.v1.train.AdadeltaOptimizer


def _large_lr(step):
    """Adadelta's steps are tiny; a rate near 1 (the paper's form) makes the weights move."""
    return 1.0 + 0.5 * np.sin(step / 3.0)


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize(
    "params", [{}, {"rho": 0.9, "epsilon": 1e-6}], ids=["defaults", "custom"]
)
def test_parity_with_tf1_adadelta(params, sparse):
    assert_parity(
        lambda lr: Adadelta(lr, **params),
        lambda lr: TF1Adadelta(lr, **params),
        sparse=sparse,
        steps=100,
        lr_schedule=_large_lr,
    )


def test_sparse_updates_only_named_rows():
    table = keras.Variable(np.ones((3, 2), np.float32))
    opt = Adadelta(1.0)
    grad = tf.IndexedSlices(tf.ones((2, 2)), tf.constant([2, 2]), tf.constant([3, 2]))
    opt.apply_gradients([(grad, table)])
    np.testing.assert_array_equal(table.numpy()[:2], np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(opt.get_slot(table, "accum").numpy()[:2], 0.0)
    # one row named twice: one update with the summed gradient 2
    rho, eps = np.float32(0.95), np.float32(1e-8)
    accum = (1 - rho) * 4.0
    expected = 1.0 - np.sqrt(eps) / np.sqrt(accum + eps) * 2.0
    np.testing.assert_allclose(table.numpy()[2], [expected, expected], rtol=1e-5)


def test_defaults_match_tf1():
    tf1 = signature_defaults(TF1Adadelta)
    assert_defaults(Adadelta, {k: tf1[k] for k in ("learning_rate", "rho", "epsilon")})


def test_slots_and_config_round_trip():
    var = keras.Variable(np.ones(2, np.float32))
    opt = Adadelta(0.5, rho=0.9, epsilon=1e-6)
    opt.build([var])
    assert opt.get_slot_names() == ["accum", "accum_update"]
    config = opt.get_config()
    assert (config["rho"], config["epsilon"]) == (0.9, 1e-6)
    assert Adadelta.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rho": 1.5}, "`rho` must be in [0, 1]. Received: rho=1.5"),
        ({"epsilon": -1.0}, "`epsilon` must be in [0, inf]. Received: epsilon=-1.0"),
    ],
)
def test_invalid_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        Adadelta(**kwargs)
    assert str(error.value) == message
