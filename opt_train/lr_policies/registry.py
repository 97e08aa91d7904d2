"""Learning-rate policy names and parameter checks for the config layer (TF-free).

`resolve` maps any accepted spelling (short name or OpenSeq2Seq function name,
any case) to the canonical short name; `check_params` validates
`lr_policy_params` and fills in what OpenSeq2Seq filled in for the user;
`check_warmup` validates the top-level `warmup` block. None of them imports
TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping

from opt_train.lr_policies.params import (
    POLICY_PARAMS,
    POSITIVE_STEPS,
    WARMUP_PARAMS,
    check_values,
    param_error,
    reject_unknown,
    with_defaults,
)
from opt_train.suggest import Registry

# Canonical short names, in the order docs/lr-policies.md lists them: a policy is registered
# by its parameter table.
POLICY_NAMES = tuple(POLICY_PARAMS)

# canonical name -> OpenSeq2Seq's function name (OpenSeq2Seq's policies only).
FUNCTION_NAMES = {
    "fixed": "fixed_lr",
    "exp": "exp_decay",
    "poly": "poly_decay",
    "inv_poly": "inv_poly_decay",
    "piecewise": "piecewise_constant",
    "transformer": "transformer_policy",
    "cosine": "cosine_decay",
}

POLICIES = Registry("lr_policy", POLICY_NAMES, {fn: name for name, fn in FUNCTION_NAMES.items()})


def resolve(name):
    """The canonical name for `name` (`'Poly_Decay'` -> `'poly'`); UnknownNameError if none."""
    return POLICIES.resolve(name)


def parameter_names(name):
    """The parameters policy `name` takes, in OpenSeq2Seq's order."""
    return tuple(POLICY_PARAMS[resolve(name)])


def check_params(name, params, *, max_steps=None, steps_per_epoch=None):
    """Validates `lr_policy_params` for policy `name`; returns them completed with defaults.

    `max_steps` and `steps_per_epoch` count optimizer updates (so `iter_size`
    never stretches a schedule). As in OpenSeq2Seq, a missing `decay_steps` is
    `max_steps - begin_decay_at`, where `begin_decay_at` is first raised to the
    policy's own `warmup_steps`; `steps_per_epoch` is filled in for policies
    that take it (pass it only when the run counts epochs). When `max_steps` is
    None a missing `decay_steps` is not an error here: it is left out, to be
    derived once the number of updates is known.

    Raises UnknownNameError for an unknown policy or parameter name and
    `ParamError` (parameter, code, value) for a bad value.
    """
    policy = resolve(name)
    specs = POLICY_PARAMS[policy]
    params = dict(params or {})
    if "learning_rate" in params and "learning_rate" not in specs:
        raise param_error(
            "learning_rate",
            "`learning_rate` is the base rate and belongs in `optimizer_params`, "
            "not in `lr_policy_params`.",
            code="unknown_key",
            message="is the base rate and belongs in `optimizer_params`, not in `lr_policy_params`",
        )
    reject_unknown("lr_policy parameter", params, specs)
    for param, value in params.items():
        specs[param].rule(param, value)
    _check_run_length(max_steps, steps_per_epoch)
    filled = fill_openseq2seq_defaults(policy, params, max_steps, steps_per_epoch)
    if "decay_steps" in specs and "decay_steps" not in filled:
        # Deferred until max_steps is known: check the rest with a stand-in.
        complete = check_values(policy, {**filled, "decay_steps": 1})
        del complete["decay_steps"]
        return complete
    return check_values(policy, filled)


def _check_run_length(max_steps, steps_per_epoch):
    for key, value in (("max_steps", max_steps), ("steps_per_epoch", steps_per_epoch)):
        if value is not None:
            try:
                POSITIVE_STEPS(key, value)
            except ValueError as error:
                error.key = key
                raise


def fill_openseq2seq_defaults(policy, params, max_steps, steps_per_epoch):
    """`params` plus the values OpenSeq2Seq's Model filled in (decay_steps, steps_per_epoch)."""
    specs = POLICY_PARAMS[policy]
    filled = dict(params)
    if "decay_steps" in specs and "decay_steps" not in filled and max_steps is not None:
        begin = filled.get("begin_decay_at", 0)
        if "warmup_steps" in specs:
            begin = max(begin, filled.get("warmup_steps", 0))
            filled["begin_decay_at"] = begin
        if max_steps - begin <= 0:
            raise param_error(
                "decay_steps",
                "`decay_steps` defaults to max_steps - begin_decay_at, which must be > 0. "
                f"Received: max_steps={max_steps}, begin_decay_at={begin}",
                message="defaults to max_steps - begin_decay_at, which must be > 0 "
                f"(max_steps={max_steps}, begin_decay_at={begin})",
            )
        filled["decay_steps"] = int(max_steps - begin)
    if "steps_per_epoch" in specs and "steps_per_epoch" not in filled:
        if steps_per_epoch is not None:
            filled["steps_per_epoch"] = steps_per_epoch
    return filled


def check_warmup(params):
    """Validates the `warmup` block (`steps`, `power`); returns it completed, or None if absent.

    Errors carry `key` (e.g. `warmup.steps`) besides `param`.
    """
    if params is None:
        return None
    try:
        if not isinstance(params, Mapping):
            raise param_error(
                "warmup", f"`warmup` must be a mapping with `steps`. Received: warmup={params!r}",
                code="wrong_type", message="must be a mapping with `steps`", value=params,
            )
        reject_unknown("warmup parameter", params, WARMUP_PARAMS)
        complete = with_defaults(WARMUP_PARAMS, params, owner="`warmup`")
        for param, spec in WARMUP_PARAMS.items():
            spec.rule(param, complete[param])
    except ValueError as error:
        param = getattr(error, "param", None)
        error.key = "warmup" if param in (None, "warmup") else f"warmup.{param}"
        raise
    return {"steps": int(complete["steps"]), "power": float(complete["power"])}
