"""TF1's AdagradDA (Adagrad dual averaging) optimizer as a Keras 3 optimizer."""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.base import Optimizer, deduplicate, has_kernel, is_sparse
from opt_train.optimizers.specs import check_args

DEFAULT_LEARNING_RATE = 0.01


class AdagradDA(Optimizer):
    """Adagrad dual averaging, as TF1's `tf.compat.v1.train.AdagradDAOptimizer`.

    The step :math:`t` counts updates including this one: TF1 passes
    `global_step + 1`; here it is `iterations + 1` (the optimizer's own
    counter), so no global step needs to be passed in.

    .. math::

        G \\leftarrow G + g,\\quad S \\leftarrow S + g^2,\\quad
        \\tilde G = \\begin{cases}
            \\operatorname{sign}(G)\\max(|G| - \\lambda_1 t,\\ 0) & \\lambda_1 > 0 \\\\
            G & \\text{otherwise}
        \\end{cases},\\quad
        \\theta \\leftarrow \\frac{-\\eta\\, \\tilde G}{\\eta\\, \\lambda_2\\, t + \\sqrt{S}}

    The weights are a closed form of the accumulators, so their starting values
    are lost at the first update (as in TF1). A sparse gradient updates only the
    rows it names, after summing repeated rows.

    Args:
        learning_rate: A float, a `LearningRateSchedule` or a callable. TF1 has
            no default. Defaults to `0.01`.
        initial_gradient_squared_accumulator_value: :math:`S`'s starting value,
            > 0. Defaults to `0.1`.
        l1_regularization_strength: :math:`\\lambda_1`, >= 0. Defaults to `0.0`.
        l2_regularization_strength: :math:`\\lambda_2`, >= 0. Defaults to `0.0`.
        name: The optimizer's name. Defaults to `"AdagradDA"`.
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        initial_gradient_squared_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        name="AdagradDA",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not isinstance(initial_gradient_squared_accumulator_value, (int, float)):
            # TF1's second positional argument was `global_step`; this class counts steps itself.
            raise ParamError(
                "initial_gradient_squared_accumulator_value", "wrong_type",
                "must be a number (AdagradDA counts steps itself and takes no `global_step`)",
                initial_gradient_squared_accumulator_value,
            )
        check_args(
            "AdagradDA",
            initial_gradient_squared_accumulator_value=initial_gradient_squared_accumulator_value,
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
        )
        self.initial_gradient_squared_accumulator_value = initial_gradient_squared_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "gradient_accumulator")
        self.add_slots(
            var_list,
            "gradient_squared_accumulator",
            self.initial_gradient_squared_accumulator_value,
        )

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        step = tf.cast(self.iterations + 1, dtype)
        sums = self.slot(variable, "gradient_accumulator")
        squares = self.slot(variable, "gradient_squared_accumulator")
        if is_sparse(gradient):
            gradient = deduplicate(gradient)
            indices = gradient.indices
            values = tf.cast(gradient.values, dtype)
            new_sums = tf.gather(sums, indices) + values
            new_squares = tf.gather(squares, indices) + values * values
            self.assign(sums, tf.IndexedSlices(new_sums, indices))
            self.assign(squares, tf.IndexedSlices(new_squares, indices))
            rows = self._sparse_weights(new_sums, new_squares, lr, step)
            self.assign(variable, tf.IndexedSlices(rows, indices))
            return
        gradient = tf.cast(gradient, dtype)
        if self.l2_regularization_strength == 0 and has_kernel("ResourceApplyAdagradDA", variable):
            # TF1's own fused kernel (AdagradDAOptimizer's): one pass instead of a chain of ops.
            # Only without l2: the kernel's l2 * (t * lr) rounds otherwise than (l2 * t) * lr.
            tf.raw_ops.ResourceApplyAdagradDA(
                var=variable.handle,
                gradient_accumulator=sums.handle,
                gradient_squared_accumulator=squares.handle,
                grad=gradient,
                lr=lr,
                l1=tf.cast(self.l1_regularization_strength, dtype),
                l2=tf.cast(self.l2_regularization_strength, dtype),
                global_step=tf.cast(self.iterations + 1, tf.int64),
                use_locking=False,
            )
            return
        new_sums = sums + gradient
        new_squares = squares + gradient * gradient
        self.assign(sums, new_sums)
        self.assign(squares, new_squares)
        self.assign(variable, self._weights(new_sums, new_squares, lr, step))

    def _weights(self, sums, squares, lr, step):
        """The closed-form weights from the accumulators at step `step`."""
        dtype = sums.dtype
        l1 = tf.cast(self.l1_regularization_strength, dtype)
        l2 = tf.cast(self.l2_regularization_strength, dtype)
        if self.l1_regularization_strength > 0:
            sums = tf.sign(sums) * tf.maximum(tf.abs(sums) - l1 * step, 0.0)
        return (-lr * sums) / (l2 * step * lr + tf.sqrt(squares))

    def _sparse_weights(self, sums, squares, lr, step):
        """`_weights` rearranged as TF's sparse kernel computes it (accumulators divided by t).

        Mathematically equal to `_weights`; the arrangement decides the last bit.
        """
        dtype = sums.dtype
        l1 = tf.cast(self.l1_regularization_strength, dtype)
        l2 = tf.cast(self.l2_regularization_strength, dtype)
        averages = sums / step
        if self.l1_regularization_strength > 0:
            averages = tf.sign(sums) * tf.maximum(tf.abs(sums) / step - l1, 0.0)
        return -averages / (l2 + tf.sqrt(squares) / (step * lr))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "initial_gradient_squared_accumulator_value": (
                    self.initial_gradient_squared_accumulator_value
                ),
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
            }
        )
        return config
