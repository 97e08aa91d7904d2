"""Tests for NormalizedSGD against reference 000's rule (SGD on `l2_normalize(g)`) in NumPy."""

import numpy as np
import pytest
import tensorflow as tf
from parity import REQUIRED, assert_defaults, assert_parity
from test_custom import adaptive_lr_schedule, numpy_reference, touched

from opt_train.optimizers import registry
from opt_train.optimizers.normalized_sgd import NormalizedSGD


def normalized_sgd_rule(w, g, rows, slots, lr, t):
    sel = touched(rows)
    # tf.nn.l2_normalize: x / sqrt(max(sum(x^2), 1e-12)), over the whole gradient.
    norm = np.sqrt(np.maximum(np.sum(g * g), np.float32(1e-12)))
    w[sel] -= lr * (g[sel] / norm)
    return w, {}


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.one_case_fast
def test_matches_numpy_rule(sparse):
    assert_parity(
        lambda lr: NormalizedSGD(learning_rate=lr),
        numpy_reference(normalized_sgd_rule, ()),
        sparse=sparse,
        steps=100,
        # Each step has length lr whatever |g|, as Adam's: see adaptive_lr_schedule.
        lr_schedule=adaptive_lr_schedule,
    )


def test_step_has_length_lr_for_each_variable():
    var = tf.Variable(np.zeros((2, 3), np.float32))
    grad = tf.constant([[3.0, 0, 0], [0, 4.0, 0]])
    NormalizedSGD(learning_rate=0.5).apply_gradients([(grad, var)])
    np.testing.assert_allclose(var.numpy(), [[-0.3, 0, 0], [0, -0.4, 0]], rtol=1e-6)


def test_sparse_step_equals_dense_step_of_the_same_gradient():
    """De-duplicated rows have the dense gradient's norm, so both forms agree."""
    values = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    sparse = tf.IndexedSlices(values, tf.constant([3, 0, 3]), tf.constant([5, 2]))
    dense_var, sparse_var = tf.Variable(tf.ones((5, 2))), tf.Variable(tf.ones((5, 2)))
    NormalizedSGD(learning_rate=0.1).apply_gradients([(tf.convert_to_tensor(sparse), dense_var)])
    NormalizedSGD(learning_rate=0.1).apply_gradients([(sparse, sparse_var)])
    np.testing.assert_allclose(sparse_var.numpy(), dense_var.numpy(), rtol=1e-6)


def test_zero_gradient_leaves_the_variable_alone():
    var = tf.Variable([1.0, -1.0])
    NormalizedSGD(learning_rate=0.1).apply_gradients([(tf.zeros((2,)), var)])
    np.testing.assert_array_equal(var.numpy(), [1.0, -1.0])


def test_defaults_and_config():
    # RETURNN: NormalizedSGD(learning_rate, use_locking=False, name=None).
    assert_defaults(NormalizedSGD, {"learning_rate": REQUIRED})
    config = NormalizedSGD(learning_rate=0.3).get_config()
    assert NormalizedSGD.from_config(config).get_config() == config
    assert isinstance(registry.get("normalized_sgd", learning_rate=0.1), NormalizedSGD)


def test_rejects_negative_learning_rate():
    message = r"^`learning_rate` must be in \[0, inf\]. Received: learning_rate=-1$"
    with pytest.raises(ValueError, match=message):
        NormalizedSGD(learning_rate=-1)
