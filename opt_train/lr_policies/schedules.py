"""The learning-rate policies as serializable Keras `LearningRateSchedule` objects.

Every schedule is a pure function of `step` (the number of optimizer updates
applied so far): no global step is read, the output is float32, and the
formulas are element-wise, so `step` may be an int or float scalar, a tensor
of any integer or float dtype, or a 1-D tensor of steps (the preview uses
that). They run eagerly, inside `tf.function` and under XLA.

The parameters, their defaults and their checks live in each policy's row of the
TF-free `opt_train.lr_policies.registry.POLICIES`; a schedule's `get_config()` is its base
`learning_rate` plus its complete parameter dict, and `from_config` rebuilds it.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from opt_train.lr_policies.registry import POLICIES, check_learning_rate, check_warmup

_FLOAT = tf.float32


# policy name -> schedule class, filled in as each class is defined.
SCHEDULE_CLASSES = {}


def _serializable(cls):
    return keras.saving.register_keras_serializable(package="opt_train")(cls)


class PolicySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Base of the policy schedules: checks parameters once, casts the step, names the op.

    Subclasses set `policy` (the canonical name) and write `rate(step)` for a
    float32 `step` tensor, reading their parameters from `self.params`. Defining
    the subclass registers it: in `SCHEDULE_CLASSES` under its name, and with
    `keras.saving` (its row in `registry.POLICIES` is the rest of a new policy's
    registration; a test holds the two to the same names).
    """

    policy = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.policy is not None:
            SCHEDULE_CLASSES[cls.policy] = _serializable(cls)

    def __init__(self, learning_rate, **params):
        self.learning_rate = check_learning_rate(learning_rate)
        self.params = POLICIES.check(self.policy, params)

    def __call__(self, step):
        with tf.name_scope(f"{self.policy}_lr"):
            step = tf.cast(tf.convert_to_tensor(step), _FLOAT)
            return tf.cast(self.rate(step), _FLOAT)

    def rate(self, step):
        raise NotImplementedError

    def get_config(self):
        return {"learning_rate": self.learning_rate, **self.params}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def linear_warmup(learning_rate, step, warmup_steps):
    """OpenSeq2Seq's in-policy warm-up: `learning_rate * step / warmup_steps` until it ends."""
    if warmup_steps <= 0:
        return tf.fill(tf.shape(step), tf.constant(learning_rate, _FLOAT))
    ramp = learning_rate * step / float(warmup_steps)
    return tf.where(step < warmup_steps, ramp, tf.cast(learning_rate, _FLOAT))


def steps_into_decay(step, begin_decay_at, decay_steps=None):
    """`step - begin_decay_at`, floored at 0 and, when given, capped at `decay_steps`."""
    elapsed = tf.maximum(step - float(begin_decay_at), 0.0)
    return elapsed if decay_steps is None else tf.minimum(elapsed, float(decay_steps))


class FixedLR(PolicySchedule):
    """`fixed`: the base learning rate at every step."""

    policy = "fixed"

    def rate(self, step):
        return tf.fill(tf.shape(step), tf.constant(self.learning_rate, _FLOAT))


class ExpDecay(PolicySchedule):
    """`exp`: exponential decay after `begin_decay_at`, floored at `min_lr`.

    .. math::
        p = (t - b) / \\text{decay\\_steps}\\ (\\lfloor p \\rfloor \\text{ if staircase}),\\quad
        lr(t) = \\max(\\text{min\\_lr},\\ t < b\\ ?\\ lr_0 : lr_0 \\cdot \\text{decay\\_rate}^{p})

    Parameters: `decay_steps`, `decay_rate`, `use_staircase_decay` (false),
    `begin_decay_at` (0), `min_lr` (0). The floor applies before
    `begin_decay_at` too, as in OpenSeq2Seq.
    """

    policy = "exp"

    def rate(self, step):
        p = self.params
        exponent = steps_into_decay(step, p["begin_decay_at"]) / float(p["decay_steps"])
        if p["use_staircase_decay"]:
            exponent = tf.floor(exponent)
        decayed = self.learning_rate * tf.pow(tf.constant(p["decay_rate"], _FLOAT), exponent)
        held = tf.where(step < p["begin_decay_at"], self.learning_rate, decayed)
        return tf.maximum(float(p["min_lr"]), held)


