"""Tests for AdagradDA against TF1's AdagradDAOptimizer (global step based) and NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.adagrad_da import AdagradDA
from parity import assert_defaults, assert_parity, tf1_defaults

V1 = tf.compat.v1.train


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.01, 0.02), (0.0, 0.05)])
def test_matches_tf1(sparse, l1, l2):
    assert_parity(
        lambda lr: AdagradDA(lr, 0.1, l1, l2),
        lambda lr, global_step: V1.AdagradDAOptimizer(lr, global_step, 0.1, l1, l2),
        sparse=sparse,
    )


def test_two_steps_by_hand_use_the_step_count():
    lr, l1, l2, s0 = 0.5, 0.1, 0.2, 0.1
    var = tf.Variable([0.3, -0.4])
    opt = AdagradDA(lr, initial_gradient_squared_accumulator_value=s0,
                    l1_regularization_strength=l1, l2_regularization_strength=l2)
    sums, squares = np.zeros(2), np.full(2, s0)
    for t, grad in enumerate([np.array([1.0, -0.05]), np.array([0.5, -0.1])], start=1):
        opt.apply_gradients([(tf.constant(grad, tf.float32), var)])
        sums, squares = sums + grad, squares + grad**2
        shrunk = np.sign(sums) * np.maximum(np.abs(sums) - l1 * t, 0.0)
        expected = -lr * shrunk / (lr * l2 * t + np.sqrt(squares))
        np.testing.assert_allclose(var.numpy(), expected, rtol=1e-6)
    assert var.numpy()[1] == 0.0  # |sum| below l1 * t: exactly zero
    assert opt.get_slot_names() == ["gradient_accumulator", "gradient_squared_accumulator"]


def test_defaults_match_tf1():
    assert_defaults(AdagradDA, tf1_defaults(V1.AdagradDAOptimizer))
    assert_defaults(AdagradDA, {"learning_rate": 0.01})


def test_initial_accumulator_must_be_positive():
    with pytest.raises(ValueError, match=r"Received: initial_gradient_squared_accumulator_value=-0.1"):
        AdagradDA(initial_gradient_squared_accumulator_value=-0.1)


def test_config_round_trip():
    opt = AdagradDA(0.2, l1_regularization_strength=0.01)
    clone = AdagradDA.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()


def test_tf1_positional_global_step_is_refused():
    with pytest.raises(ValueError, match="takes no `global_step`"):
        AdagradDA(0.1, tf.Variable(3, dtype=tf.int64))
