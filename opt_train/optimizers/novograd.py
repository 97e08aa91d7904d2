"""OpenSeq2Seq's NovoGrad: momentum SGD on gradients normalised by a layer-wise second moment."""

from __future__ import annotations

import numbers

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, keras_serializable, may_be_positive
from opt_train.optimizers.specs import check_args


@keras_serializable
class NovoGrad(Optimizer):
    r"""NovoGrad (Ginsburg et al., 2019) in OpenSeq2Seq's form.

    Each variable ("layer") keeps one scalar :math:`v`, a moving average of
    its squared gradient norm; the gradient is divided by its square root,
    optionally gets the coupled weight decay :math:`d\,\theta`, and drives
    TF1 momentum SGD (`tf.compat.v1.train.MomentumOptimizer`, with
    momentum :math:`\beta_1`):

    .. math::

        n_t &= \lVert g_t \rVert_2^2 \\
        v_t &= \begin{cases} n_t & v_{t-1} = 0 \\
                \beta_2 v_{t-1} + (1 - \beta_2) n_t & \text{otherwise} \end{cases} \\
        \hat g_t &= g_t / \sqrt{v_t + \epsilon} + d\, \theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + c\, \hat g_t,
            \qquad c = 1 - \beta_1 \text{ if grad\_averaging else } 1 \\
        \theta_t &= \theta_{t-1} - \mathrm{lr}\, m_t

    :math:`d` is `coupled_weight_decay`, OpenSeq2Seq's NovoGrad `weight_decay`:
    it goes through the normalisation-free part of the step and through the
    momentum. It is NOT the Keras base argument `weight_decay`, which is
    decoupled (:math:`\theta \leftarrow \theta - \mathrm{lr}\, w\, \theta`
    before the step) and is also accepted here.

    :math:`v` persists across steps, as the paper and OpenSeq2Seq's
    docstring describe. (OpenSeq2Seq's graph-mode code never wrote the
    average back, so there :math:`v_t = n_t` at every step.)

    A sparse gradient (`tf.IndexedSlices`) is de-duplicated; its norm is the
    norm of its rows, and, like TF1's sparse momentum, only the named rows
    of `"momentum"` and of the variable change.

    Slots: `"momentum"` (shaped like the variable) and `"grads_ema"` (one
    float32 scalar per variable).

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. Defaults to `1.0` (OpenSeq2Seq's).
        beta_1: Momentum :math:`\beta_1` (OpenSeq2Seq: `beta1`).
            Defaults to `0.95`.
        beta_2: Decay of the layer-wise second moment :math:`\beta_2`
            (OpenSeq2Seq: `beta2`). Defaults to `0.98`.
        epsilon: Added to :math:`v_t` inside the square root.
            Defaults to `1e-8`.
        coupled_weight_decay: :math:`d`, added to the normalised gradient
            (OpenSeq2Seq's NovoGrad `weight_decay`). Defaults to `0.0`.
        grad_averaging: If True, scale the normalised gradient by
            :math:`1 - \beta_1` so the momentum is a moving average.
            Defaults to `False`.
        name: Name of the optimizer. Defaults to `None` (derived from the
            class name).
        **kwargs: The Keras base arguments (`weight_decay` (decoupled),
            `clipnorm`, `clipvalue`, `global_clipnorm`, `use_ema`,
            `ema_momentum`, `ema_overwrite_frequency`).
    """

    def __init__(
        self,
        learning_rate=1.0,
        beta_1=0.95,
        beta_2=0.98,
        epsilon=1e-8,
        coupled_weight_decay=0.0,
        grad_averaging=False,
        name=None,
        **kwargs,
    ):
        check_args(
            "NovoGrad", beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
            coupled_weight_decay=coupled_weight_decay, grad_averaging=grad_averaging,
        )
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.coupled_weight_decay = coupled_weight_decay
        self.grad_averaging = bool(grad_averaging)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "momentum")
        self._slots["grads_ema"] = [
            self.add_variable((), initializer="zeros", dtype="float32", name="grads_ema")
            for _ in var_list
        ]

    def dense_update(self, gradient, variable, lr):
        dtype = variable.dtype
        scale = tf.cast(self._normaliser(variable, gradient), dtype)
        step = self._scaled(gradient * scale, tf.convert_to_tensor(variable))
        momentum = self.slot(variable, "momentum")
        self.assign(momentum, momentum * self.hyper("beta_1", dtype) + step)
        self.assign_sub(variable, momentum * lr)

    def sparse_update(self, gradient, variable, lr):
        dtype = variable.dtype
        values, indices = gradient.values, gradient.indices
        scale = tf.cast(self._normaliser(variable, values), dtype)
        step = self._scaled(values * scale, gather_rows(variable, indices))
        momentum = self.slot(variable, "momentum")
        new_rows = gather_rows(momentum, indices) * self.hyper("beta_1", dtype) + step
        self.assign(momentum, tf.IndexedSlices(new_rows, indices))
        self.assign_sub(variable, tf.IndexedSlices(new_rows * lr, indices))

    def _normaliser(self, variable, gradient):
        """Updates this variable's second moment; returns 1 / sqrt(v_t + epsilon) (float32)."""
        grads_ema = self.slot(variable, "grads_ema")
        norm_squared = tf.reduce_sum(tf.square(tf.cast(gradient, tf.float32)))
        # A zero average means "no gradient seen yet": start from this norm.
        ema = tf.where(
            tf.equal(grads_ema, 0.0),
            norm_squared,
            grads_ema * self.hyper("beta_2", tf.float32)
            + norm_squared * self._one_minus("beta_2", tf.float32),
        )
        self.assign(grads_ema, ema)
        return 1.0 / tf.sqrt(ema + self.hyper("epsilon", tf.float32))

    def _scaled(self, normalised, weights):
        """Adds the coupled weight decay and, with grad_averaging, the (1 - beta_1) factor."""
        dtype = normalised.dtype
        if may_be_positive(self.coupled_weight_decay):
            normalised = normalised + self.hyper("coupled_weight_decay", dtype) * weights
        if self.grad_averaging:
            normalised = normalised * self._one_minus("beta_1", dtype)
        return normalised

    def _one_minus(self, name, dtype):
        """1 - the hyperparameter `name`; for a float, in Python, rounded once, as OpenSeq2Seq."""
        value = getattr(self, name)
        if isinstance(value, numbers.Real):
            return tf.cast(1.0 - value, dtype)
        return 1 - self.hyper(name, dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "coupled_weight_decay": self.coupled_weight_decay,
                "grad_averaging": self.grad_averaging,
            }
        )
        return config

