"""RETURNN's Nadam (its `NadamOptimizer`, TF1 contrib's): Adam with a Nesterov look-ahead on the first moment."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.adam import Adam
from opt_train.optimizers.base import gather_rows, keras_serializable


@keras_serializable
class ReturnnNadam(Adam):
    r"""Nadam as RETURNN's TF backend computes it (`returnn/tf/updater.py` `NadamOptimizer`).

    RETURNN copied TF1's `tf.contrib.opt.NadamOptimizer` to keep it under TF 2,
    because Keras' `Nadam` (Dozat's momentum schedule with its `u` product)
    gives other numbers. It is TF1's Adam with the Nesterov look-ahead: the
    bias corrections are folded into the step size, `epsilon` is added to
    :math:`\sqrt{v_t}`, and the update uses
    :math:`\bar m_t = \beta_1 m_t + (1 - \beta_1) g` instead of :math:`m_t`.
    With :math:`t` the number of updates including this one:

    .. math::

        \mathrm{lr}_t &= \mathrm{learning\_rate} \cdot
            \sqrt{1 - \beta_2^t} / (1 - \beta_1^t) \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2) g^2 \\
        \theta_t &= \theta_{t-1} - \mathrm{lr}_t \,
            (\beta_1 m_t + (1 - \beta_1) g) / (\sqrt{v_t} + \epsilon)

    A sparse gradient (`tf.IndexedSlices`) follows RETURNN's sparse path: `m`
    and `v` decay on every row, the named rows get their share, and only the
    named rows of the variable move.

    Slots: `"m"`, `"v"`.

    Args:
        learning_rate: A float, an opt-train lr policy or any Keras
            `LearningRateSchedule`. Defaults to `0.001`.
        beta_1: Decay rate of the first-moment estimate (TF1: `beta1`).
            Defaults to `0.9`.
        beta_2: Decay rate of the second-moment estimate (TF1: `beta2`).
            Defaults to `0.999`.
        epsilon: The "epsilon hat" added to :math:`\sqrt{v_t}`. Defaults to
            `1e-8` (TF1's; a RETURNN config without `optimizer_epsilon` runs
            with 1e-16, which `opt-train convert returnn` writes out).
        name: Name of the optimizer. Defaults to `None`.
        **kwargs: The Keras base arguments, as for `Adam`.
    """

    # TF1's fused Adam kernel with use_nesterov, as RETURNN's NadamOptimizer calls it.
    use_nesterov = True

    def sparse_update(self, gradient, variable, lr):
        step_size = self._step_size(lr, variable.dtype)
        beta_1, beta_2, epsilon = self._hyper(variable.dtype)
        values, indices = gradient.values, gradient.indices
        m = self.slot(variable, "m")
        v = self.slot(variable, "v")
        m_share = values * (1 - beta_1)
        self.assign(m, m * beta_1)
        self.assign_add(m, tf.IndexedSlices(m_share, indices))
        m_bar = m_share + beta_1 * gather_rows(m, indices)
        self.assign(v, v * beta_2)
        self.assign_add(v, tf.IndexedSlices((values * values) * (1 - beta_2), indices))
        delta = step_size * m_bar / (tf.sqrt(gather_rows(v, indices)) + epsilon)
        self.assign_sub(variable, tf.IndexedSlices(delta, indices))
