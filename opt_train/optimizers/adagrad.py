"""TF1's Adagrad and ProximalAdagrad optimizers as Keras 3 optimizers."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, is_sparse, keras_serializable, may_be_positive
from opt_train.optimizers.specs import check_args
from opt_train.optimizers.gradient_descent import shrink

DEFAULT_LEARNING_RATE = 0.01


def sparse_rsqrt(accumulator):
    """1/sqrt(a) as TF's sparse kernels compute it: divided, where the dense ones use rsqrt.

    The two differ in the last bit; matching each path keeps parity with TF1.
    """
    return 1.0 / tf.sqrt(accumulator)


def _check_accumulator(initial_accumulator_value):
    check_args("Adagrad", initial_accumulator_value=initial_accumulator_value)


@keras_serializable
class Adagrad(Optimizer):
    """Adagrad, as TF1's `tf.compat.v1.train.AdagradOptimizer`.

    .. math::

        a \\leftarrow a + g^2,\\qquad
        \\theta \\leftarrow \\theta - \\eta\\, g / \\sqrt{a}

    with :math:`a` starting at `initial_accumulator_value` and no epsilon
    (Keras's `KerasAdagrad` adds one). A sparse gradient updates only the rows
    it names, after summing repeated rows.

    Args:
        learning_rate: A float, a `LearningRateSchedule` or a callable. TF1 has
            no default. Defaults to `0.01`.
        initial_accumulator_value: The accumulators' starting value, > 0.
            Defaults to `0.1`.
        name: The optimizer's name. Defaults to `"Adagrad"`.
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        initial_accumulator_value=0.1,
        name="Adagrad",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        _check_accumulator(initial_accumulator_value)
        self.initial_accumulator_value = initial_accumulator_value

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "accumulator", self.initial_accumulator_value)

    def dense_kernel(self, variable):
        return has_kernel("ResourceApplyAdagrad", variable)

    def sparse_kernel(self, variable):
        return has_kernel("ResourceSparseApplyAdagrad", variable)

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel, the one AdagradOptimizer runs: one pass over the
        # variable and its accumulator instead of a chain of elementwise ops.
        tf.raw_ops.ResourceApplyAdagrad(
            var=variable.handle,
            accum=self.slot(variable, "accumulator").handle,
            lr=lr,
            grad=gradient,
            use_locking=self.use_locking,
            update_slots=True,
        )

    def fused_sparse_update(self, gradient, variable, lr):
        # TF1's sparse kernel (AdagradOptimizer's `_resource_apply_sparse`): touches the
        # named rows of the variable and its accumulator only.
        tf.raw_ops.ResourceSparseApplyAdagrad(
            var=variable.handle,
            accum=self.slot(variable, "accumulator").handle,
            lr=lr,
            grad=gradient.values,
            indices=gradient.indices,
            use_locking=self.use_locking,
            update_slots=True,
        )

    def dense_update(self, gradient, variable, lr):
        values, _, accumulated = accumulate_squares(self, variable, gradient)
        self.assign_sub(variable, values * lr * tf.math.rsqrt(accumulated))

    def sparse_update(self, gradient, variable, lr):
        values, indices, accumulated = accumulate_squares(self, variable, gradient)
        step = values * lr * sparse_rsqrt(accumulated)
        self.assign_sub(variable, tf.IndexedSlices(step, indices))

    def get_config(self):
        config = super().get_config()
        config["initial_accumulator_value"] = self.initial_accumulator_value
        return config


