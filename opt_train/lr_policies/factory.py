"""`get_lr_policy`: a policy name and its YAML parameters to a ready schedule object."""

from __future__ import annotations

from opt_train.lr_policies.registry import POLICIES, POLICY_PARAMS, check_params, check_warmup, param_error, resolve
from opt_train.lr_policies.schedules import WarmUp


def get_lr_policy(
    name, *, learning_rate, max_steps=None, steps_per_epoch=None, warmup=None, **params
):
    """The `LearningRateSchedule` for policy `name` (any accepted spelling, any case).

    Args:
        name: `fixed`, `exp`, `poly`, `inv_poly`, `piecewise`, `transformer`,
            `cosine`, or OpenSeq2Seq's function name (`poly_decay`, ...).
        learning_rate: the base rate (`optimizer_params.learning_rate` in YAML).
        max_steps: optimizer updates in the run; a missing `decay_steps` is
            `max_steps - begin_decay_at` (begin_decay_at first raised to the
            policy's own `warmup_steps`), as OpenSeq2Seq filled it in.
        steps_per_epoch: optimizer updates per epoch, given only when the run
            counts epochs; then `piecewise` boundaries are epochs. Counting
            updates rather than micro-batches keeps `iter_size` from stretching
            or shrinking the schedule.
        warmup: the `warmup` block (`{"steps": N, "power": 1.0}`) or None; wraps
            the policy in `WarmUp`.
        **params: the policy's parameters (`lr_policy_params`).

    Raises:
        UnknownNameError: unknown policy or parameter name.
        ValueError: a bad value, or `decay_steps` missing with no `max_steps`.
    """
    policy = resolve(name)
    complete = check_params(policy, params, max_steps=max_steps, steps_per_epoch=steps_per_epoch)
    schedule = POLICIES.load(policy)(learning_rate, **_require_decay_steps(policy, complete))
    ramp = check_warmup(warmup)
    if ramp is not None and ramp["steps"] > 0:
        schedule = WarmUp(schedule, **ramp)
    return schedule


def _require_decay_steps(policy, params):
    """`params` unchanged, unless `decay_steps` could not be derived for want of `max_steps`."""
    if "decay_steps" in POLICY_PARAMS[policy] and "decay_steps" not in params:
        raise param_error(
            "decay_steps",
            f"`decay_steps` is required by lr_policy '{policy}' when `max_steps` is not known.",
            code="missing",
            message=f"is required by lr_policy '{policy}' when `max_steps` is not known",
        )
    return params
