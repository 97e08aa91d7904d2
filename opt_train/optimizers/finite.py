"""The finite check: decides once per update, on the reduced gradient, whether the update may apply.

Stage 3 of the pipeline. It runs after the all-reduce, which hands every rank
the same values (a ring all-reduce, NCCL's, Gloo's and MPI_Allreduce's alike), so
the verdict on the reduced gradient is the same everywhere without another
collective: an overflow on one rank reaches every rank as a non-finite reduced
gradient, and all skip together. The loss is each rank's own (it is reduced where
it is reported), so `on_nonfinite: stop` asks `backend.all_finite` whether every
rank's loss was finite: all stop at the same update. The verdict adjusts the loss
scale (through the unscale stage's `ScaleState`, the extra input `scale`) and is
counted in the state; the gradients pass through unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from opt_train.optimizers import names
from opt_train.optimizers.transform import GradientTransform, values_of


def l2_norm(tensor):
    """One tensor's L2 norm in float32, from a single fused reduction.

    `tf.nn.l2_loss` reads the tensor once; `tf.norm` first writes `x * x` to a
    temporary as large as the tensor, which costs ~1.5x on large variables.
    """
    return tf.sqrt(2.0 * tf.nn.l2_loss(tf.cast(tensor, tf.float32)))


def global_norm(grads):
    """The float32 L2 norm of all gradients together (one fused reduction)."""
    present = [tf.cast(values_of(g), tf.float32) for g in grads if g is not None]
    if not present:
        return tf.constant(0.0, tf.float32)
    return tf.linalg.global_norm(present)


def global_amax(grads):
    """The largest |value| over all gradients, in float32 (what LogMax records)."""
    present = [tf.reduce_max(tf.abs(tf.cast(values_of(g), tf.float32))) for g in grads if g is not None]
    if not present:
        return tf.constant(0.0, tf.float32)
    return tf.reduce_max(tf.stack(present))


# Why a run must stop, by `FiniteState.stop_code` (set in the step, so reading it needs no host sync).
STOP_REASONS = {
    1: "the loss is not finite (on_nonfinite: stop)",
    2: "the gradients are not finite and loss scaling is static (on_nonfinite: stop)",
    3: "{n} consecutive non-finite updates (max_consecutive_overflows: {n}); the loss scale has "
       "collapsed or the run diverged",
}


class FiniteState(NamedTuple):
    """`finite`: the last update's verdict; `global_norm`: its float32 norm (before clipping);
    `skipped_steps`: non-finite updates so far; `consecutive_overflows`: non-finite updates in a row;
    `stop_code`: 0, or the key of `STOP_REASONS` once the stop policy says the run must end
    (sticky); `max_consecutive_overflows`: the policy's limit (a number, not a variable)."""

    finite: tf.Variable
    global_norm: tf.Variable
    skipped_steps: tf.Variable
    consecutive_overflows: tf.Variable
    stop_code: tf.Variable
    max_consecutive_overflows: int | None = None

    def report(self):
        return {
            "apply": self.finite.read_value(),
            "global_gradient_norm": self.global_norm.read_value(),
            "skipped_steps": self.skipped_steps.read_value(),
            "consecutive_overflows": self.consecutive_overflows.read_value(),
        }

    def stopping(self):
        """Whether the stop policy says the run must end: a tensor, for compiled loops (no host read)."""
        return self.stop_code.read_value() > 0

    def stop_reason(self):
        """None, or why the run must stop (reads one scalar)."""
        code = int(self.stop_code.numpy())
        if code == 0:
            return None
        return STOP_REASONS[code].format(n=self.max_consecutive_overflows)


def finite_check(backend, *, on_nonfinite="skip", max_consecutive_overflows=None):
    """Judges the reduced gradient finite or not, adjusts the loss scale, counts skips, and applies the stop policy.

    The gradient is finite when its float32 global norm is: one reduction gives
    both the verdict and the `global_gradient_norm` statistic. (A gradient whose
    norm exceeds float32's range, about 1.8e19, therefore counts as an overflow.)

    The loss scale is the unscale stage's: the extra input `scale` (its `ScaleState`,
    which the train op passes) is adjusted once per update, `scale.adjust(finite, grads)`.
    Without it (`None`) no scale moves, and the scale counts as static.

    Args:
        backend: an `opt_train.process_group.Backend`; under `on_nonfinite: "stop"` its
            `all_finite` makes the loss verdict every rank's.
        on_nonfinite: `"skip"` (count and go on) or `"stop"`: stop at a non-finite loss (extra
            input `loss_is_finite`, over the whole update), or at a non-finite gradient when
            the scale does not adapt (`scale.adaptive` False: a static scale). Defaults to `"skip"`.
        max_consecutive_overflows: stop after this many non-finite updates in a row; None: never.
    """
    on_nonfinite = names.check_on_nonfinite(on_nonfinite)
    max_consecutive_overflows = names.check_max_consecutive_overflows(max_consecutive_overflows)
    has_policy = on_nonfinite == "stop" or max_consecutive_overflows is not None

    def init(variables):
        del variables
        return FiniteState(
            finite=tf.Variable(True, trainable=False, name="finite"),
            global_norm=tf.Variable(0.0, dtype=tf.float32, trainable=False, name="global_norm"),
            skipped_steps=tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps"),
            consecutive_overflows=tf.Variable(
                0, dtype=tf.int64, trainable=False, name="consecutive_overflows"
            ),
            stop_code=tf.Variable(0, dtype=tf.int32, trainable=False, name="stop_code"),
            max_consecutive_overflows=max_consecutive_overflows,
        )

    def stop_code(state, loss_is_finite, adaptive):
        code = tf.constant(0, tf.int32)
        if max_consecutive_overflows is not None:
            code = tf.where(state.consecutive_overflows >= max_consecutive_overflows, 3, code)
        if on_nonfinite == "stop":
            if not adaptive:
                code = tf.where(state.skipped_steps > 0, 2, code)
            # Each rank's loss is its own: one rank's non-finite loss stops them all.
            code = tf.where(backend.all_finite(tf.convert_to_tensor(loss_is_finite)), code, 1)
        return code

    def update(grads, state, variables=None, loss_is_finite=True, scale=None, **extra):
        del variables, extra
        norm = global_norm(grads)
        finite = tf.math.is_finite(norm)  # of the reduced gradient: the same on every rank
        if scale is not None:
            scale.adjust(finite, grads)
        skipped = tf.cast(tf.logical_not(finite), tf.int64)
        state.finite.assign(finite)
        state.global_norm.assign(norm)
        state.skipped_steps.assign_add(skipped)
        state.consecutive_overflows.assign(skipped * (state.consecutive_overflows + 1))
        if has_policy:
            adaptive = scale is not None and scale.adaptive
            state.stop_code.assign(tf.maximum(state.stop_code, stop_code(state, loss_is_finite, adaptive)))
        return grads, state

    return GradientTransform(init, update)
