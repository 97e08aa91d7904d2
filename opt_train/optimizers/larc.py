"""LARC: layer-wise adaptive rate control, rescaling each variable's gradient by its trust ratio.

For each variable `v` with gradient `g` (float32 norms, `lr` the current
learning rate):

.. math::

    \\text{clip:}\\quad r &= \\min\\left(\\max\\left(\\frac{\\eta \\lVert v \\rVert}
        {lr \\cdot (\\lVert g \\rVert + \\epsilon)}, min\\_update\\right), 1\\right) \\\\
    \\text{scale:}\\quad r &= \\max\\left(\\frac{\\eta \\lVert v \\rVert}
        {\\lVert g \\rVert + \\epsilon}, min\\_update\\right), \\qquad g \\leftarrow r\\, g

In clip mode the effective rate `lr * r` never exceeds `eta * ||v|| / ||g||`
nor `lr`; in scale mode the ratio replaces the gradient's magnitude (OpenSeq2Seq
`post_process_gradients`).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers import names
from opt_train.optimizers.finite import l2_norm
from opt_train.optimizers.transform import GradientTransform


class LarcState(NamedTuple):
    """Per variable, for the last update: `ratio` (the factor r applied to its gradient) and
    `clip_on` (clip mode: r < 1, i.e. LARC lowered the rate); `rate_scale`, each variable's
    rate over the run's (its optimizer group's `lr_multiplier`; numbers, not state)."""

    ratio: tf.Variable
    clip_on: tf.Variable
    rate_scale: tuple = ()

    def report(self):
        """Per-variable vectors (aligned with the variables): the factor applied, and whether it was < 1."""
        return {"larc_ratio": self.ratio.read_value(), "larc_clip_on": self.clip_on.read_value()}


def trust_ratio(var_norm, grad_norm, *, eta, mode, min_update, epsilon, learning_rate=None):
    """The LARC factor r for one variable, from float32 norms (see the module docstring)."""
    if mode == "clip":
        ratio = eta * var_norm / (learning_rate * (grad_norm + epsilon))
        return tf.minimum(tf.maximum(ratio, min_update), 1.0)
    return tf.maximum(eta * var_norm / (grad_norm + epsilon), min_update)


def larc(larc_eta, larc_mode="clip", min_update=1e-7, epsilon=1e-7, *, rate_multipliers=None):
    """Rescales each gradient by its LARC trust ratio.

    Needs the extra input `learning_rate=` in clip mode (optimize_loss passes
    the rate the optimizer is about to use). Under optimizer groups a variable's
    `lr` is that rate times its group's multiplier (`rate_multipliers(variables)
    -> [float]`, read once at `init`).

    Args:
        larc_eta: trust coefficient eta, > 0 (required).
        larc_mode: `"clip"` or `"scale"`. Defaults to `"clip"`.
        min_update: lower bound of the ratio. Defaults to `1e-7`.
        epsilon: added to the gradient norm. Defaults to `1e-7`.
    """
    params = names.check_larc_params(
        dict(larc_eta=larc_eta, larc_mode=larc_mode, min_update=min_update, epsilon=epsilon)
    )
    eta, mode = float(params["larc_eta"]), params["larc_mode"]
    min_update, epsilon = float(params["min_update"]), float(params["epsilon"])

    def init(variables):
        count = len(variables)
        return LarcState(
            ratio=tf.Variable(tf.ones([count], tf.float32), trainable=False, name="larc_ratio"),
            clip_on=tf.Variable(tf.zeros([count], tf.bool), trainable=False, name="larc_clip_on"),
            rate_scale=tuple(rate_multipliers(variables)) if rate_multipliers is not None else (),
        )

    def update(grads, state, variables=None, learning_rate=None, **extra):
        del extra
        if variables is None:
            raise ParamError.said("variables", "missing",
                                  "`larc` needs `variables` to compute weight norms. Received: variables=None")
        if mode == "clip" and learning_rate is None:
            raise ParamError.said("learning_rate", "missing",
                                  "`larc` in clip mode needs `learning_rate`. Received: learning_rate=None")
        lr = None if learning_rate is None else tf.cast(learning_rate, tf.float32)
        out, ratios = list(grads), []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                ratios.append(tf.constant(1.0))
                continue
            dense = tf.cast(tf.convert_to_tensor(g), tf.float32)
            rate = lr if lr is None or not state.rate_scale or state.rate_scale[i] == 1.0 else lr * state.rate_scale[i]
            ratio = trust_ratio(
                l2_norm(v), l2_norm(dense), eta=eta, mode=mode,
                min_update=min_update, epsilon=epsilon, learning_rate=rate,
            )
            out[i] = dense * ratio
            ratios.append(ratio)
        ratio_vector = tf.stack(ratios) if ratios else tf.zeros([0], tf.float32)
        state.ratio.assign(ratio_vector)
        state.clip_on.assign(tf.less(ratio_vector, 1.0))
        return out, state

    return GradientTransform(init, update)
