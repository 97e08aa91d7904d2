"""TF1's Adam (`tf.compat.v1.train.AdamOptimizer`, epsilon-hat form) and LazyAdam."""

from __future__ import annotations

import keras
import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, keras_serializable
from opt_train.optimizers.specs import check_args


@keras_serializable
class Adam(Optimizer):
    r"""Adam as TF1's `tf.compat.v1.train.AdamOptimizer` computes it.

    The bias correction is folded into the step size and `epsilon` is the
    "epsilon hat" of Kingma & Ba (formula just before section 2.1), so the
    results differ from Keras' `Adam` when `epsilon` matters. With
    :math:`t` the number of updates including this one:

    .. math::

        \mathrm{lr}_t &= \mathrm{learning\_rate} \cdot
            \sqrt{1 - \beta_2^t} / (1 - \beta_1^t) \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2) g^2 \\
        \theta_t &= \theta_{t-1} - \mathrm{lr}_t \, m_t / (\sqrt{v_t} + \epsilon)

    A sparse gradient (`tf.IndexedSlices`, from an embedding lookup) gets the
    same result as its dense equivalent, as in TF1: `m` and `v` decay on every
    row and every row of the variable moves. `LazyAdam` touches only the named
    rows instead.

    Slots: `"m"`, `"v"`.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. Defaults to `0.001`.
        beta_1: Decay rate of the first-moment estimate (TF1: `beta1`).
            Defaults to `0.9`.
        beta_2: Decay rate of the second-moment estimate (TF1: `beta2`).
            Defaults to `0.999`.
        epsilon: The "epsilon hat" added to :math:`\sqrt{v_t}`.
            Defaults to `1e-8`.
        name: Name of the optimizer. Defaults to `None` (derived from the
            class name).
        **kwargs: The Keras base arguments (`weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`).
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-8,
        name=None,
        **kwargs,
    ):
        check_args("Adam", beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "m")
        self.add_slots(var_list, "v")
        # TF1 keeps beta^t as running products (non-slot variables), not
        # pow(beta, t): 1 - beta_2^t cancels badly for small t, so the two
        # roundings differ by ~1e-5 relative in the first steps.
        self._beta_1_power = self.add_variable(
            (), initializer=keras.initializers.Constant(self.initial_value("beta_1")), name="beta1_power"
        )
        self._beta_2_power = self.add_variable(
            (), initializer=keras.initializers.Constant(self.initial_value("beta_2")), name="beta2_power"
        )

    def apply(self, grads, trainable_variables=None):
        """Applies one update, then advances beta^t as TF1 does after its updates."""
        grads = list(grads)
        super().apply(grads, trainable_variables)
        if grads:
            dtype = self._beta_1_power.dtype
            self._beta_1_power.assign(self._beta_1_power * self.hyper("beta_1", dtype))
            self._beta_2_power.assign(self._beta_2_power * self.hyper("beta_2", dtype))

    def _hyper(self, dtype):
        """beta_1, beta_2 and epsilon as tensors of the variable's dtype."""
        return self.hyper("beta_1", dtype), self.hyper("beta_2", dtype), self.hyper("epsilon", dtype)

    def _step_size(self, learning_rate, dtype):
        """lr_t: the learning rate with both bias corrections folded in."""
        beta_1_power = tf.cast(self._beta_1_power, dtype)
        beta_2_power = tf.cast(self._beta_2_power, dtype)
        return learning_rate * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)

    # The kernel's Nesterov form (TF1 contrib's Nadam, RETURNN's `ReturnnNadam`).
    use_nesterov = False

    def dense_kernel(self, variable):
        return True

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel, the one tf.compat.v1.train.AdamOptimizer runs: one pass
        # over the variable, m and v, where the same math as separate ops makes a dozen
        # (~1/4 of a 784-1024-1024-10 MLP's step on a CPU).
        dtype = variable.dtype
        beta_1, beta_2, epsilon = self._hyper(dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self.slot(variable, "m").handle,
            v=self.slot(variable, "v").handle,
            beta1_power=tf.cast(self._beta_1_power, dtype),
            beta2_power=tf.cast(self._beta_2_power, dtype),
            lr=lr,
            beta1=beta_1,
            beta2=beta_2,
            epsilon=epsilon,
            grad=gradient,
            use_locking=self.use_locking,
            use_nesterov=self.use_nesterov,
        )

    def dense_update(self, gradient, variable, lr):
        # The fused kernel's math (training_ops.cc ApplyAdamNonCuda) as separate ops: the path a
        # DVariable takes, since DTensor cannot lay out ResourceApplyAdam on a sharded variable.
        step_size = self._step_size(lr, variable.dtype)
        beta_1, beta_2, epsilon = self._hyper(variable.dtype)
        m_slot, v_slot = self.slot(variable, "m"), self.slot(variable, "v")
        m = m_slot + (gradient - m_slot) * (1 - beta_1)
        v = v_slot + (gradient * gradient - v_slot) * (1 - beta_2)
        self.assign(m_slot, m)
        self.assign(v_slot, v)
        direction = gradient * (1 - beta_1) + beta_1 * m if self.use_nesterov else m
        self.assign_sub(variable, (direction * step_size) / (tf.sqrt(v) + epsilon))

    def sparse_update(self, gradient, variable, lr):
        # TF1: decay every row of m and v, then add the named rows' share. This reads
        # the whole of m, v and the variable, as TF1's does; LazyAdam does not.
        step_size = self._step_size(lr, variable.dtype)
        beta_1, beta_2, epsilon = self._hyper(variable.dtype)
        values, indices = gradient.values, gradient.indices
        m = self.slot(variable, "m")
        v = self.slot(variable, "v")
        self.assign(m, m * beta_1)
        self.assign_add(m, tf.IndexedSlices(values * (1 - beta_1), indices))
        self.assign(v, v * beta_2)
        self.assign_add(v, tf.IndexedSlices((values * values) * (1 - beta_2), indices))
        self.assign_sub(variable, step_size * m / (tf.sqrt(v) + epsilon))

    def get_config(self):
        config = super().get_config()
        config.update(
            {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}
        )
        return config