class PolyDecay(PolicySchedule):
    """`poly`: OpenSeq2Seq's polynomial decay with optional in-policy linear warm-up.

    .. math::
        lr_w(t) = t < W\\ ?\\ lr_0 t / W : lr_0,\\quad
        s = \\min(t - b, \\text{decay\\_steps}),\\quad
        lr(t) = t < b\\ ?\\ lr_w(t) :
            (lr_w(t) - \\text{min\\_lr}) (1 - s / \\text{decay\\_steps})^{power} + \\text{min\\_lr}

    Parameters: `decay_steps`, `power` (1), `begin_decay_at` (0), `min_lr` (0),
    `warmup_steps` (0). `get_lr_policy` raises a defaulted `begin_decay_at` to
    `warmup_steps`; given explicitly, warm-up and decay can overlap, as in OpenSeq2Seq.
    """

    policy = "poly"

    def rate(self, step):
        p = self.params
        base = linear_warmup(self.learning_rate, step, p["warmup_steps"])
        done = steps_into_decay(step, p["begin_decay_at"], p["decay_steps"]) / p["decay_steps"]
        # Floored at 0: XLA may round 1 - done just below 0, where a fractional power is NaN.
        remaining = tf.maximum(1.0 - done, 0.0)
        decayed = (base - p["min_lr"]) * tf.pow(remaining, float(p["power"])) + p["min_lr"]
        return tf.where(step < p["begin_decay_at"], base, decayed)


class InvPolyDecay(PolicySchedule):
    """`inv_poly`: inverse polynomial decay that reaches `min_lr` after `decay_steps`.

    .. math::
        m = \\min(\\max(\\text{min\\_lr}, 10^{-8}), lr_0),\\quad
        c = ((lr_0 / m)^{1/power} - 1) / \\text{decay\\_steps},\\quad
        lr(t) = t < b\\ ?\\ lr_w(t) : lr_w(t) / (1 + c (t - b))^{power}

    with `lr_w` the linear warm-up of `PolyDecay`. Parameters: `decay_steps`,
    `min_lr`, `power` (1, must be > 0), `begin_decay_at` (0), `warmup_steps` (0).
    OpenSeq2Seq's function took `begin_decay_at` and `warmup_steps` but ignored
    them; here they act as in `poly`, and with both at 0 the formula is
    OpenSeq2Seq's. Past `decay_steps` the rate keeps falling below `min_lr`, as there.
    """

    policy = "inv_poly"

    def rate(self, step):
        p = self.params
        base = linear_warmup(self.learning_rate, step, p["warmup_steps"])
        elapsed = steps_into_decay(step, p["begin_decay_at"])
        decayed = base / tf.pow(1.0 + self.scale() * elapsed, float(p["power"]))
        return tf.where(step < p["begin_decay_at"], base, decayed)

    def scale(self):
        """The constant `c` that makes the rate hit min_lr at `decay_steps`."""
        p = self.params
        floor = min(max(p["min_lr"], 1e-8), self.learning_rate)
        if floor <= 0.0:
            return 0.0
        return (math.pow(self.learning_rate / floor, 1.0 / p["power"]) - 1.0) / p["decay_steps"]


class PiecewiseConstant(PolicySchedule):
    """`piecewise`: `lr_0` up to the first boundary, then `lr_0 * decay_rates[i]`.

    .. math::
        lr(t) = lr_0 \\cdot [1, r_0, r_1, \\dots][\\#\\{i : t > B_i\\}],\\quad
        B_i = \\text{boundaries}_i \\cdot \\text{steps\\_per\\_epoch}

    The rate changes on the step *after* a boundary, as in
    `tf.compat.v1.train.piecewise_constant`; with `switch_on_boundary` it
    changes on the boundary step itself (:math:`t \\ge B_i`), so with epoch
    boundaries every update of epoch k+1 has the new rate, as RETURNN's
    per-epoch `learning_rates`. Parameters: `boundaries`, `decay_rates` (one
    per boundary), `steps_per_epoch` (None: boundaries are steps; set:
    boundaries are epochs), `switch_on_boundary` (false).
    """

    policy = "piecewise"

    def boundary_steps(self):
        scale = self.params["steps_per_epoch"] or 1
        return [float(b) * scale for b in self.params["boundaries"]]

    def rate(self, step):
        values = [self.learning_rate] + [self.learning_rate * r for r in self.params["decay_rates"]]
        boundaries = tf.constant(self.boundary_steps() or [math.inf], _FLOAT)
        if self.params["switch_on_boundary"]:
            crossed = step[..., tf.newaxis] >= boundaries
        else:
            crossed = step[..., tf.newaxis] > boundaries
        passed = tf.reduce_sum(tf.cast(crossed, tf.int32), axis=-1)
        return tf.gather(tf.constant(values, _FLOAT), passed)


