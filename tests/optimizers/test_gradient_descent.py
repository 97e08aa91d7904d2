"""Tests for GradientDescent and ProximalGradientDescent against TF1's optimizers and NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.gradient_descent import GradientDescent, ProximalGradientDescent
from parity import assert_defaults, assert_parity, tf1_defaults

V1 = tf.compat.v1.train


@pytest.mark.parametrize("sparse", [False, True])
def test_gradient_descent_matches_tf1(sparse):
    assert_parity(
        lambda lr: GradientDescent(lr),
        lambda lr: V1.GradientDescentOptimizer(lr),
        sparse=sparse,
    )


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.01, 0.0), (0.02, 0.05)])
def test_proximal_gradient_descent_matches_tf1(sparse, l1, l2):
    assert_parity(
        lambda lr: ProximalGradientDescent(lr, l1, l2),
        lambda lr: V1.ProximalGradientDescentOptimizer(lr, l1, l2),
        sparse=sparse,
    )


def test_proximal_gradient_descent_one_step_by_hand():
    lr, l1, l2 = 0.5, 0.1, 0.2
    start = np.array([1.0, -0.3, 0.05], np.float32)
    grad = np.array([0.4, 0.2, 0.0], np.float32)
    var = tf.Variable(start)
    ProximalGradientDescent(lr, l1, l2).apply_gradients([(tf.constant(grad), var)])
    prox = start - lr * grad
    expected = np.sign(prox) * np.maximum(np.abs(prox) - lr * l1, 0.0) / (1 + lr * l2)
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-6)
    assert var.numpy()[2] == 0.0  # shrunk to exactly zero: the point of l1


def test_defaults_match_tf1():
    assert_defaults(ProximalGradientDescent, tf1_defaults(V1.ProximalGradientDescentOptimizer))
    assert_defaults(GradientDescent, {"learning_rate": 0.01})
    assert_defaults(ProximalGradientDescent, {"learning_rate": 0.01})


def test_config_round_trip():
    opt = ProximalGradientDescent(0.3, l1_regularization_strength=0.1, clipnorm=1.0)
    clone = ProximalGradientDescent.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()
    assert clone.l1_regularization_strength == 0.1
    assert clone.clipnorm == 1.0


def test_negative_l1_is_rejected():
    with pytest.raises(ValueError, match=r"`l1_regularization_strength` must be in \[0.0, inf\]. "
                       r"Received: l1_regularization_strength=-1"):
        ProximalGradientDescent(l1_regularization_strength=-1)


def test_pipeline_arguments_are_rejected():
    with pytest.raises(ValueError, match="iter_size"):
        GradientDescent(gradient_accumulation_steps=4)


def test_keras_base_weight_decay_applies():
    var = tf.Variable([2.0])
    GradientDescent(0.1, weight_decay=0.5).apply_gradients([(tf.constant([0.0]), var)])
    np.testing.assert_allclose(var.numpy(), [2.0 - 0.1 * 0.5 * 2.0], rtol=1e-6)
