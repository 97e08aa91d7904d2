"""NeuralOptimizer1: an update rule found by neural optimizer search (RETURNN)."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import keras_serializable
from opt_train.optimizers.custom import BaseCustomOptimizer
from opt_train.optimizers.specs import check_args


@keras_serializable
class NeuralOptimizer1(BaseCustomOptimizer):
    """Gradient descent that shrinks the step where the gradient disagrees with its average.

    RETURNN's `NeuralOptimizer1` (reference 000), after Bello et al. 2017,
    "Neural Optimizer Search with Reinforcement Learning": instead of the
    searched rule `g * exp(sign(g) * sign(m))` it uses

    .. math::

        m_t &\\leftarrow \\beta_1 m_{t-1} + (1 - \\beta_1) \\, g \\\\
        \\theta &\\leftarrow \\theta - \\eta \\, g \\cdot
            \\begin{cases} 1 & \\text{if } \\operatorname{sign}(g) = \\operatorname{sign}(m_t) \\\\
            d & \\text{otherwise} \\end{cases}

    with `d = decrease_factor`. The update uses the new average `m_t`, and
    `sign(0) = 0` (so a zero gradient meets `m_t = 0` as "agreeing"; the step
    is zero either way).

    Sparse gradients follow RETURNN's `_apply`: `m` decays in every row
    (`m <- beta_1 * m`), `(1 - beta_1) * g` is added to the rows the gradient
    names, and only those rows of the variable move.

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Required.
        beta_1: Decay of the running average of `g` (`m`); the same default as
            Adam and the paper. Defaults to `0.9`.
        decrease_factor: Factor on the step where `sign(g) != sign(m)`; the
            paper's rule corresponds to `e^-2 ~= 0.135`. Defaults to `0.1`.
        name: Name of the optimizer. Defaults to `"NeuralOptimizer1"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    slot_names = ("m",)

    def __init__(self, learning_rate, beta_1=0.9, decrease_factor=0.1, name=None, **kwargs):
        check_args("NeuralOptimizer1", beta_1=beta_1, decrease_factor=decrease_factor)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.decrease_factor = decrease_factor

    def _apply(self, grad, var, lr, indices=None):
        beta_1 = self.hyper("beta_1", var.dtype)
        m = self.slot(var, "m")
        self._assign(m, beta_1 * m)
        self._assign_add(m, (1 - beta_1) * grad, indices)
        agrees = tf.equal(tf.sign(self._gather(m, indices)), tf.sign(grad))
        factor = tf.where(agrees, tf.ones_like(grad), self.hyper("decrease_factor", var.dtype))
        self._assign_sub(var, lr * grad * factor, indices)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, decrease_factor=self.decrease_factor)
        return config