class TransformerPolicy(PolicySchedule):
    """`transformer`: the "noam" schedule of Vaswani et al., with an optional cap.

    .. math::
        n = t + \\text{step\\_offset},\\quad
        lr(t) = \\min(\\text{max\\_lr},\\ lr_0 \\cdot \\text{coefficient} \\cdot d^{-0.5}
                \\min(n W^{-1.5}, n^{-0.5}))

    Parameters: `d_model`, `warmup_steps`, `max_lr` (None: no cap), `coefficient` (1),
    `step_offset` (1: OpenSeq2Seq's `global_step + 1`; 0: RETURNN's Noam on
    `global_train_step`, whose first update has rate 0).
    """

    policy = "transformer"

    def rate(self, step):
        p = self.params
        count = step + float(p["step_offset"])
        # At n = 0, n^-0.5 is inf and the minimum is n W^-1.5 = 0, as in RETURNN.
        shape = tf.minimum(count * float(p["warmup_steps"]) ** -1.5, tf.math.rsqrt(count))
        value = self.learning_rate * p["coefficient"] * float(p["d_model"]) ** -0.5 * shape
        if p["max_lr"] is not None:
            value = tf.minimum(float(p["max_lr"]), value)
        return value


class CosineDecay(PolicySchedule):
    """`cosine`: OpenSeq2Seq's cosine decay with optional in-policy linear warm-up.

    .. math::
        s = \\min(t - b, \\text{decay\\_steps}),\\quad
        lr(t) = t < b\\ ?\\ lr_w(t) :
            lr_w(t) ((1 - \\alpha) \\tfrac12 (1 + \\cos(\\pi s / \\text{decay\\_steps})) + \\alpha)

    with `alpha = min_lr` and `lr_w` the linear warm-up of `PolyDecay`.
    OpenSeq2Seq passed `min_lr` as `tf.train.cosine_decay`'s `alpha`, so the
    rate ends at `learning_rate * min_lr`: `min_lr` is a fraction in [0, 1].
    Parameters: `decay_steps`, `power` (accepted, no effect, as in OpenSeq2Seq),
    `begin_decay_at` (0), `min_lr` (0), `warmup_steps` (0).
    """

    policy = "cosine"

    def rate(self, step):
        p = self.params
        base = linear_warmup(self.learning_rate, step, p["warmup_steps"])
        done = steps_into_decay(step, p["begin_decay_at"], p["decay_steps"]) / p["decay_steps"]
        cosine = 0.5 * (1.0 + tf.cos(math.pi * done))
        decayed = base * ((1.0 - p["min_lr"]) * cosine + p["min_lr"])
        return tf.where(step < p["begin_decay_at"], base, decayed)



@_serializable
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """A warm-up of `steps` updates in front of any schedule (the `warmup` block).

    .. math::
        lr(t) = t < N\\ ?\\ \\text{inner}(N) \\cdot (t / N)^{power} : \\text{inner}(t)

    As Model Garden's `PolynomialWarmUp`: the ramp climbs from 0 to the value
    the inner schedule has at step N and hands over there; the inner schedule
    sees the same step numbers (it is not shifted by N). `power` 1 is linear.
    """

    def __init__(self, schedule, steps, power=1.0):
        checked = check_warmup({"steps": steps, "power": power})
        self.schedule = schedule
        self.steps = checked["steps"]
        self.power = checked["power"]

    def __call__(self, step):
        with tf.name_scope("warmup_lr"):
            step = tf.cast(tf.convert_to_tensor(step), _FLOAT)
            after = tf.cast(self.schedule(step), _FLOAT)
            if self.steps == 0:
                return after
            target = tf.cast(self.schedule(tf.constant(self.steps, _FLOAT)), _FLOAT)
            fraction = tf.clip_by_value(step / float(self.steps), 0.0, 1.0)
            ramp = target * tf.pow(fraction, self.power)
            return tf.where(step < self.steps, ramp, after)

    def get_config(self):
        return {
            "schedule": keras.optimizers.schedules.serialize(self.schedule),
            "steps": self.steps,
            "power": self.power,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.optimizers.schedules.deserialize(config["schedule"])
        return cls(**config)