@keras_serializable
class LazyAdam(Adam):
    r"""Adam that, for a sparse gradient, updates only the rows it names.

    For embedding-heavy models: with a `tf.IndexedSlices` gradient the rows
    of `m`, `v` and the variable that the lookup did not touch stay as they
    are (tensorflow_addons' `LazyAdam`), so an update costs rows looked up,
    not the table size. This differs from the published algorithm: an
    unused row's moments do not decay. Dense gradients get exactly `Adam`.
    For each named row :math:`i`:

    .. math::

        \mathrm{lr}_t &= \mathrm{learning\_rate} \cdot
            \sqrt{1 - \beta_2^t} / (1 - \beta_1^t) \\
        m_{t,i} &= \beta_1 m_{t-1,i} + (1 - \beta_1) g_i \\
        v_{t,i} &= \beta_2 v_{t-1,i} + (1 - \beta_2) g_i^2 \\
        \theta_{t,i} &= \theta_{t-1,i} - \mathrm{lr}_t \, m_{t,i} / (\sqrt{v_{t,i}} + \epsilon)

    A row named twice in one gradient is updated once, with the summed
    gradient. Slots: `"m"`, `"v"`.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. Defaults to `0.001`.
        beta_1: Decay rate of the first-moment estimate. Defaults to `0.9`.
        beta_2: Decay rate of the second-moment estimate. Defaults to `0.999`.
        epsilon: The "epsilon hat" added to :math:`\sqrt{v_t}`.
            Defaults to `1e-8`.
        name: Name of the optimizer. Defaults to `None`.
        **kwargs: The Keras base arguments, as for `Adam`.
    """

    def sparse_update(self, gradient, variable, lr):
        step_size = self._step_size(lr, variable.dtype)
        beta_1, beta_2, epsilon = self._hyper(variable.dtype)
        values, indices = gradient.values, gradient.indices
        m = self.slot(variable, "m")
        v = self.slot(variable, "v")
        m_rows = beta_1 * gather_rows(m, indices) + (1 - beta_1) * values
        v_rows = beta_2 * gather_rows(v, indices) + (1 - beta_2) * tf.square(values)
        self.assign(m, tf.IndexedSlices(m_rows, indices))
        self.assign(v, tf.IndexedSlices(v_rows, indices))
        delta = step_size * m_rows / (tf.sqrt(v_rows) + epsilon)
        self.assign_sub(variable, tf.IndexedSlices(delta, indices))
