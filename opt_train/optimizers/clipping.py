"""Clipping by global norm (`max_grad_norm`), in float32 on the accumulated, reduced gradient.

.. math::

    g_i \\leftarrow g_i \\cdot \\frac{c}{\\max(\\lVert g \\rVert_2, c)}, \\qquad
    \\lVert g \\rVert_2 = \\sqrt{\\textstyle\\sum_i \\lVert g_i \\rVert_2^2}

Gradients whose joint norm is at most `c` are left as they are; otherwise all
of them shrink by the same ratio (reference 002, `_clip_by_global_norm`).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from opt_train.optimizers import names
from opt_train.optimizers.transform import GradientTransform


class ClipState(NamedTuple):
    """`norm`: the global norm before clipping; `clipped_norm`: after (both float32, last update)."""

    norm: tf.Variable
    clipped_norm: tf.Variable

    def report(self):
        return {"global_clipped_gradient_norm": self.clipped_norm.read_value()}


def clip_by_global_norm(max_norm):
    """Scales all gradients together so that their global L2 norm is at most `max_norm`.

    Args:
        max_norm: the cap `c`, a number > 0 (`max_grad_norm` in YAML).
    """
    max_norm = float(names.check_positive("max_grad_norm", max_norm))

    def init(variables):
        del variables
        return ClipState(
            norm=tf.Variable(0.0, dtype=tf.float32, trainable=False, name="norm"),
            clipped_norm=tf.Variable(0.0, dtype=tf.float32, trainable=False, name="clipped_norm"),
        )

    def update(grads, state, variables=None, **extra):
        del variables, extra
        positions = [i for i, g in enumerate(grads) if g is not None]
        present = [tf.cast(grads[i], tf.float32) for i in positions]
        clipped, norm = tf.clip_by_global_norm(present, max_norm)
        state.norm.assign(norm)
        state.clipped_norm.assign(tf.minimum(norm, max_norm))
        out = list(grads)
        for i, g in zip(positions, clipped):
            out[i] = g
        return out, state

    return GradientTransform(init, update)
