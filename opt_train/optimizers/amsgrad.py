"""AMSGrad: Adam without bias correction whose denominator never shrinks (RETURNN)."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import dense, keras_serializable
from opt_train.optimizers.specs import check_args
from opt_train.optimizers.custom import BaseCustomOptimizer


@keras_serializable
class AMSGrad(BaseCustomOptimizer):
    """RETURNN's `AMSGradOptimizer` (Reddi et al. 2018, "On the Convergence of Adam and Beyond").

    Reference 000 gives only the signature; the rule follows RETURNN's
    `returnn/tf/updater.py`, which has no bias correction:

    .. math::

        t &\\leftarrow t + 1 \\\\
        \\eta_t &\\leftarrow \\eta / \\sqrt{t} \\text{ if decay else } \\eta \\\\
        m_t &\\leftarrow \\beta_1 m_{t-1} + (1 - \\beta_1) \\, g \\\\
        v_t &\\leftarrow \\beta_2 v_{t-1} + (1 - \\beta_2) \\, g^2 \\\\
        \\hat v_t &\\leftarrow \\max(\\hat v_{t-1}, v_t) \\\\
        \\theta &\\leftarrow \\theta - \\eta_t \\, m_t / (\\epsilon + \\sqrt{\\hat v_t})

    Where the denominator is zero (with the default `epsilon=0`, an element
    whose gradient has always been zero) the step is zero; RETURNN computed
    `0 / 0 = NaN` there. RETURNN has no sparse path (its sparse methods raise),
    and its `apply_gradients` used the gradient densely: a `tf.IndexedSlices`
    gradient is therefore made dense, and every row's averages decay.

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Defaults to `0.001`.
        decay: Whether to divide the learning rate by `sqrt(t)`. Defaults to `False`.
        beta_1: Decay of the running average of `g` (`m`). Defaults to `0.9`.
        beta_2: Decay of the running average of `g * g` (`v`). Defaults to `0.99`.
        epsilon: Added to `sqrt(v_hat)`. Defaults to `0.0`.
        var_list: Variables to create the slots for now (RETURNN required
            them up front); otherwise they are created on the first update.
            Not part of the config. Defaults to `()`.
        name: Name of the optimizer. Defaults to `"AMSGrad"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    slot_names = ("m", "v", "v_hat")

    def __init__(
        self,
        learning_rate=0.001,
        decay=False,
        beta_1=0.9,
        beta_2=0.99,
        epsilon=0.0,
        var_list=(),
        name=None,
        **kwargs,
    ):
        check_args("AMSGrad", decay=decay, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.decay = bool(decay)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        if var_list:
            self.build(list(var_list))

    # RETURNN's rule is dense: a sparse gradient runs as its dense equivalent.
    sum_duplicate_indices = False

    def sparse_update(self, gradient, variable, lr):
        self.dense_update(dense(gradient), variable, lr)

    def apply_rule(self, grad, var, lr, slots):
        dtype = var.dtype
        beta_1 = self.hyper("beta_1", dtype)
        beta_2 = self.hyper("beta_2", dtype)
        if self.decay:
            lr = lr / tf.sqrt(self.local_step(dtype))
        m = beta_1 * slots["m"] + (1 - beta_1) * grad
        v = beta_2 * slots["v"] + (1 - beta_2) * grad * grad
        v_hat = tf.maximum(slots["v_hat"], v)
        update = lr * tf.math.divide_no_nan(m, self.hyper("epsilon", dtype) + tf.sqrt(v_hat))
        return update, {"m": m, "v": v, "v_hat": v_hat}

    def get_config(self):
        config = super().get_config()
        config.update(
            decay=self.decay, beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon
        )
        return config
