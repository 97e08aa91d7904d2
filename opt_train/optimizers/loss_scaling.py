"""Loss scaling: a static scale and `AutomaticLossScaler` (Backoff, LogMax, Dynamic), plus `unscale`.

The loss is multiplied by `scaler.loss_scale` before the backward pass so that
small float16 gradients do not flush to zero; `unscale` divides them back in
float32 before any stage looks at their magnitude. Its state, `ScaleState`, is the
scaler's one owner: the train op asks it for the scale it multiplies the loss by, and
once per optimizer update the finite check asks it to adjust the scale to the verdict
on the accumulated, reduced gradient (`scaler.update(finite, amax)`).

Every scaler keeps its state in `tf.Variable`s (a `tf.Module`, so it is
checkpointable) and exposes the same four members: `loss_scale`,
`update(finite, amax)`, `needs_amax` (whether `update` uses `amax`) and
`adaptive` (whether overflows move the scale). An automatic scaler's parameters are
checked once, by `AutomaticLossScaler` (the rule `validate` runs); the algorithm classes
it picks from take checked values.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from opt_train.optimizers import names
from opt_train.optimizers.finite import global_amax
from opt_train.optimizers.transform import GradientTransform, map_values


class StaticLossScale(tf.Module):
    """A fixed scale (`loss_scaling: 128.0`); `1.0` is "no loss scaling"."""

    needs_amax = False
    adaptive = False  # overflows tell it nothing: a non-finite gradient is the run's, not the scale's

    def __init__(self, scale=1.0):
        super().__init__(name="static_loss_scale")
        self.scale = float(names.check_positive("loss_scaling", scale))

    @property
    def loss_scale(self):
        return tf.constant(self.scale, tf.float32)

    def update(self, finite, amax=None):
        """Nothing to adapt; returns a no-op so call sites stay uniform."""
        del finite, amax
        return tf.no_op()


class BackoffScaler(tf.Module):
    """OpenSeq2Seq's Backoff rule: start at `scale_max`, divide on overflow, grow after a quiet window.

    With `i` the update counter (from 0) and `last` the counter of the last
    overflow (initially -1):

    .. math::

        s \\leftarrow \\begin{cases}
          \\mathrm{clip}(s / f, s_{min}, s_{max}), & \\text{overflow; } last \\leftarrow i \\\\
          \\mathrm{clip}(s \\cdot f, s_{min}, s_{max}), & (i - last) \\bmod w = 0 \\\\
          s & \\text{otherwise}
        \\end{cases}

    so the scale grows after every `step_window` finite updates in a row.

    Only `(i - last) mod w` matters, so the whole state is one float32 vector
    `[s, (i - last) mod w]` (exact: both are below 2**24 apart from s, a power
    of the factor times `scale_max`) and one update is a handful of vector ops
    and a single assign: the rule runs on every update of every step, where a
    dozen scalar ops on three variables cost a measurable share of a small
    model's step.

    Args:
        scale_min: lower bound of the scale. Defaults to `1.0`.
        scale_max: upper bound and initial scale. Defaults to `2**14` (OpenSeq2Seq's).
        step_factor: factor applied on overflow (divide) and growth. Defaults to `2.0`.
        step_window: finite updates between two growths. Defaults to `2000`.
    """

    needs_amax = False

    def __init__(self, scale_min=1.0, scale_max=2.0**14, step_factor=2.0, step_window=2000):
        super().__init__(name="backoff_scaler")
        self.scale_min = float(scale_min)
        self.scale_max = float(scale_max)
        self.step_factor = float(step_factor)
        self.step_window = int(step_window)
        # [scale, (i - last) mod w]; at the start i - last = 0 - (-1) = 1.
        self.state = tf.Variable(
            [self.scale_max, float(1 % self.step_window)], dtype=tf.float32, trainable=False, name="state"
        )

    @property
    def loss_scale(self):
        return self.state[0]

    def update(self, finite, amax=None):
        del amax
        state = self.state.read_value()
        grow = tf.logical_and(finite, tf.equal(state[1], 0.0))
        # Finite: [s * (f or 1), phase + 1]; overflow: [s / f, 0 + 1] (the phase restarts at i - last = 1).
        # Dividing (not multiplying by 1/f) rounds as OpenSeq2Seq does for any factor.
        # Selected as scalars and stacked: a scalar condition broadcast over vectors (SelectV2)
        # crashes a DTensor step (TF 2.21, segmentation fault on a mesh).
        multiplier = tf.stack([tf.where(grow, self.step_factor, 1.0), 1.0])
        divisor = tf.stack([tf.where(finite, 1.0, self.step_factor), tf.where(finite, 1.0, float("inf"))])
        stepped = state * multiplier / divisor + tf.constant([0.0, 1.0])
        bounded = tf.clip_by_value(stepped, [self.scale_min, 0.0], [self.scale_max, float(self.step_window)])
        # The phase wraps at w; the scale (< float32's max) is left as it is by the same op.
        wrapped = tf.math.floormod(bounded, [float(np.finfo(np.float32).max), float(self.step_window)])
        return self.state.assign(wrapped)


class LogMaxScaler(tf.Module):
    """OpenSeq2Seq's LogMax rule: keep the scale below a high quantile of log2 of the gradient's max.

    Per update, with `amax` the largest unscaled gradient magnitude:

    .. math::

        x &= \\begin{cases} 2^{log\\_max} & \\text{overflow} \\\\ \\log_2 amax & \\text{otherwise}\\end{cases} \\\\
        \\mu &= \\frac{\\hat{x}_{\\beta_1}}{1-\\beta_1^t}, \\quad
        \\sigma = \\sqrt{\\max\\left(0, \\frac{\\widehat{x^2}_{\\beta_2}}{1-\\beta_2^t}
                 - \\left(\\frac{\\hat{x}_{\\beta_2}}{1-\\beta_2^t}\\right)^2\\right)} \\\\
        s &= \\mathrm{clip}\\left(2^{16 - (\\mu + overflow\\_std\\_dev \\cdot \\sigma)}, s_{min}, s_{max}\\right)

    where the hats are exponential moving averages with the given betas. Two
    details are kept exactly as OpenSeq2Seq wrote them so that trajectories
    match: on overflow `x` is `2**log_max` (not `log_max`), and the headroom
    is the constant 16 (float16's largest binary exponent), not `log_max`.

    Args:
        scale_min: lower bound of the scale. Defaults to `1.0`.
        scale_max: upper bound of the scale. Defaults to `2**14` (OpenSeq2Seq's).
        log_max: sets the value recorded for an overflow. Defaults to `16.0`.
        beta1: decay of the mean's moving average. Defaults to `0.99`.
        beta2: decay of the variance's moving averages. Defaults to `0.999`.
        overflow_std_dev: standard deviations of headroom (3.09 = ppf(0.999)). Defaults to `3.09`.
    """

    needs_amax = True

    def __init__(self, scale_min=1.0, scale_max=2.0**14, log_max=16.0, beta1=0.99, beta2=0.999,
                 overflow_std_dev=3.09):
        super().__init__(name="logmax_scaler")
        params = dict(scale_min=scale_min, scale_max=scale_max, log_max=log_max, beta1=beta1, beta2=beta2,
                      overflow_std_dev=overflow_std_dev)
        for key, value in params.items():
            setattr(self, key, float(value))
        self.iteration = tf.Variable(0, dtype=tf.int64, trainable=False, name="iteration")
        self.scale = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="scale")
        self.x_hat = tf.Variable(0.0, dtype=tf.float32, trainable=False, name="x_hat")
        self.slow_x_hat = tf.Variable(0.0, dtype=tf.float32, trainable=False, name="slow_x_hat")
        self.xsquared_hat = tf.Variable(0.0, dtype=tf.float32, trainable=False, name="xsquared_hat")
        self.b1_correction = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="b1_correction")
        self.b2_correction = tf.Variable(1.0, dtype=tf.float32, trainable=False, name="b2_correction")

    @property
    def loss_scale(self):
        return self.scale

    def update(self, finite, amax):
        # log2 of a non-finite amax would poison the averages; the select keeps them finite.
        safe_amax = tf.where(finite, tf.cast(amax, tf.float32), 1.0)
        x = tf.where(finite, tf.math.log(safe_amax) / tf.math.log(2.0), 2.0**self.log_max)
        b1, b2 = self.beta1, self.beta2
        x_hat = self.x_hat.assign(b1 * self.x_hat + (1.0 - b1) * x)
        b1_correction = self.b1_correction.assign(self.b1_correction * b1)
        mu = x_hat / (1.0 - b1_correction)
        slow_x_hat = self.slow_x_hat.assign(b2 * self.slow_x_hat + (1.0 - b2) * x)
        xsquared_hat = self.xsquared_hat.assign(b2 * self.xsquared_hat + (1.0 - b2) * x * x)
        b2_correction = self.b2_correction.assign(self.b2_correction * b2)
        slow_mu = slow_x_hat / (1.0 - b2_correction)
        e_xsquared = xsquared_hat / (1.0 - b2_correction)
        sigma = tf.sqrt(tf.maximum(e_xsquared - slow_mu * slow_mu, 0.0))
        log_cutoff = sigma * self.overflow_std_dev + mu
        proposed = tf.pow(2.0, 16.0 - log_cutoff)
        self.scale.assign(tf.clip_by_value(proposed, self.scale_min, self.scale_max))
        return self.iteration.assign_add(1)


class DynamicScaler(tf.Module):
    """Keras's `LossScaleOptimizer` rule: halve on overflow, double after N finite updates in a row.

    Args:
        initial_scale: the first scale. Defaults to `2**15`.
        dynamic_growth_steps: finite updates in a row before the scale doubles. Defaults to `2000`.
    """

    needs_amax = False

    def __init__(self, initial_scale=2.0**15, dynamic_growth_steps=2000):
        super().__init__(name="dynamic_scaler")
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = int(dynamic_growth_steps)
        self.step_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_counter")
        self.scale = tf.Variable(self.initial_scale, dtype=tf.float32, trainable=False, name="scale")

    @property
    def loss_scale(self):
        return self.scale

    def update(self, finite, amax=None):
        del amax
        grow = tf.logical_and(finite, tf.equal(self.step_counter, self.dynamic_growth_steps - 1))
        factor = tf.where(finite, tf.where(grow, 2.0, 1.0), 0.5)
        self.scale.assign(self.scale * factor)
        counter = tf.where(tf.logical_and(finite, tf.logical_not(grow)), self.step_counter + 1, 0)
        return self.step_counter.assign(counter)


_SCALER_CLASSES = {"Backoff": BackoffScaler, "LogMax": LogMaxScaler, "Dynamic": DynamicScaler}


class AutomaticLossScaler(tf.Module):
    """OpenSeq2Seq's `AutomaticLossScaler(algorithm, params)`: picks Backoff, LogMax or Dynamic by name.

    The name is matched case-insensitively; `params` overrides the algorithm's
    defaults (`opt_train.optimizers.names.LOSS_SCALERS`); an unknown name or
    parameter raises `UnknownNameError`. This is where an automatic scaler's
    parameters are checked, the one place.

    Example:
        scaler = AutomaticLossScaler("Backoff", {"step_window": 1000})
    """

    SUPPORTED_ALGOS = tuple(names.LOSS_SCALERS)
    adaptive = True  # overflows are how it finds its scale

    def __init__(self, algorithm="Backoff", params=None):
        super().__init__(name="automatic_loss_scaler")
        self.algorithm = names.resolve_loss_scaler(algorithm)
        params = names.LOSS_SCALER_NAMES.check(self.algorithm, params)
        self.scaler = _SCALER_CLASSES[self.algorithm](**params)

    @property
    def needs_amax(self):
        return self.scaler.needs_amax

    @property
    def loss_scale(self):
        return self.scaler.loss_scale

    def update(self, finite, amax=None):
        """Adapts the scale to one update's verdict; `amax` is the largest unscaled |gradient|."""
        return self.scaler.update(finite, amax)


def get_loss_scaler(loss_scaling=1.0, loss_scaling_params=None):
    """A scaler from the YAML values: a number gives `StaticLossScale`, a name `AutomaticLossScaler`.

    `loss_scaling` is read by its rule (`names.LOSS_SCALING`); an algorithm's
    parameters are left to `AutomaticLossScaler`, which checks them.
    """
    if isinstance(loss_scaling, (StaticLossScale, AutomaticLossScaler)):
        return loss_scaling
    scale = names.LOSS_SCALING("loss_scaling", loss_scaling)
    if isinstance(scale, str):
        return AutomaticLossScaler(scale, loss_scaling_params)
    if loss_scaling_params:
        names.check_loss_scaling(scale, loss_scaling_params)  # raises: a static scale takes no parameters
    return StaticLossScale(scale)


class ScaleState(NamedTuple):
    """The unscale stage's state: the one owner of the run's loss scaler.

    The train op asks it for the scale of the loss (`scale_loss`); the finite check,
    which receives it as the extra input `scale`, asks it to adjust the scale to an
    update's verdict (`adjust`). It keeps no variable of its own: the pipeline
    checkpoints the scaler's as its `loss_scaler` item (`Pipeline.checkpoint_items`),
    the key checkpoints have always had.
    """

    loss_scaler: Any

    @property
    def adaptive(self):
        """Whether overflows move the scale (False for a static scale)."""
        return self.loss_scaler.adaptive

    def scale_loss(self, loss):
        """The float32 loss times the current scale: what the backward pass differentiates."""
        return loss * tf.cast(self.loss_scaler.loss_scale, tf.float32)

    def adjust(self, finite, grads):
        """Moves the scale once per update by its verdict: `finite`, on the unscaled, reduced `grads`."""
        amax = global_amax(grads) if self.loss_scaler.needs_amax else None
        return self.loss_scaler.update(finite, amax)

    def report(self):
        return {"loss_scale": tf.cast(self.loss_scaler.loss_scale, tf.float32)}


def unscale(scaler):
    """Divides gradients by the loss scale in float32 (stage 1 of the pipeline); its state is `ScaleState`.

    Gradients are cast to float32 first, so the accumulated and reduced
    gradient is float32 whatever the variables' dtype. Extra input
    `loss_is_finite` (a scalar bool): when False the gradients are multiplied
    by NaN, so a micro-batch with a non-finite loss can never reach the
    weights; the finite check downstream then skips the whole update. With a
    static scale of 1 and float32 gradients only the first gradient carries
    that poison, so the degenerate stage costs one small multiply.

    Args:
        scaler: the run's loss scaler (`get_loss_scaler`); from `init` on, the stage's state
            holds it, and no other stage does.
    """

    def update(grads, state, variables=None, loss_is_finite=True, **extra):
        del variables, extra
        scaler = state.loss_scaler
        poison = tf.where(loss_is_finite, 1.0, float("nan"))
        inverse = poison / tf.cast(scaler.loss_scale, tf.float32)
        needs_full_pass = not (
            isinstance(scaler, StaticLossScale)
            and scaler.scale == 1.0
            and all(g is None or g.dtype == tf.float32 for g in grads)
        )
        out = []
        poisoned = False
        for g in grads:
            if g is None:
                out.append(None)
            elif needs_full_pass:
                out.append(map_values(lambda v: tf.cast(v, tf.float32) * inverse, g))
            elif not poisoned:
                out.append(map_values(lambda v: v * inverse, g))
                poisoned = True
            else:
                out.append(g)
        return out, state

    def init(variables):
        del variables
        return ScaleState(scaler)

    return GradientTransform(init, update)