@keras_serializable
class ProximalAdagrad(Adagrad):
    """Proximal Adagrad (FOBOS with Adagrad steps), as TF1's `ProximalAdagradOptimizer`.

    .. math::

        a \\leftarrow a + g^2,\\quad
        \\alpha = \\eta / \\sqrt{a},\\quad
        \\tilde\\theta = \\theta - \\alpha\\, g,\\quad
        \\theta \\leftarrow \\frac{\\operatorname{sign}(\\tilde\\theta)\\,
            \\max(|\\tilde\\theta| - \\alpha\\,\\lambda_1,\\ 0)}{1 + \\alpha\\,\\lambda_2}

    (the soft-threshold only when :math:`\\lambda_1 > 0`). A sparse gradient
    updates only the rows it names, after summing repeated rows.

    Args:
        learning_rate: A float, a `LearningRateSchedule` or a callable. TF1 has
            no default. Defaults to `0.01`.
        initial_accumulator_value: The accumulators' starting value, > 0.
            Defaults to `0.1`.
        l1_regularization_strength: :math:`\\lambda_1`, >= 0. Defaults to `0.0`.
        l2_regularization_strength: :math:`\\lambda_2`, >= 0. Defaults to `0.0`.
        name: The optimizer's name. Defaults to `"ProximalAdagrad"`.
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        initial_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        name="ProximalAdagrad",
        **kwargs,
    ):
        # Adagrad's accumulator, its check and its slot; this class adds the proximal step.
        super().__init__(
            learning_rate=learning_rate,
            initial_accumulator_value=initial_accumulator_value,
            name=name,
            **kwargs,
        )
        check_args(
            "ProximalAdagrad",
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
        )
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def dense_kernel(self, variable):
        return has_kernel("ResourceApplyProximalAdagrad", variable)

    def sparse_kernel(self, variable):
        return False

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel (ProximalAdagradOptimizer's): one pass instead of a chain
        # of ops. Its CPU kernel refuses lr <= 0 (a warm-up's first step): the ops take that.
        tf.cond(
            lr > 0,
            lambda: self._kernel_update(gradient, variable, lr),
            lambda: self.dense_update(gradient, variable, lr),
        )

    def _kernel_update(self, gradient, variable, lr):
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyProximalAdagrad(
            var=variable.handle,
            accum=self.slot(variable, "accumulator").handle,
            lr=lr,
            l1=self.hyper("l1_regularization_strength", dtype),
            l2=self.hyper("l2_regularization_strength", dtype),
            grad=gradient,
            use_locking=self.use_locking,
        )

    def dense_update(self, gradient, variable, lr):
        values, _, accumulated = accumulate_squares(self, variable, gradient)
        alpha = tf.math.rsqrt(accumulated) * lr
        self.assign(variable, self._proximal(variable, values, alpha))

    def sparse_update(self, gradient, variable, lr):
        values, indices, accumulated = accumulate_squares(self, variable, gradient)
        alpha = lr * sparse_rsqrt(accumulated)
        new_rows = self._proximal(gather_rows(variable, indices), values, alpha)
        self.assign(variable, tf.IndexedSlices(new_rows, indices))

    def _proximal(self, value, gradient, alpha):
        """The proximal step with per-element rate `alpha`."""
        dtype = value.dtype
        prox = value - gradient * alpha
        alpha_l1 = alpha * self.hyper("l1_regularization_strength", dtype)
        alpha_l2 = alpha * self.hyper("l2_regularization_strength", dtype)
        return shrink(prox, alpha_l1, alpha_l2, may_be_positive(self.l1_regularization_strength))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
            }
        )
        return config


def accumulate_squares(optimizer, variable, gradient):
    """Adds the squared gradient to `variable`'s "accumulator" slot, as TF1's Adagrad kernels.

    `gradient` comes from the update template: in the variable's dtype and, when
    sparse, with unique indices; a sparse one touches only the rows it names.
    Returns `(values, indices, accumulated)`: the gradient values, its row
    indices (None when dense) and the accumulator after the update at those
    rows. The callers keep their own operation order after this, which is what
    makes them bit-exact against their kernels.
    """
    accumulator = optimizer.slot(variable, "accumulator")
    if is_sparse(gradient):
        values, indices = gradient.values, gradient.indices
        rows = gather_rows(accumulator, indices) + values * values
        optimizer.assign(accumulator, tf.IndexedSlices(rows, indices))
        return values, indices, rows
    accumulated = accumulator + gradient * gradient
    optimizer.assign(accumulator, accumulated)
    return gradient, None, accumulated
