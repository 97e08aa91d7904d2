"""TF1's Adagrad and ProximalAdagrad optimizers as Keras 3 optimizers."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, deduplicate, has_kernel, is_sparse
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

    def update_step(self, gradient, variable, learning_rate):
        lr = tf.cast(learning_rate, variable.dtype)
        if not is_sparse(gradient) and has_kernel("ResourceApplyAdagrad", variable):
            # TF1's own fused kernel, the one AdagradOptimizer runs: one pass over the
            # variable and its accumulator instead of a chain of elementwise ops.
            tf.raw_ops.ResourceApplyAdagrad(
                var=variable.handle,
                accum=self.slot(variable, "accumulator").handle,
                lr=lr,
                grad=tf.cast(gradient, variable.dtype),
                use_locking=False,
                update_slots=True,
            )
            return
        values, indices, accumulated = accumulate_squares(self, variable, gradient)
        if indices is not None:
            step = values * lr * sparse_rsqrt(accumulated)
            self.assign_sub(variable, tf.IndexedSlices(step, indices))
            return
        self.assign_sub(variable, values * lr * tf.math.rsqrt(accumulated))

    def get_config(self):
        config = super().get_config()
        config["initial_accumulator_value"] = self.initial_accumulator_value
        return config


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

    def update_step(self, gradient, variable, learning_rate):
        lr = tf.cast(learning_rate, variable.dtype)
        if not is_sparse(gradient) and has_kernel("ResourceApplyProximalAdagrad", variable):
            # TF1's own fused kernel (ProximalAdagradOptimizer's): one pass instead of a chain
            # of ops. Its CPU kernel refuses lr <= 0 (a warm-up's first step): the ops take that.
            tf.cond(
                lr > 0,
                lambda: self._fused_update(gradient, variable, lr),
                lambda: self._update(gradient, variable, lr),
            )
            return
        self._update(gradient, variable, lr)

    def _fused_update(self, gradient, variable, lr):
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyProximalAdagrad(
            var=variable.handle,
            accum=self.slot(variable, "accumulator").handle,
            lr=lr,
            l1=tf.cast(self.l1_regularization_strength, dtype),
            l2=tf.cast(self.l2_regularization_strength, dtype),
            grad=tf.cast(gradient, dtype),
            use_locking=False,
        )

    def _update(self, gradient, variable, lr):
        """The update as separate ops: sparse gradients, and dense ones the kernel cannot take."""
        values, indices, accumulated = accumulate_squares(self, variable, gradient)
        if indices is not None:
            alpha = lr * sparse_rsqrt(accumulated)
            new_rows = self._proximal(tf.gather(variable, indices), values, alpha)
            self.assign(variable, tf.IndexedSlices(new_rows, indices))
            return
        alpha = tf.math.rsqrt(accumulated) * lr
        self.assign(variable, self._proximal(variable, values, alpha))

    def _proximal(self, value, gradient, alpha):
        """The proximal step with per-element rate `alpha`."""
        dtype = value.dtype
        prox = value - gradient * alpha
        alpha_l1 = alpha * tf.cast(self.l1_regularization_strength, dtype)
        alpha_l2 = alpha * tf.cast(self.l2_regularization_strength, dtype)
        return shrink(prox, alpha_l1, alpha_l2, self.l1_regularization_strength > 0)

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

    A sparse gradient (de-duplicated first) touches only the rows it names.
    Returns `(values, indices, accumulated)`: the gradient in the variable's
    dtype, its row indices (None when dense) and the accumulator after the
    update at those rows. The callers keep their own operation order after
    this, which is what makes them bit-exact against their kernels.
    """
    dtype = variable.dtype
    accumulator = optimizer.slot(variable, "accumulator")
    if is_sparse(gradient):
        gradient = deduplicate(gradient)
        values = tf.cast(gradient.values, dtype)
        rows = tf.gather(accumulator, gradient.indices) + values * values
        optimizer.assign(accumulator, tf.IndexedSlices(rows, gradient.indices))
        return values, gradient.indices, rows
    values = tf.cast(gradient, dtype)
    accumulated = accumulator + values * values
    optimizer.assign(accumulator, accumulated)
    return values, None, accumulated
