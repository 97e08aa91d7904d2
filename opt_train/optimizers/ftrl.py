"""TF1's FTRL-Proximal (`tf.compat.v1.train.FtrlOptimizer`): L1, L2, L2 shrinkage, beta."""

from __future__ import annotations

import numbers

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, keras_serializable, may_be_positive
from opt_train.optimizers.specs import check_args


@keras_serializable
class Ftrl(Optimizer):
    r"""FTRL-Proximal (McMahan et al., 2013) as TF1's `FtrlOptimizer` computes it.

    With :math:`n` the `"accum"` slot, :math:`z` the `"linear"` slot,
    :math:`p` = `learning_rate_power`, :math:`\lambda_1`, :math:`\lambda_2`
    the L1 / L2 strengths and :math:`\lambda_s` the L2-shrinkage strength:

    .. math::

        \hat g &= g + 2 \lambda_s \theta_{t-1} \\
        n_t &= n_{t-1} + g^2 \\
        \sigma_t &= (n_t^{-p} - n_{t-1}^{-p}) / \mathrm{lr} \\
        z_t &= z_{t-1} + \hat g - \sigma_t \theta_{t-1} \\
        \lambda_2' &= \lambda_2 + \beta / (2\, \mathrm{lr}) \\
        \theta_t &= \begin{cases}
            (\lambda_1 \operatorname{sign}(z_t) - z_t) /
                (n_t^{-p} / \mathrm{lr} + 2 \lambda_2') & |z_t| > \lambda_1 \\
            0 & \text{otherwise}
        \end{cases}

    The L2 of :math:`\lambda_2` is a stabilisation penalty; the shrinkage
    :math:`\lambda_s` is a magnitude penalty added to the loss's gradient.
    A sparse gradient (`tf.IndexedSlices`) updates only the rows it names,
    so shrinkage only reaches active weights (TF1's documented behaviour);
    a row named twice is updated once, with the summed gradient.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. TF1 requires it; here it defaults to
            `0.01` for YAML convenience. Defaults to `0.01`.
        learning_rate_power: :math:`p`, <= 0; how the per-coordinate rate
            falls as gradients accumulate (0: fixed rate). Defaults to `-0.5`.
        initial_accumulator_value: Starting value of `"accum"`, >= 0.
            Defaults to `0.1`.
        l1_regularization_strength: :math:`\lambda_1`, >= 0. Defaults to `0.0`.
        l2_regularization_strength: :math:`\lambda_2`, >= 0. Defaults to `0.0`.
        l2_shrinkage_regularization_strength: :math:`\lambda_s`, >= 0.
            Defaults to `0.0`.
        beta: The paper's :math:`\beta`, >= 0 (TF1's `None` means `0.0`).
            Defaults to `0.0`.
        name: Name of the optimizer. Defaults to `None` (derived from the
            class name).
        **kwargs: The Keras base arguments (`weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`).
    """

    def __init__(
        self,
        learning_rate=0.01,
        learning_rate_power=-0.5,
        initial_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        l2_shrinkage_regularization_strength=0.0,
        beta=0.0,
        name=None,
        **kwargs,
    ):
        beta = 0.0 if beta is None else beta
        check_args(
            "Ftrl",
            learning_rate_power=learning_rate_power,
            initial_accumulator_value=initial_accumulator_value,
            l1_regularization_strength=l1_regularization_strength,
            l2_regularization_strength=l2_regularization_strength,
            l2_shrinkage_regularization_strength=l2_shrinkage_regularization_strength,
            beta=beta,
        )
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.l2_shrinkage_regularization_strength = l2_shrinkage_regularization_strength
        self.beta = beta

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "accum", initializer=self.initial_accumulator_value)
        self.add_slots(var_list, "linear")

    def _kernel_runs(self, op_name, variable):
        # Other powers stay as ops: the kernel takes pow(n_t, -p) twice where they reuse it.
        power = self.learning_rate_power
        return _is_half(power) and has_kernel(op_name, variable)

    def dense_kernel(self, variable):
        return self._kernel_runs("ResourceApplyFtrl", variable)

    def sparse_kernel(self, variable):
        return self._kernel_runs("ResourceSparseApplyFtrl", variable)

    def _kernel_arguments(self, variable, lr):
        dtype = variable.dtype
        return dict(
            var=variable.handle,
            accum=self.slot(variable, "accum").handle,
            linear=self.slot(variable, "linear").handle,
            lr=lr,
            l1=self.hyper("l1_regularization_strength", dtype),
            l2=self._l2(lr),
            lr_power=self.hyper("learning_rate_power", dtype),
            use_locking=self.use_locking,
        )

    def _shrinkage(self):
        return may_be_positive(self.l2_shrinkage_regularization_strength)

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernels, the ones FtrlOptimizer runs (V2 only with shrinkage): one
        # pass over the variable and both slots instead of a chain of elementwise ops.
        arguments = self._kernel_arguments(variable, lr)
        if self._shrinkage():
            shrinkage = self.hyper("l2_shrinkage_regularization_strength", variable.dtype)
            tf.raw_ops.ResourceApplyFtrlV2(grad=gradient, l2_shrinkage=shrinkage, **arguments)
        else:
            tf.raw_ops.ResourceApplyFtrl(grad=gradient, **arguments)

    def fused_sparse_update(self, gradient, variable, lr):
        # TF1's sparse kernels (FtrlOptimizer's `_resource_apply_sparse`): the named rows only.
        arguments = self._kernel_arguments(variable, lr)
        arguments.update(grad=gradient.values, indices=gradient.indices)
        if self._shrinkage():
            shrinkage = self.hyper("l2_shrinkage_regularization_strength", variable.dtype)
            tf.raw_ops.ResourceSparseApplyFtrlV2(l2_shrinkage=shrinkage, **arguments)
        else:
            tf.raw_ops.ResourceSparseApplyFtrl(**arguments)

    def dense_update(self, gradient, variable, lr):
        accum = self.slot(variable, "accum")
        linear = self.slot(variable, "linear")
        new_var, new_accum, new_linear = self._next(
            tf.convert_to_tensor(variable),
            tf.convert_to_tensor(accum),
            tf.convert_to_tensor(linear),
            gradient,
            lr,
        )
        self.assign(linear, new_linear)
        self.assign(variable, new_var)
        self.assign(accum, new_accum)

    def sparse_update(self, gradient, variable, lr):
        accum = self.slot(variable, "accum")
        linear = self.slot(variable, "linear")
        indices = gradient.indices
        new_var, new_accum, new_linear = self._next(
            gather_rows(variable, indices),
            gather_rows(accum, indices),
            gather_rows(linear, indices),
            gradient.values,
            lr,
        )
        self.assign(linear, tf.IndexedSlices(new_linear, indices))
        self.assign(variable, tf.IndexedSlices(new_var, indices))
        self.assign(accum, tf.IndexedSlices(new_accum, indices))

    def _l2(self, lr):
        """l2 with beta folded in at the current rate, as TF1's `FtrlOptimizer._prepare`."""
        dtype = lr.dtype
        return self.hyper("l2_regularization_strength", dtype) + self.hyper("beta", dtype) / (
            2 * tf.maximum(lr, tf.cast(1e-36, dtype))
        )

    def _accum_power(self, accum):
        """n^(-p); a square root for the common p = -0.5, as TF's kernel does."""
        if _is_half(self.learning_rate_power):
            return tf.sqrt(accum)
        return tf.pow(accum, -self.hyper("learning_rate_power", accum.dtype))

    def _next(self, variable, accum, linear, gradient, lr):
        """New (variable, accum, linear) for whole tensors or gathered rows."""
        # Evaluation order of TF's ApplyFtrl / ApplyFtrlV2 kernels, so that
        # results agree with them to the last bits.
        dtype = variable.dtype
        l1 = self.hyper("l1_regularization_strength", dtype)
        l2 = self._l2(lr)
        shrunk = gradient
        if self._shrinkage():
            shrinkage = 2 * self.hyper("l2_shrinkage_regularization_strength", dtype)
            shrunk = gradient + shrinkage * variable
        new_accum = accum + gradient * gradient
        new_accum_power = self._accum_power(new_accum)
        sigma = (new_accum_power - self._accum_power(accum)) / lr
        linear = linear + (shrunk - sigma * variable)
        quadratic = new_accum_power / lr + 2 * l2
        proximal = (l1 * tf.sign(linear) - linear) / quadratic
        variable = tf.where(tf.abs(linear) > l1, proximal, tf.zeros_like(proximal))
        return variable, new_accum, linear

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "learning_rate_power": self.learning_rate_power,
                "initial_accumulator_value": self.initial_accumulator_value,
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
                "l2_shrinkage_regularization_strength": (
                    self.l2_shrinkage_regularization_strength
                ),
                "beta": self.beta,
            }
        )
        return config


def _is_half(power):
    """Whether `learning_rate_power` is known now to be the common -0.5 (not a callable or tensor)."""
    return isinstance(power, numbers.Real) and power == -0.5
