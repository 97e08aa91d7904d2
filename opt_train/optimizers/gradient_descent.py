"""TF1's GradientDescent and ProximalGradientDescent optimizers as Keras 3 optimizers."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, keras_serializable, may_be_positive
from opt_train.optimizers.specs import check_args

DEFAULT_LEARNING_RATE = 0.01


def shrink(prox_var, alpha_l1, alpha_l2, use_l1):
    """The proximal step of TF1's kernels: soft-threshold by alpha*l1, then scale by 1/(1+alpha*l2).

    `use_l1` is a Python bool: TF1 skips the soft-threshold when l1 is 0.
    """
    if use_l1:
        shrunk = tf.sign(prox_var) * tf.maximum(tf.abs(prox_var) - alpha_l1, 0.0)
        return shrunk / (1.0 + alpha_l2)
    return prox_var / (1.0 + alpha_l2)


@keras_serializable
class GradientDescent(Optimizer):
    """Plain gradient descent, as TF1's `tf.compat.v1.train.GradientDescentOptimizer`.

    .. math::

        \\theta \\leftarrow \\theta - \\eta\\, g

    A sparse gradient (`tf.IndexedSlices`) updates only the rows it names; a
    row named twice gets both contributions.

    Args:
        learning_rate: A float, a `LearningRateSchedule` (e.g. an opt-train lr
            policy) or a callable. TF1 has no default. Defaults to `0.01`.
        name: The optimizer's name. Defaults to `"GradientDescent"`.
        **kwargs: The Keras base arguments (`weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`, `exclude_from_weight_decay`).
    """

    def __init__(self, learning_rate=DEFAULT_LEARNING_RATE, name="GradientDescent", **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    # TF1 scatters a sparse gradient as it is: a row named twice gets both contributions.
    sum_duplicate_indices = False

    def dense_kernel(self, variable):
        return has_kernel("ResourceApplyGradientDescent", variable)

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own kernel, the one GradientDescentOptimizer runs: one pass over the variable.
        tf.raw_ops.ResourceApplyGradientDescent(
            var=variable.handle, alpha=lr, delta=gradient, use_locking=self.use_locking
        )

    def dense_update(self, gradient, variable, lr):
        self.assign_sub(variable, gradient * lr)

    def sparse_update(self, gradient, variable, lr):
        self.assign_sub(variable, tf.IndexedSlices(gradient.values * lr, gradient.indices))


@keras_serializable
class ProximalGradientDescent(Optimizer):
    """Proximal gradient descent (FOBOS), as TF1's `ProximalGradientDescentOptimizer`.

    .. math::

        \\tilde\\theta = \\theta - \\eta\\, g,\\qquad
        \\theta \\leftarrow \\frac{\\operatorname{sign}(\\tilde\\theta)\\,
            \\max(|\\tilde\\theta| - \\eta\\,\\lambda_1,\\ 0)}{1 + \\eta\\,\\lambda_2}

    (the soft-threshold only when :math:`\\lambda_1 > 0`). A sparse gradient
    updates only the rows it names, after summing repeated rows.

    Args:
        learning_rate: A float, a `LearningRateSchedule` or a callable. TF1 has
            no default. Defaults to `0.01`.
        l1_regularization_strength: :math:`\\lambda_1`, >= 0. Defaults to `0.0`.
        l2_regularization_strength: :math:`\\lambda_2`, >= 0. Defaults to `0.0`.
        name: The optimizer's name. Defaults to `"ProximalGradientDescent"`.
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        name="ProximalGradientDescent",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        check_args(
            "ProximalGradientDescent",
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
        )
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def _shrink(self, prox, lr):
        dtype = prox.dtype
        alpha_l1 = lr * self.hyper("l1_regularization_strength", dtype)
        alpha_l2 = lr * self.hyper("l2_regularization_strength", dtype)
        return shrink(prox, alpha_l1, alpha_l2, may_be_positive(self.l1_regularization_strength))

    def dense_kernel(self, variable):
        return has_kernel("ResourceApplyProximalGradientDescent", variable)

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel, the one ProximalGradientDescentOptimizer runs (the same
        # shrink, skipping the soft-threshold when l1 is 0): one pass over the variable.
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyProximalGradientDescent(
            var=variable.handle,
            alpha=lr,
            l1=self.hyper("l1_regularization_strength", dtype),
            l2=self.hyper("l2_regularization_strength", dtype),
            delta=gradient,
            use_locking=self.use_locking,
        )

    def dense_update(self, gradient, variable, lr):
        self.assign(variable, self._shrink(variable - gradient * lr, lr))

    def sparse_update(self, gradient, variable, lr):
        rows = gather_rows(variable, gradient.indices)
        new_rows = self._shrink(rows - gradient.values * lr, lr)
        self.assign(variable, tf.IndexedSlices(new_rows, gradient.indices))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
            }
        )
        return config
