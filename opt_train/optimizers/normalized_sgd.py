"""NormalizedSGD: gradient descent on the L2-normalized gradient (RETURNN)."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import keras_serializable
from opt_train.optimizers.custom import CustomGradientDescent


@keras_serializable
class NormalizedSGD(CustomGradientDescent):
    """Gradient descent with each variable's gradient scaled to unit L2 norm.

    RETURNN's `NormalizedSGD` (reference 000): "All grads are L2 normalized
    (via `tf.nn.l2_normalize`), otherwise it's standard SGD". The norm is taken
    over the whole gradient of one variable (`axis=None`); `tf.nn.l2_normalize`
    floors the squared norm at `1e-12`, so an all-zero gradient stays zero.

    .. math::

        \\theta \\leftarrow \\theta - \\eta \\,
            \\frac{g}{\\sqrt{\\max(\\sum g^2, 10^{-12})}}

    A sparse gradient is normalized over its (de-duplicated) rows, which is
    the norm of the equivalent dense gradient, and updates only those rows. (RETURNN
    normalized the raw slices, so a row listed twice counted twice in the norm.)

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Required.
        name: Name of the optimizer. Defaults to `"NormalizedSGD"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    def apply_rule(self, grad, var, lr, slots):
        return super().apply_rule(tf.nn.l2_normalize(grad, axis=None), var, lr, slots)
