"""The learning-rate policies, one `PolicyRow` each in `POLICIES`, and their parameter checks (TF-free).

A row names the policy's schedule class (`code`, a `schedules.PolicySchedule` subclass,
imported when a schedule is built), OpenSeq2Seq's function name (an alias, and the
functional form in `functional.py`), its parameters in OpenSeq2Seq's argument order with
their defaults and rules, and a rule across them. Adding a policy is its class plus one row.
`resolve` maps any accepted spelling (short name or OpenSeq2Seq function name, any case)
to the canonical short name; `check_params` validates `lr_policy_params` and fills in what
OpenSeq2Seq filled in for the user; `check_warmup` validates the top-level `warmup` block.

Errors are `opt_train.errors.ParamError`s: Keras' wording as their text ("`power`
must be > 0. Received: power=0"), and the parameter, a stable code and the value
as attributes, so callers attach the YAML key without parsing the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opt_train import params as _p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param
from opt_train.registry import Row, Table


def param_error(param, text, *, code="out_of_range", message=None, value=None):
    """A `ParamError` about `param` whose Keras wording is `text` (a rule across values)."""
    return ParamError(param, code, message or text, value, text=text)


POSITIVE_STEPS = _p.integer(0, strict=True)
STEPS = _p.integer(0)
POSITIVE = _p.number(0, low_open=True)
NON_NEGATIVE = _p.number(0)
FRACTION = _p.number(0, 1)
_number_list = _p.list_of(_p.number(), text="a list of numbers")

_DECAY_STEPS = Param(REQUIRED, POSITIVE_STEPS)  # shared by exp, poly, inv_poly and cosine
_BEGIN_DECAY_AT = Param(0, STEPS)
_WARMUP_STEPS = Param(0, STEPS)


@dataclass(frozen=True, kw_only=True)
class PolicyRow(Row):
    """An lr policy. `code`: its `schedules.PolicySchedule` subclass; `function`: OpenSeq2Seq's name of
    the policy, accepted as an alias and defined in `functional.py` (None for a policy OpenSeq2Seq lacked)."""

    function: str | None = None

    def __post_init__(self):
        if self.function is not None:
            object.__setattr__(self, "aliases", (*self.aliases, self.function))

    def locations(self):
        return [self.code] + ([f"opt_train.lr_policies.functional:{self.function}"] if self.function else [])


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


_SCHEDULES = "opt_train.lr_policies.schedules"

# In the order docs/lr-policies.md lists them.
POLICIES = Table("lr_policy", [
    PolicyRow(name="fixed", function="fixed_lr", code=f"{_SCHEDULES}:FixedLR",
              summary="the base learning rate at every update"),
    PolicyRow(name="exp", function="exp_decay", code=f"{_SCHEDULES}:ExpDecay",
              summary="exponential decay by `decay_rate` every `decay_steps` after `begin_decay_at`, "
              "floored at `min_lr`",
              params={
                  "decay_steps": _DECAY_STEPS,
                  "decay_rate": Param(REQUIRED, POSITIVE),
                  # OpenSeq2Seq had no default; False (as in Keras' ExponentialDecay)
                  # changes no config that worked there.
                  "use_staircase_decay": Param(False, _p.boolean),
                  "begin_decay_at": _BEGIN_DECAY_AT,
                  "min_lr": Param(0.0, NON_NEGATIVE),
              }),
    PolicyRow(name="poly", function="poly_decay", code=f"{_SCHEDULES}:PolyDecay",
              summary="polynomial decay to `min_lr` over `decay_steps`, after an optional linear warm-up",
              params={
                  "decay_steps": _DECAY_STEPS,
                  "power": Param(1.0, POSITIVE),
                  "begin_decay_at": _BEGIN_DECAY_AT,
                  "min_lr": Param(0.0, NON_NEGATIVE),
                  "warmup_steps": _WARMUP_STEPS,
              }),
    PolicyRow(name="inv_poly", function="inv_poly_decay", code=f"{_SCHEDULES}:InvPolyDecay",
              summary="inverse polynomial decay, floored at `min_lr`, after an optional linear warm-up",
              params={
                  "decay_steps": _DECAY_STEPS,
                  "min_lr": Param(REQUIRED, NON_NEGATIVE),
                  "power": Param(1.0, POSITIVE),
                  "begin_decay_at": _BEGIN_DECAY_AT,
                  "warmup_steps": _WARMUP_STEPS,
              }),
    PolicyRow(name="piecewise", function="piecewise_constant", code=f"{_SCHEDULES}:PiecewiseConstant",
              summary="the base rate times `decay_rates[i]` from `boundaries[i]` on (updates, or epochs "
              "with `steps_per_epoch`)",
              params={
                  "boundaries": Param(REQUIRED, _number_list),
                  "decay_rates": Param(REQUIRED, _number_list),
                  "steps_per_epoch": Param(None, _p.optional(POSITIVE)),
                  # RETURNN's per-epoch `learning_rates` take the new rate on the boundary's own update
                  # (an epoch's first); TF1 and OpenSeq2Seq take it one update later.
                  "switch_on_boundary": Param(False, _p.boolean),
              },
              cross=_check_piecewise),
    PolicyRow(name="transformer", function="transformer_policy", code=f"{_SCHEDULES}:TransformerPolicy",
              summary="the Transformer's (Noam) rate: linear warm-up, then decay as 1/sqrt(step), "
              "scaled by 1/sqrt(d_model)",
              params={
                  "d_model": Param(REQUIRED, POSITIVE),
                  "warmup_steps": Param(REQUIRED, POSITIVE_STEPS),
                  "max_lr": Param(None, _p.optional(POSITIVE)),
                  "coefficient": Param(1.0, POSITIVE),
                  # The formula's n is t + step_offset, t the updates applied before this one:
                  # OpenSeq2Seq counts this update (1); RETURNN's Noam takes global_train_step (0).
                  "step_offset": Param(1, STEPS),
              }),
    PolicyRow(name="cosine", function="cosine_decay", code=f"{_SCHEDULES}:CosineDecay",
              summary="cosine decay to `learning_rate * min_lr` over `decay_steps`, after an optional "
              "linear warm-up",
              params={
                  "decay_steps": _DECAY_STEPS,
                  # Accepted for OpenSeq2Seq configs; OpenSeq2Seq's cosine_decay ignores it too.
                  "power": Param(1.0, _p.number()),
                  "begin_decay_at": _BEGIN_DECAY_AT,
                  # OpenSeq2Seq passes min_lr as `alpha` of tf.train.cosine_decay: the
                  # final rate is learning_rate * min_lr, so it is a fraction.
                  "min_lr": Param(0.0, FRACTION),
                  "warmup_steps": _WARMUP_STEPS,
              }),
], owner="{kind}", as_given=True, sites=(f"{_SCHEDULES}:SCHEDULE_CLASSES",))

# Views of the table.
POLICY_NAMES = tuple(POLICIES.rows)
POLICY_PARAMS = POLICIES.column("params")
# canonical name -> OpenSeq2Seq's function name (OpenSeq2Seq's policies only).
FUNCTION_NAMES = {name: row.function for name, row in POLICIES.rows.items() if row.function}

# The top-level `warmup` block, which wraps any policy.
WARMUP_PARAMS = {
    "steps": Param(REQUIRED, STEPS),
    "power": Param(1.0, POSITIVE),
}


def check_learning_rate(value):
    """The base learning rate as a float; it must be a number >= 0."""
    NON_NEGATIVE("learning_rate", value)
    return float(value)


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
    unknown = _p.unknown_keys(specs, params, "lr_policy")
    if unknown:
        raise unknown[0]
    for param, value in params.items():
        specs[param].rule(param, value)
    _check_run_length(max_steps, steps_per_epoch)
    filled = fill_openseq2seq_defaults(policy, params, max_steps, steps_per_epoch)
    if "decay_steps" in specs and "decay_steps" not in filled:
        # Deferred until max_steps is known: check the rest with a stand-in.
        complete = POLICIES.check(policy, {**filled, "decay_steps": 1})
        del complete["decay_steps"]
        return complete
    return POLICIES.check(policy, filled)


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
        complete = _p.check_params(WARMUP_PARAMS, dict(params), "warmup", required_by="by `warmup`")
    except ValueError as error:
        param = getattr(error, "param", None)
        error.key = "warmup" if param in (None, "warmup") else f"warmup.{param}"
        raise
    return {"steps": int(complete["steps"]), "power": float(complete["power"])}
