"""Tests for Adagrad and ProximalAdagrad against TF1's optimizers and NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.adagrad import Adagrad, ProximalAdagrad
from parity import assert_defaults, assert_parity, tf1_defaults

V1 = tf.compat.v1.train


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("initial", [0.1, 0.5])
def test_adagrad_matches_tf1(sparse, initial):
    assert_parity(
        lambda lr: Adagrad(lr, initial_accumulator_value=initial),
        lambda lr: V1.AdagradOptimizer(lr, initial_accumulator_value=initial),
        sparse=sparse,
    )


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (0.01, 0.02), (0.0, 0.05)])
def test_proximal_adagrad_matches_tf1(sparse, l1, l2):
    assert_parity(
        lambda lr: ProximalAdagrad(lr, 0.1, l1, l2),
        lambda lr: V1.ProximalAdagradOptimizer(lr, 0.1, l1, l2),
        sparse=sparse,
    )


def test_adagrad_one_step_by_hand():
    var = tf.Variable([1.0, -1.0])
    opt = Adagrad(learning_rate=0.5, initial_accumulator_value=0.2)
    grad = np.array([0.3, -2.0], np.float32)
    opt.apply_gradients([(tf.constant(grad), var)])
    accum = 0.2 + grad**2
    np.testing.assert_allclose(var.numpy(), [1.0, -1.0] - 0.5 * grad / np.sqrt(accum), rtol=1e-6)
    np.testing.assert_allclose(opt.get_slot(var, "accumulator").numpy(), accum, rtol=1e-6)


def test_sparse_repeated_rows_are_summed_first():
    table = tf.Variable(np.zeros((3, 1), np.float32))
    grad = tf.IndexedSlices(tf.constant([[1.0], [1.0]]), tf.constant([0, 0]))
    Adagrad(1.0, initial_accumulator_value=0.1).apply_gradients([(grad, table)])
    # one update with g = 2 (accumulator 0.1 + 4), not two updates with g = 1
    np.testing.assert_allclose(table.numpy()[0], [-2.0 / np.sqrt(4.1)], rtol=1e-6)


def test_defaults_match_tf1():
    assert_defaults(Adagrad, tf1_defaults(V1.AdagradOptimizer))
    assert_defaults(ProximalAdagrad, tf1_defaults(V1.ProximalAdagradOptimizer))
    assert_defaults(Adagrad, {"learning_rate": 0.01})


@pytest.mark.parametrize("cls", [Adagrad, ProximalAdagrad])
def test_initial_accumulator_must_be_positive(cls):
    with pytest.raises(ValueError, match=r"`initial_accumulator_value` must be in \(0.0, inf\]. "
                       r"Received: initial_accumulator_value=0.0"):
        cls(initial_accumulator_value=0.0)


def test_config_round_trip():
    opt = ProximalAdagrad(0.2, initial_accumulator_value=0.3, l2_regularization_strength=0.1)
    clone = ProximalAdagrad.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()
    assert clone.initial_accumulator_value == 0.3


@pytest.mark.parametrize("sparse", [False, True])
def test_adagrad_matches_tf1_in_float64(sparse):
    assert_parity(
        lambda lr: Adagrad(lr),
        lambda lr: V1.AdagradOptimizer(lr),
        sparse=sparse,
        dtype=np.float64,
        steps=30,
    )
