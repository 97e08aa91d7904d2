"""TF1's RMSProp (`tf.compat.v1.train.RMSPropOptimizer`), plain or centered, with momentum."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, keras_serializable
from opt_train.optimizers.specs import check_args


@keras_serializable
class RMSProp(Optimizer):
    r"""RMSProp as TF1's `tf.compat.v1.train.RMSPropOptimizer` computes it.

    Unlike Keras' `RMSprop`, the mean square starts at one (TF1's `"rms"`
    slot is initialised with ones), `epsilon` sits inside the square root,
    and the learning rate is folded into the momentum accumulator:

    .. math::

        \mathrm{ms}_t &= \rho\, \mathrm{ms}_{t-1} + (1 - \rho) g^2 \\
        \mathrm{mg}_t &= \rho\, \mathrm{mg}_{t-1} + (1 - \rho) g
            \quad \text{(centered only; otherwise } \mathrm{mg}_t = 0) \\
        \mathrm{mom}_t &= \mu\, \mathrm{mom}_{t-1} +
            \mathrm{lr}\, g / \sqrt{\mathrm{ms}_t - \mathrm{mg}_t^2 + \epsilon} \\
        \theta_t &= \theta_{t-1} - \mathrm{mom}_t

    A sparse gradient (`tf.IndexedSlices`) updates only the rows it names,
    in the variable and in every slot: unused rows neither decay nor move
    with momentum (TF1's documented sparse behaviour, which differs from the
    published algorithm). A row named twice is updated once, with the summed
    gradient.

    Slots: `"rms"`, `"momentum"`, and `"mg"` when `centered`.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. TF1 requires it; here it defaults to
            `0.01` for YAML convenience. Defaults to `0.01`.
        rho: Discounting factor of the gradient history (TF1: `decay`).
            Defaults to `0.9`.
        momentum: Momentum factor :math:`\mu`. Defaults to `0.0`.
        epsilon: Added to the mean square inside the square root.
            Defaults to `1e-10`.
        centered: If True, normalise by the estimated variance of the
            gradient instead of its uncentered second moment. Defaults to
            `False`.
        name: Name of the optimizer. Defaults to `None` (derived from the
            class name).
        **kwargs: The Keras base arguments (`weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`).
    """

    def __init__(
        self,
        learning_rate=0.01,
        rho=0.9,
        momentum=0.0,
        epsilon=1e-10,
        centered=False,
        name=None,
        **kwargs,
    ):
        check_args("RMSProp", rho=rho, momentum=momentum, epsilon=epsilon, centered=centered)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon
        self.centered = bool(centered)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "rms", initializer="ones")
        self.add_slots(var_list, "momentum")
        if self.centered:
            self.add_slots(var_list, "mg")

    def _hyper(self, dtype):
        """rho, momentum and epsilon as tensors of the variable's dtype."""
        return self.hyper("rho", dtype), self.hyper("momentum", dtype), self.hyper("epsilon", dtype)

    def dense_kernel(self, variable):
        return True

    def sparse_kernel(self, variable):
        name = "ResourceSparseApplyCenteredRMSProp" if self.centered else "ResourceSparseApplyRMSProp"
        return has_kernel(name, variable)

    def _kernel_arguments(self, variable, lr):
        rho, momentum, epsilon = self._hyper(variable.dtype)
        arguments = dict(
            var=variable.handle,
            ms=self.slot(variable, "rms").handle,
            mom=self.slot(variable, "momentum").handle,
            lr=lr,
            rho=rho,
            momentum=momentum,
            epsilon=epsilon,
            use_locking=self.use_locking,
        )
        if self.centered:
            arguments["mg"] = self.slot(variable, "mg").handle
        return arguments

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernels (what tf.compat.v1.train.RMSPropOptimizer runs): one pass
        # over the variable and its slots instead of a chain of elementwise ops.
        arguments = self._kernel_arguments(variable, lr)
        if self.centered:
            tf.raw_ops.ResourceApplyCenteredRMSProp(grad=gradient, **arguments)
        else:
            tf.raw_ops.ResourceApplyRMSProp(grad=gradient, **arguments)

    def fused_sparse_update(self, gradient, variable, lr):
        # TF1's sparse kernels: the named rows of the variable and of every slot only.
        arguments = self._kernel_arguments(variable, lr)
        arguments.update(grad=gradient.values, indices=gradient.indices)
        if self.centered:
            tf.raw_ops.ResourceSparseApplyCenteredRMSProp(**arguments)
        else:
            tf.raw_ops.ResourceSparseApplyRMSProp(**arguments)

    def sparse_update(self, gradient, variable, lr):
        rho, momentum, epsilon = self._hyper(variable.dtype)
        values, indices = gradient.values, gradient.indices
        ms = self.slot(variable, "rms")
        ms_rows = gather_rows(ms, indices) * rho + tf.square(values) * (1 - rho)
        self.assign(ms, tf.IndexedSlices(ms_rows, indices))
        denominator = ms_rows + epsilon
        if self.centered:
            mg = self.slot(variable, "mg")
            mg_rows = gather_rows(mg, indices) * rho + values * (1 - rho)
            self.assign(mg, tf.IndexedSlices(mg_rows, indices))
            denominator = denominator - tf.square(mg_rows)
        mom = self.slot(variable, "momentum")
        # 1 / sqrt, not rsqrt: TF's sparse kernel works row by row, where Eigen's
        # rsqrt is the exact 1 / sqrt rather than the vectorised approximation.
        mom_rows = gather_rows(mom, indices) * momentum + (1 / tf.sqrt(denominator)) * lr * values
        self.assign(mom, tf.IndexedSlices(mom_rows, indices))
        self.assign_sub(variable, tf.IndexedSlices(mom_rows, indices))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "rho": self.rho,
                "momentum": self.momentum,
                "epsilon": self.epsilon,
                "centered": self.centered,
            }
        )
        return config

