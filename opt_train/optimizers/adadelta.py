"""TF1's Adadelta (`tf.compat.v1.train.AdadeltaOptimizer`)."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, keras_serializable
from opt_train.optimizers.specs import check_args


@keras_serializable
class Adadelta(Optimizer):
    r"""Adadelta (Zeiler, 2012) as TF1's `tf.compat.v1.train.AdadeltaOptimizer` computes it.

    The step of the paper is scaled by `learning_rate`; use `1.0` for the
    paper's exact form. TF1's default is the much smaller `0.001`.

    .. math::

        a_t &= \rho\, a_{t-1} + (1 - \rho) g^2 \\
        \Delta_t &= \sqrt{u_{t-1} + \epsilon} / \sqrt{a_t + \epsilon} \cdot g \\
        \theta_t &= \theta_{t-1} - \mathrm{lr}\, \Delta_t \\
        u_t &= \rho\, u_{t-1} + (1 - \rho) \Delta_t^2

    with :math:`a` the `"accum"` slot and :math:`u` the `"accum_update"`
    slot. A sparse gradient (`tf.IndexedSlices`) updates only the rows it
    names, in the variable and in both slots (TF1's `SparseApplyAdadelta`);
    a row named twice is updated once, with the summed gradient.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. Defaults to `0.001`.
        rho: Decay rate of both running averages. Defaults to `0.95`.
        epsilon: Conditioning constant inside both square roots.
            Defaults to `1e-8`.
        name: Name of the optimizer. Defaults to `None` (derived from the
            class name).
        **kwargs: The Keras base arguments (`weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`).
    """

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, name=None, **kwargs):
        check_args("Adadelta", rho=rho, epsilon=epsilon)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.rho = rho
        self.epsilon = epsilon

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "accum")
        self.add_slots(var_list, "accum_update")

    def dense_kernel(self, variable):
        return True

    def _next(self, accum, accum_update, gradient, dtype):
        """New accum, the step Delta and the new accum_update, for rows (the sparse path)."""
        # Evaluation order of TF's ApplyAdadelta kernel (sqrt * rsqrt * g).
        rho = self.hyper("rho", dtype)
        epsilon = self.hyper("epsilon", dtype)
        accum = accum * rho + tf.square(gradient) * (1 - rho)
        delta = tf.sqrt(accum_update + epsilon) * tf.math.rsqrt(accum + epsilon) * gradient
        accum_update = accum_update * rho + tf.square(delta) * (1 - rho)
        return accum, delta, accum_update

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel (what tf.compat.v1.train.AdadeltaOptimizer runs): one pass
        # over the variable and both slots instead of a chain of elementwise ops.
        dtype = variable.dtype
        tf.raw_ops.ResourceApplyAdadelta(
            var=variable.handle,
            accum=self.slot(variable, "accum").handle,
            accum_update=self.slot(variable, "accum_update").handle,
            lr=lr,
            rho=self.hyper("rho", dtype),
            epsilon=self.hyper("epsilon", dtype),
            grad=gradient,
            use_locking=self.use_locking,
        )

    def sparse_update(self, gradient, variable, lr):
        indices = gradient.indices
        accum = self.slot(variable, "accum")
        accum_update = self.slot(variable, "accum_update")
        new_accum, delta, new_update = self._next(
            gather_rows(accum, indices),
            gather_rows(accum_update, indices),
            gradient.values,
            variable.dtype,
        )
        self.assign(accum, tf.IndexedSlices(new_accum, indices))
        self.assign_sub(variable, tf.IndexedSlices(delta * lr, indices))
        self.assign(accum_update, tf.IndexedSlices(new_update, indices))

    def get_config(self):
        config = super().get_config()
        config.update({"rho": self.rho, "epsilon": self.epsilon})
        return config
