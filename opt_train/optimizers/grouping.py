"""`optimizer_groups`: the rules of a group, its optimizer and parameters, and which variables it takes (TF-free).

A group is `{variables: REGEX, optimizer?, optimizer_params?, lr_multiplier?}`. Each
trainable variable goes to the first group whose regex `re.search`es its Keras path
(`variable.path`); the variables no group takes use the top-level `optimizer`. A group
without `optimizer` trains with the top-level one and its `optimizer_params`, overridden
key by key by the group's; a group naming its own optimizer takes its own parameters
only. What the run shares stays the run's in every group: the rate (the `lr_policy`'s,
with `warmup` and `lr_control`, times the group's `lr_multiplier`) and the moving average
of the weights (`use_ema`, `ema_momentum`, `ema_overwrite_frequency` of the top-level
`optimizer_params`).

The config layer (`validate`) and `optimize_loss` call these same rules; which
variables a group takes is known only once the model is built (`assign`).
"""

from __future__ import annotations

import re

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.optimizers import specs, table
from opt_train.optimizers.freezing import few_paths
from opt_train.suggest import UnknownNameError

KEY = "optimizer_groups"
ENTRY_KEYS = ("variables", "optimizer", "optimizer_params", "lr_multiplier")
LR_MULTIPLIER = p.number(0, low_open=True, strings=True)  # > 0
# The run's, in every group: a group sets neither (the rate through lr_multiplier).
RATE = "learning_rate"
AVERAGE_PARAMS = ("use_ema", "ema_momentum", "ema_overwrite_frequency")


def _at(index, name=None):
    here = f"{KEY}[{index}]"
    return f"{here}.{name}" if name else here


def check_entry(index, entry):
    """One group as `{variables, optimizer, optimizer_params, lr_multiplier}` (None / {} / 1.0 filled in).

    Raises a `ParamError` whose `.key` is the entry's key (`optimizer_groups[1].lr_multiplier`).
    """
    if not isinstance(entry, dict):
        raise ParamError.at(
            _at(index), "wrong_type",
            f"must be a mapping {{variables: REGEX, optimizer: ..., optimizer_params: ..., lr_multiplier: ...}}. "
            f"Received: {entry!r}",
        )
    for name in entry:
        if name not in ENTRY_KEYS:
            error = UnknownNameError("optimizer group key", str(name), ENTRY_KEYS, code="unknown_key")
            error.key = _at(index, name)
            raise error
    if entry.get("variables") is None:
        raise ParamError.at(_at(index, "variables"), "missing",
                            "is required: a regex matched (re.search) against each variable's path")
    checked = {"variables": _keyed(index, "variables", p.regex, entry["variables"])}
    optimizer = entry.get("optimizer")
    if optimizer is not None:
        optimizer = _keyed(index, "optimizer", lambda name, value: table.resolve(p.string(name, value)), optimizer)
    checked["optimizer"] = optimizer
    params = _keyed(index, "optimizer_params", p.mapping, entry.get("optimizer_params"))
    for name in params:
        if table.PARAMETER_RENAMES.get(name, name) == RATE:
            raise ParamError.at(
                _at(index, f"optimizer_params.{name}"), "conflict",
                "a group trains at the run's rate (lr_policy, warmup, lr_control) times its lr_multiplier: "
                "set lr_multiplier", params[name])
        if name in AVERAGE_PARAMS:
            raise ParamError.at(
                _at(index, f"optimizer_params.{name}"), "conflict",
                "the moving average of the weights is the run's: set it in the top-level optimizer_params",
                params[name])
    checked["optimizer_params"] = params
    multiplier = entry.get("lr_multiplier", 1.0)
    checked["lr_multiplier"] = _keyed(index, "lr_multiplier", LR_MULTIPLIER, 1.0 if multiplier is None else multiplier)
    return checked


def _keyed(index, name, rule, value):
    """`rule(name, value)`, its error filed at the entry's key."""
    try:
        return rule(name, value)
    except ParamError as error:
        error.key = _at(index, name)
        raise


