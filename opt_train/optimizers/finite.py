"""The finite check: decides once per update, on the reduced gradient, whether the update may apply.

Stage 3 of the pipeline. It runs after the all-reduce, so every rank sees the
same gradient; `backend.all_finite` makes the verdict collective anyway, so no
rank can apply an update another rank skips. The verdict feeds the loss
scaler and is counted in the state; the gradients pass through unchanged.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

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


class FiniteState(NamedTuple):
    """`finite`: the last update's verdict; `global_norm`: its float32 norm (before clipping);
    `skipped_steps`: non-finite updates so far; `consecutive_overflows`: non-finite updates in a row."""

    finite: tf.Variable
    global_norm: tf.Variable
    skipped_steps: tf.Variable
    consecutive_overflows: tf.Variable


def finite_check(backend, scaler):
    """Judges the reduced gradient finite or not, updates `scaler`, and counts skips.

    The gradient is finite when its float32 global norm is: one reduction gives
    both the verdict and the `global_gradient_norm` statistic. (A gradient whose
    norm exceeds float32's range, about 1.8e19, therefore counts as an overflow.)

    Args:
        backend: an `opt_train.distributed.Backend`; `all_finite` makes the verdict collective.
        scaler: the loss scaler; `scaler.update(finite, amax)` runs once per update.
    """

    def init(variables):
        del variables
        return FiniteState(
            finite=tf.Variable(True, trainable=False, name="finite"),
            global_norm=tf.Variable(0.0, dtype=tf.float32, trainable=False, name="global_norm"),
            skipped_steps=tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps"),
            consecutive_overflows=tf.Variable(
                0, dtype=tf.int64, trainable=False, name="consecutive_overflows"
            ),
        )

    def update(grads, state, variables=None, **extra):
        del variables, extra
        norm = global_norm(grads)
        finite = backend.all_finite(tf.math.is_finite(norm))
        amax = global_amax(grads) if scaler.needs_amax else None
        scaler.update(finite, amax)
        skipped = tf.cast(tf.logical_not(finite), tf.int64)
        state.finite.assign(finite)
        state.global_norm.assign(norm)
        state.skipped_steps.assign_add(skipped)
        state.consecutive_overflows.assign(skipped * (state.consecutive_overflows + 1))
        return grads, state

    return GradientTransform(init, update)
