"""BaseCustomOptimizer, the base a user subclasses by writing one method, and two examples on it.

Follows RETURNN's `returnn.tf.updater.BaseCustomOptimizer` (reference 000):
"This simplifies the interface to be implemented". A subclass names its slots
and writes the update rule; the base creates the slots, reads them, writes them
back and handles sparse gradients. Two levels are offered:

* `apply_rule(grad, var, lr, slots)` -- a pure function of the rows the
  gradient touches (all of them for a dense gradient). It returns the update,
  which is subtracted from the variable, and optionally the new slot values.
  For a `tf.IndexedSlices` gradient, the base gathers the touched rows of the
  variable and of every slot, calls the rule, and scatters the results back:
  rows the gradient does not touch keep their slot values ("lazy" semantics,
  as in RETURNN's `CustomAdamOptimizer`).
* `_apply(grad, var, lr, indices=None)` -- the RETURNN hook, for rules whose
  sparse semantics differ (e.g. a running average that decays every row):
  write the assignments yourself with `_gather`, `_assign`, `_assign_add` and
  `_assign_sub`, which take the same `indices`.

Difference from RETURNN: duplicate indices of a sparse gradient are summed
first (`base.deduplicate`, TF1's default), so a row looked up twice gets one
update with the summed gradient; RETURNN passed duplicates through to
`scatter_update`, whose result for repeated indices is undefined.
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.base import Optimizer, gather_rows, keras_serializable
from opt_train.optimizers.specs import check_args
from opt_train.optimizers.table import RETURNN_LEARNING_RATE


@keras_serializable
class BaseCustomOptimizer(Optimizer):
    """Base class of optimizers written as one update rule.

    Subclass it, list the per-variable slots in `slot_names` (each one is
    created zero-filled, shaped like its variable) and write `apply_rule`:

    ```python
    class MomentumSGD(BaseCustomOptimizer):
        slot_names = ("velocity",)

        def apply_rule(self, grad, var, lr, slots):
            velocity = 0.9 * slots["velocity"] + grad
            return lr * velocity, {"velocity": velocity}
    ```

    `grad`, `var` and the slot values are the rows the gradient touches, in
    the variable's dtype; `lr` is the learning rate of this step, a scalar in
    that dtype. `self.local_step(dtype)` is the 1-based number of this update.

    Args:
        learning_rate: A float, a `keras.optimizers.schedules.LearningRateSchedule`
            (opt-train's lr policies are ones) or a callable returning the rate.
            Required, as in RETURNN.
        name: Name of the optimizer. Defaults to the class name.
        **kwargs: The Keras base arguments: `weight_decay`, `clipnorm`,
            `clipvalue`, `global_clipnorm`, `use_ema`, `ema_momentum`,
            `ema_overwrite_frequency`.
    """

    slot_names: tuple = ()

    def __init__(self, learning_rate, name=None, **kwargs):
        if isinstance(learning_rate, (int, float)):
            RETURNN_LEARNING_RATE("learning_rate", learning_rate)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        for slot_name in self.slot_names:
            self.add_slots(var_list, slot_name)

    def dense_update(self, gradient, variable, lr):
        self._apply(gradient, variable, lr)

    def sparse_update(self, gradient, variable, lr):
        self._apply(gradient.values, variable, lr, indices=gradient.indices)

    # -- the two levels a subclass may override -------------------------
    def apply_rule(self, grad, var, lr, slots):
        """The update rule on the touched rows.

        Args:
            grad: The gradient rows.
            var: The current variable rows.
            lr: The learning rate of this step (scalar).
            slots: Dict slot name -> the current slot rows.

        Returns:
            `update` (subtracted from the variable rows), or
            `(update, new_slots)` with `new_slots` a dict slot name -> new rows
            (slots left out keep their value).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement `apply_rule` or `_apply`."
        )

    def _apply(self, grad, var, lr, indices=None):
        """Applies one step to `var` (the rows `indices` of it, when given)."""
        slots = {
            slot_name: self._gather(self.slot(var, slot_name), indices)
            for slot_name in self.slot_names
        }
        result = self.apply_rule(grad, self._gather(var, indices), lr, slots)
        update, new_slots = result if isinstance(result, tuple) else (result, {})
        unknown = sorted(set(new_slots) - set(self.slot_names))
        if unknown:
            raise ParamError.said(
                "slot_names", "unknown_key",
                f"`apply_rule` returned slots that `slot_names` does not declare: {unknown}. "
                f"Received: slot_names={self.slot_names}",
                self.slot_names,
            )
        for slot_name, value in new_slots.items():
            self._assign(self.slot(var, slot_name), value, indices)
        self._assign_sub(var, update, indices)

    # -- helpers for `_apply`: each takes the sparse `indices` or None ----
    def local_step(self, dtype):
        """The 1-based number of the update being applied, as `dtype`."""
        return tf.cast(self.iterations + 1, dtype)

    def _gather(self, tensor, indices=None):
        """The rows `indices` of `tensor`; all of it (read as a tensor) when None."""
        if indices is None:
            return tf.convert_to_tensor(tensor)
        if hasattr(tensor, "handle"):
            return gather_rows(tensor, indices)
        return tf.gather(tensor, indices)

    def _assign(self, ref, value, indices=None):
        """`ref = value`, or `ref[indices] = value`."""
        self.assign(ref, _rows(value, indices))

    def _assign_add(self, ref, value, indices=None):
        """`ref += value`, or `ref[indices] += value`."""
        self.assign_add(ref, _rows(value, indices))

    def _assign_sub(self, ref, value, indices=None):
        """`ref -= value`, or `ref[indices] -= value`."""
        self.assign_sub(ref, _rows(value, indices))