def check_groups(value):
    """`(groups, errors)`: every entry checked (`check_entry`), every bad one reported."""
    if value is None:
        return (), []
    if not isinstance(value, (list, tuple)):
        return (), [ParamError.at(KEY, "wrong_type", "must be a list of groups {variables: REGEX, ...}", value)]
    groups, errors = [], []
    for index, entry in enumerate(value):
        try:
            groups.append(check_entry(index, entry))
        except ParamError as error:
            errors.append(error)
    return tuple(groups), errors


def _renamed(name, params):
    """`params` with the spellings the class takes (`beta1` -> `beta_1`); a user class's as given."""
    if table.is_path(name):
        return dict(params)
    display = table.resolve(name)
    return specs.rename(params, specs.spec(display), display)[0]


def settings(group, optimizer, optimizer_params):
    """`(optimizer, params)` a group trains with, without the rate (the run's, set by the caller).

    A group without `optimizer` takes the top-level one with the top-level parameters,
    overridden key by key by its own; one naming its own optimizer takes its own
    parameters and the run's moving-average ones.
    """
    top = {k: v for k, v in _renamed(optimizer, optimizer_params or {}).items() if k != RATE}
    own = dict(group.get("optimizer_params") or {})
    if group.get("optimizer") is None:
        return optimizer, {**top, **_renamed(optimizer, own)}
    averaged = {k: v for k, v in top.items() if k in AVERAGE_PARAMS}
    return group["optimizer"], {**averaged, **own}


def param_errors(groups, optimizer, optimizer_params):
    """Every problem of the groups' parameters by the optimizer table's rules, at the group's key.

    Only what the group itself brings is reported: a problem of the top-level
    parameters is the top-level key's. A required rate is not missing: it is the run's.
    """
    errors = []
    for index, group in enumerate(groups):
        name, params = settings(group, optimizer, optimizer_params)
        own = set(_renamed(name, group.get("optimizer_params") or {}))
        _, found = specs.param_errors(name, params)
        for error in found:
            if error.param == RATE and error.code == "missing":
                continue
            if group.get("optimizer") is None and error.param not in own:
                continue
            error.key = _at(index, f"optimizer_params.{error.param}") if error.param else _at(index, "optimizer_params")
            errors.append(error)
    return errors


def assign(paths, groups, frozen_paths=()):
    """The group index each path goes to (None: the top-level optimizer), first match wins.

    Raises a `ParamError` at `optimizer_groups[i].variables` for a group that takes no
    variable: its regex matches none, only variables `freeze_variables_regex` freezes,
    or only variables an earlier group took.
    """
    patterns = [re.compile(group["variables"]) for group in groups]
    taken = owners(paths, groups)
    for index, pattern in enumerate(patterns):
        if index in taken:
            continue
        here = _at(index, "variables")
        matching = [path for path in paths if pattern.search(path)]
        frozen = [path for path in frozen_paths if pattern.search(path)]
        if matching:
            first = taken[paths.index(matching[0])]
            message = (f"takes no variable: the {len(matching)} it matches ({few_paths(matching)}) go to "
                       f"{_at(first)}, the first group matching them")
        elif frozen:
            message = (f"matches only variables freeze_variables_regex freezes ({few_paths(frozen)}): a frozen "
                       "variable has no optimizer")
        else:
            message = f"matches no trainable variable (their paths: {few_paths(paths)})"
        raise ParamError.at(here, "out_of_range", message, groups[index]["variables"])
    return taken


def owners(paths, groups):
    """The group index each path goes to (None: the top-level optimizer), first match wins; nothing refused."""
    patterns = [re.compile(group["variables"]) for group in groups]
    return [next((i for i, pattern in enumerate(patterns) if pattern.search(path)), None) for path in paths]


def multiplier_of(groups, taken):
    """The rate multiplier of each variable (1.0 for the top-level optimizer's), in `taken`'s order."""
    return [1.0 if index is None else float(groups[index]["lr_multiplier"]) for index in taken]
