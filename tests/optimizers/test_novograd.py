"""Tests for opt_train.optimizers.novograd against a NumPy re-implementation of NovoGrad's rule."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import assert_defaults, assert_parity

from opt_train.optimizers.novograd import NovoGrad

F32 = np.float32


class NumpyNovoGrad:
    """NovoGrad (Ginsburg et al. 2019; OpenSeq2Seq's constants) in float32 NumPy.

    Per variable: v = ||g||^2 on the first step, then an EMA with beta_2;
    g' = g / sqrt(v + eps) + d * w, times (1 - beta_1) with grad averaging;
    TF1 momentum: m = beta_1 * m + g'; w -= lr * m. Sparse gradients: rows
    summed per index, norm over those rows, only named rows of m and w change.
    """

    def __init__(self, learning_rate, beta_1=0.95, beta_2=0.98, epsilon=1e-8,
                 decay=0.0, grad_averaging=False):
        self.learning_rate = learning_rate
        self.b1, self.b2, self.eps, self.decay = F32(beta_1), F32(beta_2), F32(epsilon), F32(decay)
        # OpenSeq2Seq writes `1. - beta` on Python floats: rounded once, from double.
        self.one_minus_b1, self.one_minus_b2 = F32(1.0 - beta_1), F32(1.0 - beta_2)
        self.grad_averaging = grad_averaging
        self.state = {}

    def _normalised(self, key, g, w):
        m, v = self.state.get(key, (None, F32(0)))
        norm = _sum_of_squares(g)
        v = norm if v == 0 else v * self.b2 + norm * self.one_minus_b2
        g = g * (F32(1) / np.sqrt(v + self.eps))
        if self.decay > 0:
            g = g + self.decay * w
        if self.grad_averaging:
            g = g * self.one_minus_b1
        return g, v

    def __call__(self, grads_and_vars):
        lr = F32(self.learning_rate().numpy())
        for grad, var in grads_and_vars:
            key = var.ref()
            m = self.state.get(key, (np.zeros(var.shape, F32), F32(0)))[0]
            w = var.numpy()
            if isinstance(grad, tf.IndexedSlices):
                rows, inverse = np.unique(grad.indices.numpy(), return_inverse=True)
                values = np.zeros((len(rows),) + tuple(var.shape[1:]), F32)
                np.add.at(values, inverse, grad.values.numpy())
                g, v = self._normalised(key, values, w[rows])
                m[rows] = m[rows] * self.b1 + g
                w[rows] -= m[rows] * lr
            else:
                g, v = self._normalised(key, grad.numpy(), w)
                m = m * self.b1 + g
                w -= m * lr
            self.state[key] = (m, v)
            var.assign(w)


def _sum_of_squares(values):
    """||g||^2, summed by TF's reduce_sum.

    The one primitive borrowed from TF: NovoGrad's steps have size lr whatever
    the gradient's scale, so weights keep crossing zero, and a different
    summation order alone (NumPy pairwise, or float64) shows up as ~1e-4
    relative on those near-zero weights after 100 steps (~4e-7 absolute).
    """
    return F32(tf.reduce_sum(tf.square(tf.constant(values))).numpy())


SETTINGS = {
    "defaults": {},
    "decay_averaging": {"beta_1": 0.9, "beta_2": 0.95, "epsilon": 1e-6,
                        "decay": 0.01, "grad_averaging": True},
}


def _ours(lr, decay=0.0, **params):
    return NovoGrad(lr, coupled_weight_decay=decay, **params)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.one_case_fast
def test_parity_with_numpy_rule(setting, sparse):
    params = SETTINGS[setting]
    assert_parity(
        lambda lr: _ours(lr, **params),
        lambda lr: NumpyNovoGrad(lr, **params),
        sparse=sparse,
        steps=100,
    )


def test_first_step_is_normalised_gradient():
    """Step 1: v = ||g||^2, so the update is lr * g / ||g|| whatever the gradient's scale."""
    var = keras.Variable(np.zeros(2, np.float32))
    NovoGrad(0.5).apply_gradients([(tf.constant([300.0, 400.0]), var)])
    np.testing.assert_allclose(var.numpy(), [-0.3, -0.4], rtol=1e-6)


def test_second_moment_persists_across_steps():
    var = keras.Variable(np.zeros(2, np.float32))
    opt = NovoGrad(0.5)
    opt.apply_gradients([(tf.constant([3.0, 4.0]), var)])
    opt.apply_gradients([(tf.constant([0.0, 1.0]), var)])
    expected = 0.98 * 25 + 0.02 * 1
    np.testing.assert_allclose(opt.get_slot(var, "grads_ema").numpy(), expected, rtol=1e-6)


def test_defaults_match_openseq2seq():
    assert_defaults(
        NovoGrad,
        {"learning_rate": 1.0, "beta_1": 0.95, "beta_2": 0.98, "epsilon": 1e-8,
         "coupled_weight_decay": 0.0, "grad_averaging": False},
    )


def test_coupled_and_keras_weight_decay_are_different_parameters():
    opt = NovoGrad(0.1, coupled_weight_decay=0.01, weight_decay=0.02)
    config = opt.get_config()
    assert (config["coupled_weight_decay"], config["weight_decay"]) == (0.01, 0.02)
    assert NovoGrad.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.5}, "`beta_1` must be in [0, 1]. Received: beta_1=1.5"),
        ({"beta_2": -0.5}, "`beta_2` must be in [0, 1]. Received: beta_2=-0.5"),
        ({"coupled_weight_decay": -1.0},
         "`coupled_weight_decay` must be in [0, inf]. Received: coupled_weight_decay=-1.0"),
    ],
)
def test_invalid_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        NovoGrad(**kwargs)
    assert str(error.value) == message


def test_slot_names():
    var = keras.Variable(np.zeros(2, np.float32))
    opt = NovoGrad()
    opt.build([var])
    assert opt.get_slot_names() == ["grads_ema", "momentum"]
