"""Tests for ReturnnNadam against a NumPy transcription of RETURNN's NadamOptimizer (returnn/tf/updater.py).

RETURNN's NadamOptimizer is TF1's Adam with `use_nesterov=True` in the fused kernel (dense) and its
own `_apply_sparse_shared` (sparse). Written out from that code, with t counting this update:

    lr_t  = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
    m     = beta1 * m + (1 - beta1) * g
    v     = beta2 * v + (1 - beta2) * g^2
    dense:  var -= lr_t * (beta1 * m + (1 - beta1) * g) / (sqrt(v) + eps)
    sparse: m, v decay on every row; only the gradient's rows of var move, by the same formula.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import get
from opt_train.optimizers.returnn_nadam import ReturnnNadam
from tests.support import write_run

GRADIENTS = [
    np.array([[0.5, -1.0], [2.0, 0.1], [-0.3, 0.7]], np.float64),
    np.array([[-0.2, 0.4], [1.0, -0.5], [0.0, 0.9]], np.float64),
    np.array([[1.5, 0.3], [-0.7, 0.2], [0.6, -1.1]], np.float64),
    np.array([[0.1, 0.1], [0.2, -0.2], [-0.4, 0.3]], np.float64),
]
START = np.array([[1.0, -2.0], [0.5, 0.25], [3.0, -1.5]], np.float64)


def returnn_nadam(start, gradients, lr, beta1, beta2, eps, rows=None):
    """RETURNN's update rule in float64; `rows` gives each gradient's named rows (sparse path)."""
    var, m, v = start.copy(), np.zeros_like(start), np.zeros_like(start)
    for t, grad in enumerate(gradients, start=1):
        lr_t = lr * np.sqrt(1 - beta2**t) / (1 - beta1**t)
        if rows is None:
            m = beta1 * m + (1 - beta1) * grad
            v = beta2 * v + (1 - beta2) * grad**2
            var = var - lr_t * (beta1 * m + (1 - beta1) * grad) / (np.sqrt(v) + eps)
        else:
            named, values = rows[t - 1], grad[rows[t - 1]]
            m = beta1 * m
            m[named] += (1 - beta1) * values
            m_bar = (1 - beta1) * values + beta1 * m[named]
            v = beta2 * v
            v[named] += (1 - beta2) * values**2
            var[named] -= lr_t * m_bar / (np.sqrt(v[named]) + eps)
    return var


@pytest.mark.parametrize(
    "params", [{}, {"beta_1": 0.8, "beta_2": 0.95, "epsilon": 1e-3}], ids=["defaults", "custom"]
)
def test_dense_steps_follow_returnns_rule(params):
    variable = keras.Variable(START.astype(np.float32))
    optimizer = ReturnnNadam(0.05, **params)
    for grad in GRADIENTS:
        optimizer.apply_gradients([(tf.constant(grad, tf.float32), variable)])
    expected = returnn_nadam(START, GRADIENTS, 0.05, params.get("beta_1", 0.9), params.get("beta_2", 0.999),
                             params.get("epsilon", 1e-8))
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_sparse_steps_follow_returnns_sparse_path():
    rows = [[0, 2], [1], [2, 0], [1, 2]]
    variable = keras.Variable(START.astype(np.float32))
    optimizer = ReturnnNadam(0.05)
    for grad, named in zip(GRADIENTS, rows):
        slices = tf.IndexedSlices(tf.constant(grad[named], tf.float32), tf.constant(named), tf.constant([3, 2]))
        optimizer.apply_gradients([(slices, variable)])
    expected = returnn_nadam(START, GRADIENTS, 0.05, 0.9, 0.999, 1e-8, rows=rows)
    np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_differs_from_keras_nadam():
    """The reason it exists: Keras' Nadam (Dozat's schedule) gives other numbers on the same steps."""
    ours, theirs = keras.Variable(START.astype(np.float32)), keras.Variable(START.astype(np.float32))
    returnn, keras_nadam = ReturnnNadam(0.05), keras.optimizers.Nadam(0.05, epsilon=1e-8)
    for grad in GRADIENTS:
        returnn.apply_gradients([(tf.constant(grad, tf.float32), ours)])
        keras_nadam.apply_gradients([(tf.constant(grad, tf.float32), theirs)])
    assert np.abs(ours.numpy() - theirs.numpy()).max() > 1e-3


def test_registered_and_round_trips():
    optimizer = get("returnnnadam", learning_rate=0.02, beta1=0.8, epsilon=1e-16)
    assert isinstance(optimizer, ReturnnNadam)
    config = optimizer.get_config()
    assert (config["beta_1"], config["epsilon"]) == (0.8, 1e-16)
    assert ReturnnNadam.from_config(config).get_config() == config


def test_bad_beta_names_the_argument():
    with pytest.raises(ValueError, match="beta_1"):
        ReturnnNadam(0.01, beta_1=1.5)


@pytest.mark.parametrize(
    "block", [{"class": "nadam"}, {"class": "NadamOptimizer", "epsilon": 1e-8}, "tf.contrib.opt.NadamOptimizer"]
)
def test_returnns_optimizer_block_in_yaml_is_returnns_nadam(block, tmp_path):
    from opt_train.config import load_config

    path = write_run(tmp_path, {"model": "mlp", "data": "digits", "optimizer": block, "max_steps": 5}, "c.yaml")
    config = load_config([path])
    assert config.optimizer == "ReturnnNadam"
    # Keras' Nadam keeps its own name.
    path = write_run(tmp_path, {"model": "mlp", "data": "digits", "optimizer": "Nadam", "max_steps": 5}, "c.yaml")
    assert load_config([path]).optimizer == "Nadam"
