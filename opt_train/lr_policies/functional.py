"""OpenSeq2Seq's functional policies: `exp_decay(global_step, learning_rate, ...) -> tf.Tensor`.

Same names, argument order and defaults as OpenSeq2Seq's `lr_policies.py`, so
code written against it moves over unchanged. Each one evaluates the matching
schedule object of `opt_train.lr_policies.schedules` at `global_step`; the math
and the checks live there.
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.lr_policies import schedules


def fixed_lr(global_step, learning_rate):
    """Always `learning_rate`; `global_step` only sets the output's shape."""
    return schedules.FixedLR(learning_rate)(global_step)


def exp_decay(
    global_step,
    learning_rate,
    decay_steps,
    decay_rate,
    use_staircase_decay,
    begin_decay_at=0,
    min_lr=0.0,
):
    """Exponential decay after `begin_decay_at`, floored at `min_lr` (see `schedules.ExpDecay`)."""
    return schedules.ExpDecay(
        learning_rate,
        decay_steps=decay_steps,
        decay_rate=decay_rate,
        use_staircase_decay=use_staircase_decay,
        begin_decay_at=begin_decay_at,
        min_lr=min_lr,
    )(global_step)


def poly_decay(
    global_step,
    learning_rate,
    decay_steps,
    power=1.0,
    begin_decay_at=0,
    min_lr=0.0,
    warmup_steps=0,
):
    """Polynomial decay with linear warm-up (see `schedules.PolyDecay`)."""
    return schedules.PolyDecay(
        learning_rate,
        decay_steps=decay_steps,
        power=power,
        begin_decay_at=begin_decay_at,
        min_lr=min_lr,
        warmup_steps=warmup_steps,
    )(global_step)


def cosine_decay(
    global_step,
    learning_rate,
    decay_steps,
    power=1.0,
    begin_decay_at=0,
    min_lr=0.0,
    warmup_steps=0,
):
    """Cosine decay to `learning_rate * min_lr`, linear warm-up (see `schedules.CosineDecay`)."""
    return schedules.CosineDecay(
        learning_rate,
        decay_steps=decay_steps,
        power=power,
        begin_decay_at=begin_decay_at,
        min_lr=min_lr,
        warmup_steps=warmup_steps,
    )(global_step)


def inv_poly_decay(
    global_step,
    learning_rate,
    decay_steps,
    min_lr,
    power=1.0,
    begin_decay_at=0,
    warmup_steps=0,
    name="learning_rate",
):
    """Inverse polynomial decay to `min_lr` at `decay_steps` (see `schedules.InvPolyDecay`)."""
    schedule = schedules.InvPolyDecay(
        learning_rate,
        decay_steps=decay_steps,
        min_lr=min_lr,
        power=power,
        begin_decay_at=begin_decay_at,
        warmup_steps=warmup_steps,
    )
    with tf.name_scope(name):
        return schedule(global_step)


def piecewise_constant(
    global_step, learning_rate, boundaries, decay_rates, steps_per_epoch=None, switch_on_boundary=False
):
    """`learning_rate` times the rate of the last boundary passed (`PiecewiseConstant`)."""
    return schedules.PiecewiseConstant(
        learning_rate,
        boundaries=list(boundaries),
        decay_rates=list(decay_rates),
        steps_per_epoch=steps_per_epoch,
        switch_on_boundary=switch_on_boundary,
    )(global_step)


def transformer_policy(
    global_step,
    learning_rate,
    d_model,
    warmup_steps,
    max_lr=None,
    coefficient=1.0,
    dtype=tf.float32,
    step_offset=1,
):
    """The "noam" schedule capped at `max_lr` (`schedules.TransformerPolicy`), cast to `dtype`."""
    schedule = schedules.TransformerPolicy(
        learning_rate,
        d_model=d_model,
        warmup_steps=warmup_steps,
        max_lr=max_lr,
        coefficient=coefficient,
        step_offset=step_offset,
    )
    return tf.cast(schedule(global_step), dtype)
