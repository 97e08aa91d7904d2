"""TF1's AdagradDA (Adagrad dual averaging) optimizer as a Keras 3 optimizer."""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, keras_serializable, may_be_positive
from opt_train.optimizers.specs import check_args

DEFAULT_LEARNING_RATE = 0.01


@keras_serializable
class AdagradDA(Optimizer):
    """Adagrad dual averaging, as TF1's `tf.compat.v1.train.AdagradDAOptimizer`.

    The step :math:`t` counts updates including this one: `global_step + 1`
    when a `global_step` variable is given (as a keyword, or positionally in
    TF1's signature `AdagradDAOptimizer(learning_rate, global_step, ...)` below;
    the caller advances it, e.g. through `apply_gradients(..., global_step=...)`),
    otherwise `iterations + 1` (the optimizer's own counter).

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
        global_step: An integer variable counting the updates applied so far,
            as TF1 required; not part of the config. Defaults to `None` (the
            optimizer's own `iterations`).
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        initial_gradient_squared_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        name="AdagradDA",
        global_step=None,
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
        self.global_step = global_step
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

    def _step(self, dtype):
        """t: the number of updates including this one (TF1: `global_step + 1`)."""
        counter = self.iterations if self.global_step is None else self.global_step
        return tf.cast(counter + 1, dtype)

    def dense_kernel(self, variable):
        # Only without l2: the kernel's l2 * (t * lr) rounds otherwise than (l2 * t) * lr.
        return not may_be_positive(self.l2_regularization_strength) and has_kernel(
            "ResourceApplyAdagradDA", variable
        )

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel (AdagradDAOptimizer's): one pass instead of a chain of ops.
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyAdagradDA(
            var=variable.handle,
            gradient_accumulator=self.slot(variable, "gradient_accumulator").handle,
            gradient_squared_accumulator=self.slot(variable, "gradient_squared_accumulator").handle,
            grad=gradient,
            lr=lr,
            l1=self.hyper("l1_regularization_strength", dtype),
            l2=self.hyper("l2_regularization_strength", dtype),
            global_step=self._step(tf.int64),
            use_locking=self.use_locking,
        )

    def dense_update(self, gradient, variable, lr):
        sums = self.slot(variable, "gradient_accumulator")
        squares = self.slot(variable, "gradient_squared_accumulator")
        new_sums = sums + gradient
        new_squares = squares + gradient * gradient
        self.assign(sums, new_sums)
        self.assign(squares, new_squares)
        self.assign(variable, self._weights(new_sums, new_squares, lr, self._step(variable.dtype)))

    def sparse_update(self, gradient, variable, lr):
        sums = self.slot(variable, "gradient_accumulator")
        squares = self.slot(variable, "gradient_squared_accumulator")
        values, indices = gradient.values, gradient.indices
        new_sums = gather_rows(sums, indices) + values
        new_squares = gather_rows(squares, indices) + values * values
        self.assign(sums, tf.IndexedSlices(new_sums, indices))
        self.assign(squares, tf.IndexedSlices(new_squares, indices))
        rows = self._sparse_weights(new_sums, new_squares, lr, self._step(variable.dtype))
        self.assign(variable, tf.IndexedSlices(rows, indices))

    def _weights(self, sums, squares, lr, step):
        """The closed-form weights from the accumulators at step `step`."""
        dtype = sums.dtype
        l1 = self.hyper("l1_regularization_strength", dtype)
        l2 = self.hyper("l2_regularization_strength", dtype)
        if may_be_positive(self.l1_regularization_strength):
            sums = tf.sign(sums) * tf.maximum(tf.abs(sums) - l1 * step, 0.0)
        return (-lr * sums) / (l2 * step * lr + tf.sqrt(squares))

    def _sparse_weights(self, sums, squares, lr, step):
        """`_weights` rearranged as TF's sparse kernel computes it (accumulators divided by t).

        Mathematically equal to `_weights`; the arrangement decides the last bit.
        """
        dtype = sums.dtype
        l1 = self.hyper("l1_regularization_strength", dtype)
        l2 = self.hyper("l2_regularization_strength", dtype)
        averages = sums / step
        if may_be_positive(self.l1_regularization_strength):
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


def AdagradDAOptimizer(  # noqa: N802 - TF1's name, so TF1 code moves over unchanged
    learning_rate,
    global_step,
    initial_gradient_squared_accumulator_value=0.1,
    l1_regularization_strength=0.0,
    l2_regularization_strength=0.0,
    use_locking=False,
    name="AdagradDA",
):
    """`AdagradDA` built with TF1's signature, `global_step` second (`tf.compat.v1.train`)."""
    return AdagradDA(
        learning_rate,
        initial_gradient_squared_accumulator_value,
        l1_regularization_strength,
        l2_regularization_strength,
        name=name,
        global_step=global_step,
        use_locking=use_locking,
    )
