"""Tests for Momentum against TF1's MomentumOptimizer, Keras SGD and NumPy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.momentum import Momentum
from parity import assert_defaults, assert_parity, run_parity, tf1_defaults

V1 = tf.compat.v1.train


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("nesterov", [False, True])
def test_matches_tf1(sparse, nesterov):
    assert_parity(
        lambda lr: Momentum(lr, 0.9, use_nesterov=nesterov),
        lambda lr: V1.MomentumOptimizer(lr, 0.9, use_nesterov=nesterov),
        sparse=sparse,
    )


def test_accumulation_form_differs_from_keras_sgd_when_lr_changes():
    # TF1 multiplies the accumulated raw gradients by today's rate; Keras SGD's
    # velocity holds gradients times past rates. With a changing rate they part.
    diff = run_parity(
        lambda lr: Momentum(lr, 0.9),
        lambda lr: keras.optimizers.SGD(lr, momentum=0.9),
        steps=20,
    )
    assert diff > 1e-3


def test_two_steps_by_hand():
    var = tf.Variable([1.0, 2.0])
    opt = Momentum(learning_rate=0.1, momentum=0.5)
    grads = [np.array([1.0, -1.0], np.float32), np.array([0.5, 0.5], np.float32)]
    accum, expected = np.zeros(2), np.array([1.0, 2.0])
    for grad in grads:
        opt.apply_gradients([(tf.constant(grad), var)])
        accum = 0.5 * accum + grad
        expected = expected - 0.1 * accum
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(opt.get_slot(var, "momentum").numpy(), accum, rtol=1e-6)
    assert opt.get_slot_names() == ["momentum"]


def test_sparse_leaves_unused_rows_alone():
    table = tf.Variable(np.ones((4, 2), np.float32))
    opt = Momentum(0.1, 0.9)
    opt.apply_gradients([(tf.IndexedSlices(tf.ones((1, 2)), tf.constant([1])), table)])
    opt.apply_gradients([(tf.IndexedSlices(tf.ones((1, 2)), tf.constant([2])), table)])
    # row 1 keeps its first update only: its accumulator was not applied again
    np.testing.assert_allclose(table.numpy()[1], [0.9, 0.9], rtol=1e-6)
    np.testing.assert_allclose(table.numpy()[[0, 3]], 1.0)


def test_defaults_match_tf1():
    expected = tf1_defaults(V1.MomentumOptimizer, skip=("learning_rate", "momentum"))
    assert_defaults(Momentum, expected)
    assert_defaults(Momentum, {"learning_rate": 0.01})


def test_momentum_is_required():
    with pytest.raises(ValueError, match=r"`momentum` is required.*Received: momentum=None"):
        Momentum(0.1)


def test_config_round_trip():
    opt = Momentum(0.2, momentum=0.8, use_nesterov=True)
    clone = Momentum.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()
    assert clone.use_nesterov is True and clone.momentum == 0.8
