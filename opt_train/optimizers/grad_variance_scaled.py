"""GradVarianceScaled: gradient descent damped where the gradient's variance is high (RETURNN)."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import keras_serializable
from opt_train.optimizers.custom import BaseCustomOptimizer
from opt_train.optimizers.specs import check_args


@keras_serializable
class GradVarianceScaled(BaseCustomOptimizer):
    """Gradient descent whose step shrinks when `g` is far from its running average.

    RETURNN's `GradVarianceScaledOptimizer` (reference 000). Reference 000
    gives `m` and says `v` is "the running average of the variance of g, i.e.
    of (g - m)^2"; the rest of the rule (the variance uses the new `m_t`, the
    step is scaled by `min(v_t / (variance + epsilon), 1)`) follows RETURNN's
    `returnn/tf/updater.py`:

    .. math::

        m_t &\\leftarrow \\beta_1 m_{t-1} + (1 - \\beta_1) \\, g \\\\
        s &\\leftarrow (g - m_t)^2 \\\\
        v_t &\\leftarrow \\beta_2 v_{t-1} + (1 - \\beta_2) \\, s \\\\
        \\theta &\\leftarrow \\theta - \\eta \\, g \\,
            \\min\\!\\left(\\frac{v_t}{s + \\epsilon}, 1\\right)

    Sparse gradients follow RETURNN's `_apply`: `m` and `v` decay in every row,
    the new terms are added to the rows the gradient names, and only those rows
    of the variable move.

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Required.
        beta_1: Decay of the running average of `g` (`m`). Defaults to `0.9`.
        beta_2: Decay of the running average of the variance of `g` (`v`).
            Defaults to `0.999`.
        epsilon: Added to the variance in the denominator. Defaults to `1e-8`.
        name: Name of the optimizer. Defaults to `"GradVarianceScaled"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    slot_names = ("m", "v")

    def __init__(self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8, name=None, **kwargs):
        check_args("GradVarianceScaled", beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def _apply(self, grad, var, lr, indices=None):
        dtype = var.dtype
        m_rows = self._decay_and_add(self.slot(var, "m"), "beta_1", grad, indices)
        variance = tf.math.squared_difference(grad, m_rows)
        v_rows = self._decay_and_add(self.slot(var, "v"), "beta_2", variance, indices)
        factor = tf.minimum(v_rows / (variance + self.hyper("epsilon", dtype)), 1)
        self._assign_sub(var, lr * grad * factor, indices)

    def _decay_and_add(self, average, beta, value, indices):
        """Decays `average` everywhere, adds `(1 - beta) * value` at `indices`; returns those.

        `beta` names the hyperparameter (`"beta_1"`, `"beta_2"`).
        """
        beta = self.hyper(beta, average.dtype)
        self._assign(average, beta * average)
        self._assign_add(average, (1 - beta) * value, indices)
        return self._gather(average, indices)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config
