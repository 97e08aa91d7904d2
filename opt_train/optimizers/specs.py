"""Checks optimizer parameters against the table (`table.py`): renaming, rules, required ones, TF-free.

The config layer checks `optimizer_params` here before TensorFlow loads
(`opt-train validate` reaches the verdict `train` would), and each optimizer
class checks its constructor arguments with `check_args` from the same table,
so a rule has one home. `rename` is the one place a TF1 / Keras spelling
(`beta1`, `lr`) becomes the one a class takes, for registered and user classes alike.
"""

from __future__ import annotations

import numbers

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.optimizers.table import (
    BASE_PARAMS,
    LEARNING_RATE,
    OPTIMIZER_PARAMS,
    PARAMETER_ALIASES,
    PARAMETER_RENAMES,
    is_path,
    resolve,
)

_CLIPS = ("clipnorm", "clipvalue", "global_clipnorm")


def spec(name):
    """{parameter: Param} optimizer `name` accepts (any spelling): its own, then Keras' base ones."""
    display = resolve(name)
    return {**BASE_PARAMS, **OPTIMIZER_PARAMS[display]}


def rename(params, accepted, display):
    """`(params, errors)`: `params` with the spellings the class takes (`beta1` -> `beta_1`, `lr` -> `learning_rate`).

    `accepted` is the parameter names the class takes (its table, or a user class's
    signature). Two spellings of one parameter given together are a `conflict` error.
    """
    params = dict(params)
    errors = []
    pairs = [((short, full), {full}) for short, full in PARAMETER_RENAMES.items()]
    pairs += [(spellings, accepted) for spellings in PARAMETER_ALIASES]
    for spellings, takes in pairs:
        given = [s for s in spellings if s in params]
        if len(given) > 1:
            received = ", ".join(f"{s}={params[s]!r}" for s in given)
            errors.append(ParamError(
                given[0], "conflict", f"and `{given[1]}` are two spellings of one parameter; give one",
                params[given[0]],
                text=f"`{given[0]}` and `{given[1]}` are two spellings of one parameter of {display}; "
                f"give one. Received: {received}",
            ))
            for spelling in given:  # reported once, as a conflict, not again as unknown
                if spelling not in takes:
                    params.pop(spelling)
            continue
        target = next((s for s in spellings if s in takes), None)
        if given and target and given[0] != target:
            params[target] = params.pop(given[0])
    return params, errors


def param_errors(name, params):
    """`(params, errors)`: `params` renamed to the class's spellings, and every problem with them.

    `name` is a registered optimizer (any spelling); a dotted path is the user's
    class, whose parameters only its constructor knows: only `learning_rate` is checked.
    """
    params = dict(params or {})
    if is_path(name):
        errors = []
        if "learning_rate" in params:
            try:
                LEARNING_RATE("learning_rate", params["learning_rate"])
            except ParamError as error:
                errors.append(error)
        return params, errors
    display = resolve(name)
    table = spec(display)
    params, errors = rename(params, table, display)
    _, found = p.param_errors(
        table, params, display, required_by=f"by {display}", key_kind=f"parameter of {display}"
    )
    # From Python, TF1 and Keras take a callable or a tensor for any hyperparameter (as check_args).
    errors += [error for error in found
               if not (error.param in table and error.code != "unknown_key" and deferred(params.get(error.param)))]
    clash = clip_conflict(params)
    if clash:
        errors.append(clash)
    return params, errors


def check_params(name, params):
    """`params` renamed to the class's spellings; raises the first problem (a `ParamError`)."""
    return p.filled_or_first_error(param_errors(name, params))


def deferred(value):
    """A callable or a tensor: a hyperparameter whose value is known only when the optimizer reads it."""
    return callable(value) or (
        hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, numbers.Real)
    )


def check_args(display, **values):
    """For an optimizer's `__init__`: checks the given constructor arguments with the table's rules.

    Returns {name: value as its rule returns it} (`1` -> `1.0` for a float parameter) for
    the arguments known now. A required argument given as None is `missing`.
    """
    table = OPTIMIZER_PARAMS[display]
    checked = {}
    for name, value in values.items():
        param = table[name]
        if deferred(value):
            continue  # from Python, TF1 and Keras take a callable or a tensor for any hyperparameter
        if param.required and value is None:
            raise ParamError(
                name, "missing", f"is required by {display}", None,
                text=f"`{name}` is required by {display} (it has no default). Received: {name}=None",
            )
        checked[name] = param.rule(name, value)
    return checked


def base_args(values):
    """Checks Keras' base arguments given to any optimizer's `__init__` (`clipnorm`, `use_ema`, ...)."""
    for name, value in values.items():
        if name in BASE_PARAMS:
            BASE_PARAMS[name].rule(name, value)
    clash = clip_conflict(values)
    if clash:
        raise clash


def clip_conflict(values):
    """The `conflict` error when two of the clip arguments are set, in Keras 3's sentence (base_optimizer.py).

    Filed at the second one set, with its value; None when at most one is set.
    """
    clips = [key for key in _CLIPS if values.get(key) is not None]
    if len(clips) < 2:
        return None
    received = ", ".join(f"{key}={values.get(key)}" for key in _CLIPS)
    text = f"Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. Received: {received}"
    return ParamError.said(clips[1], "conflict", text, values[clips[1]])