def _rows(value, indices):
    """`value` as a scatter update of the rows `indices` (Keras' assign* scatter these)."""
    return value if indices is None else tf.IndexedSlices(value, indices)


@keras_serializable
class CustomGradientDescent(BaseCustomOptimizer):
    """Plain gradient descent written on `BaseCustomOptimizer` (RETURNN's example).

    .. math::

        \\theta \\leftarrow \\theta - \\eta \\, g

    A sparse gradient updates only the rows it names (with duplicate rows
    summed), as TF1's `GradientDescentOptimizer` does.

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Required.
        name: Name of the optimizer. Defaults to `"CustomGradientDescent"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    def apply_rule(self, grad, var, lr, slots):
        return lr * grad


@keras_serializable
class CustomAdam(BaseCustomOptimizer):
    """Adam re-implemented on `BaseCustomOptimizer` (RETURNN's `CustomAdamOptimizer`).

    .. math::

        t &\\leftarrow t + 1 \\\\
        \\eta_t &\\leftarrow \\eta \\, \\sqrt{1 - \\beta_2^t} / (1 - \\beta_1^t) \\\\
        m_t &\\leftarrow \\beta_1 m_{t-1} + (1 - \\beta_1) \\, g \\\\
        v_t &\\leftarrow \\beta_2 v_{t-1} + (1 - \\beta_2) \\, g^2 \\\\
        \\theta &\\leftarrow \\theta - \\eta_t \\, m_t / (\\sqrt{v_t} + \\epsilon)

    The dense rule equals TF1's `AdamOptimizer`, except that the bias
    correction is computed in float64 from `t` (TF1 keeps `beta^t` as a float32
    running product, ~1e-5 off for betas near 1 at small `t`). A sparse gradient updates
    `m`, `v` and the variable only in the rows it names (lazy, as RETURNN's
    `_apply` with indices does); `t` counts every update.

    Args:
        learning_rate: The learning rate: a float, a
            `keras.optimizers.schedules.LearningRateSchedule` or a callable.
            Required.
        beta_1: Decay of the running average of `g` (`m`). Defaults to `0.9`.
        beta_2: Decay of the running average of `g * g` (`v`). Defaults to `0.999`.
        epsilon: Added to `sqrt(v_t)` for numerical stability. Defaults to `1e-8`.
        name: Name of the optimizer. Defaults to `"CustomAdam"`.
        **kwargs: The Keras base arguments (see `BaseCustomOptimizer`).
    """

    slot_names = ("m", "v")

    def __init__(self, learning_rate, beta_1=0.9, beta_2=0.999, epsilon=1e-8, name=None, **kwargs):
        check_args("CustomAdam", beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def apply_rule(self, grad, var, lr, slots):
        dtype = var.dtype
        beta_1 = self.hyper("beta_1", dtype)
        beta_2 = self.hyper("beta_2", dtype)
        lr_t = lr * self._bias_correction(dtype)
        m = beta_1 * slots["m"] + (1 - beta_1) * grad
        v = beta_2 * slots["v"] + (1 - beta_2) * tf.square(grad)
        update = lr_t * m / (tf.sqrt(v) + self.hyper("epsilon", dtype))
        return update, {"m": m, "v": v}

    def _bias_correction(self, dtype):
        """`sqrt(1 - beta_2^t) / (1 - beta_1^t)` in `dtype`, computed in float64.

        `1 - beta^t` cancels badly for small `t`: a float32 power one ulp off
        moves `1 - 0.999^2` by ~5e-5 relative. Computing in float64 (from the
        betas as `dtype` holds them) gives the correctly rounded value.
        """
        step = self.local_step(tf.float64)
        beta_1 = tf.cast(self.hyper("beta_1", dtype), tf.float64)
        beta_2 = tf.cast(self.hyper("beta_2", dtype), tf.float64)
        correction = tf.sqrt(1 - tf.pow(beta_2, step)) / (1 - tf.pow(beta_1, step))
        return tf.cast(correction, dtype)

    def get_config(self):
        config = super().get_config()
        config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon)
        return config
