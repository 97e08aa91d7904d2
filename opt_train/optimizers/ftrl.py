"""TF1's FTRL-Proximal (`tf.compat.v1.train.FtrlOptimizer`): L1, L2, L2 shrinkage, beta."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, deduplicate, has_kernel, is_sparse
from opt_train.optimizers.specs import check_args


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

    def update_step(self, gradient, variable, learning_rate):
        lr = tf.cast(learning_rate, variable.dtype)
        accum = self.slot(variable, "accum")
        linear = self.slot(variable, "linear")
        if is_sparse(gradient):
            gradient = deduplicate(gradient)
            indices = gradient.indices
            new_var, new_accum, new_linear = self._next(
                tf.gather(variable, indices),
                tf.gather(accum.value, indices),
                tf.gather(linear.value, indices),
                tf.cast(gradient.values, variable.dtype),
                lr,
            )
            self.assign(linear, tf.IndexedSlices(new_linear, indices))
            self.assign(variable, tf.IndexedSlices(new_var, indices))
            self.assign(accum, tf.IndexedSlices(new_accum, indices))
        elif self.learning_rate_power == -0.5 and has_kernel("ResourceApplyFtrl", variable):
            # Other powers stay as ops: the kernel takes pow(n_t, -p) twice where they reuse it.
            self._fused_update(tf.cast(gradient, variable.dtype), variable, accum, linear, lr)
        else:
            new_var, new_accum, new_linear = self._next(
                tf.convert_to_tensor(variable),
                tf.convert_to_tensor(accum),
                tf.convert_to_tensor(linear),
                tf.cast(gradient, variable.dtype),
                lr,
            )
            self.assign(linear, new_linear)
            self.assign(variable, new_var)
            self.assign(accum, new_accum)

    def _fused_update(self, gradient, variable, accum, linear, lr):
        # TF1's own fused kernels, the ones FtrlOptimizer runs (V2 only with shrinkage): one
        # pass over the variable and both slots instead of a chain of elementwise ops.
        dtype = variable.dtype
        kwargs = dict(
            var=variable.handle,
            accum=accum.handle,
            linear=linear.handle,
            grad=gradient,
            lr=lr,
            l1=tf.cast(self.l1_regularization_strength, dtype),
            l2=self._l2(lr),
            lr_power=tf.cast(self.learning_rate_power, dtype),
            use_locking=False,
        )
        if self.l2_shrinkage_regularization_strength > 0:
            shrinkage = tf.cast(self.l2_shrinkage_regularization_strength, dtype)
            tf.raw_ops.ResourceApplyFtrlV2(l2_shrinkage=shrinkage, **kwargs)
        else:
            tf.raw_ops.ResourceApplyFtrl(**kwargs)

    def _l2(self, lr):
        """l2 with beta folded in at the current rate, as TF1's `FtrlOptimizer._prepare`."""
        dtype = lr.dtype
        return tf.cast(self.l2_regularization_strength, dtype) + tf.cast(
            self.beta, dtype
        ) / (2 * tf.maximum(lr, tf.cast(1e-36, dtype)))

    def _accum_power(self, accum):
        """n^(-p); a square root for the common p = -0.5, as TF's kernel does."""
        if self.learning_rate_power == -0.5:
            return tf.sqrt(accum)
        return tf.pow(accum, tf.cast(-self.learning_rate_power, accum.dtype))

    def _next(self, variable, accum, linear, gradient, lr):
        """New (variable, accum, linear) for whole tensors or gathered rows."""
        # Evaluation order of TF's ApplyFtrl / ApplyFtrlV2 kernels, so that
        # results agree with them to the last bits.
        dtype = variable.dtype
        l1 = tf.cast(self.l1_regularization_strength, dtype)
        l2 = self._l2(lr)
        shrunk = gradient
        if self.l2_shrinkage_regularization_strength > 0:
            shrinkage = tf.cast(2 * self.l2_shrinkage_regularization_strength, dtype)
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
