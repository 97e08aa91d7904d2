"""The parameters of every learning-rate policy, their defaults and value rules (TF-free).

Each rule is written once, here: the config layer checks `lr_policy_params`
through `registry.check_params` before TensorFlow loads, and the schedule
classes check their constructor arguments through `check_values`.

Errors are `opt_train.errors.ParamError`s: Keras' wording as their text ("`power`
must be > 0. Received: power=0"), and the parameter, a stable code and the value
as attributes, so callers attach the YAML key without parsing the message.
"""

from __future__ import annotations

from opt_train import params as _p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param

__all__ = ["REQUIRED", "Param", "POLICY_PARAMS", "WARMUP_PARAMS", "check_values", "param_error"]


def param_error(param, text, *, code="out_of_range", message=None, value=None):
    """A `ParamError` about `param` whose Keras wording is `text` (a rule across values)."""
    return ParamError(param, code, message or text, value, text=text)


POSITIVE_STEPS = _p.integer(0, strict=True)
STEPS = _p.integer(0)
POSITIVE = _p.number(0, low_open=True)
NON_NEGATIVE = _p.number(0)
FRACTION = _p.number(0, 1)
_boolean = _p.boolean
_number_list = _p.list_of(_p.number(), text="a list of numbers")
_any_number = _p.number()
_optional = _p.optional

# The decay step counts shared by exp, poly, inv_poly and cosine.
_DECAY = {
    "decay_steps": Param(REQUIRED, POSITIVE_STEPS),
    "begin_decay_at": Param(0, STEPS),
}
_WARMUP_STEPS = Param(0, STEPS)

# canonical name -> {parameter: Param}, in OpenSeq2Seq's argument order.
POLICY_PARAMS = {
    "fixed": {},
    "exp": {
        "decay_steps": _DECAY["decay_steps"],
        "decay_rate": Param(REQUIRED, POSITIVE),
        # OpenSeq2Seq had no default; False (as in Keras' ExponentialDecay)
        # changes no config that worked there.
        "use_staircase_decay": Param(False, _boolean),
        "begin_decay_at": _DECAY["begin_decay_at"],
        "min_lr": Param(0.0, NON_NEGATIVE),
    },
    "poly": {
        "decay_steps": _DECAY["decay_steps"],
        "power": Param(1.0, POSITIVE),
        "begin_decay_at": _DECAY["begin_decay_at"],
        "min_lr": Param(0.0, NON_NEGATIVE),
        "warmup_steps": _WARMUP_STEPS,
    },
    "inv_poly": {
        "decay_steps": _DECAY["decay_steps"],
        "min_lr": Param(REQUIRED, NON_NEGATIVE),
        "power": Param(1.0, POSITIVE),
        "begin_decay_at": _DECAY["begin_decay_at"],
        "warmup_steps": _WARMUP_STEPS,
    },
    "piecewise": {
        "boundaries": Param(REQUIRED, _number_list),
        "decay_rates": Param(REQUIRED, _number_list),
        "steps_per_epoch": Param(None, _optional(POSITIVE)),
        # RETURNN's per-epoch `learning_rates` take the new rate on the boundary's own update
        # (an epoch's first); TF1 and OpenSeq2Seq take it one update later.
        "switch_on_boundary": Param(False, _boolean),
    },
    "transformer": {
        "d_model": Param(REQUIRED, POSITIVE),
        "warmup_steps": Param(REQUIRED, POSITIVE_STEPS),
        "max_lr": Param(None, _optional(POSITIVE)),
        "coefficient": Param(1.0, POSITIVE),
        # The formula's n is t + step_offset, t the updates applied before this one:
        # OpenSeq2Seq counts this update (1); RETURNN's Noam takes global_train_step (0).
        "step_offset": Param(1, STEPS),
    },
    "cosine": {
        "decay_steps": _DECAY["decay_steps"],
        # Accepted for OpenSeq2Seq configs; OpenSeq2Seq's cosine_decay ignores it too.
        "power": Param(1.0, _any_number),
        "begin_decay_at": _DECAY["begin_decay_at"],
        # OpenSeq2Seq passes min_lr as `alpha` of tf.train.cosine_decay: the
        # final rate is learning_rate * min_lr, so it is a fraction.
        "min_lr": Param(0.0, FRACTION),
        "warmup_steps": _WARMUP_STEPS,
    },
}

WARMUP_PARAMS = {
    "steps": Param(REQUIRED, STEPS),
    "power": Param(1.0, POSITIVE),
}


def _check_piecewise(params):
    boundaries, rates = params["boundaries"], params["decay_rates"]
    if len(boundaries) != len(rates):
        raise param_error(
            "decay_rates",
            "`decay_rates` must have one entry per boundary. Received: "
            f"len(boundaries)={len(boundaries)}, len(decay_rates)={len(rates)}",
            message=f"must have one entry per boundary ({len(boundaries)})",
            value=rates,
        )
    if any(b < 0 for b in boundaries):
        raise ParamError("boundaries", "out_of_range", "must all be >= 0", boundaries)
    if any(a >= b for a, b in zip(boundaries, boundaries[1:])):
        raise ParamError("boundaries", "out_of_range", "must be strictly increasing", boundaries)


# Rules that look at several parameters of one policy; they run after the per-value rules.
CROSS_CHECKS = {"piecewise": _check_piecewise}


def reject_unknown(kind, params, specs):
    """An `unknown_key` error for the first parameter that `specs` does not list."""
    errors = _p.unknown_keys(specs, params, kind.removesuffix(" parameter"))
    if errors:
        raise errors[0]


def with_defaults(specs, params, *, owner):
    """`params` completed with the specs' defaults; a missing required one is an error."""
    complete = {}
    for name, spec in specs.items():
        if name in params:
            complete[name] = params[name]
        elif spec.required:
            raise _p.missing(name, f"by {owner}")
        else:
            complete[name] = spec.default
    return complete


def check_values(policy, params):
    """Checks a policy's full parameter dict (every name present) against its rules."""
    specs = POLICY_PARAMS[policy]
    reject_unknown("lr_policy parameter", params, specs)
    complete = with_defaults(specs, params, owner=f"lr_policy '{policy}'")
    for name, spec in specs.items():
        spec.rule(name, complete[name])
    cross_check = CROSS_CHECKS.get(policy)
    if cross_check is not None:
        cross_check(complete)
    return complete


def check_learning_rate(value):
    """The base learning rate as a float; it must be a number >= 0."""
    NON_NEGATIVE("learning_rate", value)
    return float(value)
