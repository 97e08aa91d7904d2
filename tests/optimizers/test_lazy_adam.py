"""Tests for opt_train.optimizers.adam.LazyAdam against a NumPy re-implementation of its rule."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import assert_parity

from opt_train.optimizers.adam import LazyAdam

F32 = np.float32


class NumpyLazyAdam:
    """LazyAdam's rule (tensorflow_addons semantics) in float32 NumPy.

    Dense gradients: TF1 Adam. Sparse gradients: duplicates summed, then only
    the named rows of m, v and the variable change. beta^t is kept as a
    running float32 product, as TF1's `beta1_power` / `beta2_power` are.
    """

    def __init__(self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8):
        self.learning_rate = learning_rate
        self.b1, self.b2, self.eps = F32(beta_1), F32(beta_2), F32(epsilon)
        self.b1_power, self.b2_power = self.b1, self.b2
        self.slots = {}

    def __call__(self, grads_and_vars):
        lr = F32(self.learning_rate().numpy())
        one = F32(1)
        step_size = lr * np.sqrt(one - self.b2_power) / (one - self.b1_power)
        for grad, var in grads_and_vars:
            m, v = self.slots.setdefault(
                var.ref(), (np.zeros(var.shape, F32), np.zeros(var.shape, F32)))
            w = var.numpy()
            if isinstance(grad, tf.IndexedSlices):
                rows, inverse = np.unique(grad.indices.numpy(), return_inverse=True)
                values = np.zeros((len(rows),) + tuple(var.shape[1:]), F32)
                np.add.at(values, inverse, grad.values.numpy())
                m[rows] = self.b1 * m[rows] + (one - self.b1) * values
                v[rows] = self.b2 * v[rows] + (one - self.b2) * np.square(values)
                w[rows] -= step_size * m[rows] / (np.sqrt(v[rows]) + self.eps)
            else:
                g = grad.numpy()
                m += (g - m) * (one - self.b1)
                v += (np.square(g) - v) * (one - self.b2)
                w -= (m * step_size) / (np.sqrt(v) + self.eps)
            var.assign(w)
        self.b1_power = self.b1_power * self.b1
        self.b2_power = self.b2_power * self.b2


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_parity_with_numpy_rule(sparse):
    assert_parity(
        lambda lr: LazyAdam(lr, beta_1=0.85, beta_2=0.99, epsilon=1e-6),
        lambda lr: NumpyLazyAdam(lr, beta_1=0.85, beta_2=0.99, epsilon=1e-6),
        sparse=sparse,
        steps=100,
    )


def test_rows_not_named_stay_put():
    table = keras.Variable(np.ones((4, 2), np.float32))
    opt = LazyAdam(0.1)
    for row in (0, 1):
        grad = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([row]), tf.constant([4, 2]))
        opt.apply_gradients([(grad, table)])
    after = table.numpy()
    # Row 0 was named only in step 1: lazy, so step 2 leaves it where step 1 put it
    # (TF1 Adam would move it again with the decayed m).
    np.testing.assert_allclose(after[0], 1.0 - 0.1, rtol=1e-6)
    np.testing.assert_array_equal(after[2:], np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(opt.get_slot(table, "m").numpy()[2:], 0.0)


def test_config_round_trip():
    opt = LazyAdam(0.01, beta_1=0.5, epsilon=1e-4)
    config = opt.get_config()
    restored = LazyAdam.from_config(config)
    assert isinstance(restored, LazyAdam)
    assert restored.get_config() == config


def test_invalid_beta():
    with pytest.raises(ValueError, match=r"^`beta_1` must be in \[0, 1\)\. Received: beta_1=-0.1$"):
        LazyAdam(beta_1=-0.1)
