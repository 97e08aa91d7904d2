"""The one parameter mechanism: `Param(default, rule)`, one `REQUIRED`, value rules, spec checks (TF-free).

A spec is a dict `{name: Param}`. A rule is `rule(name, value) -> value`: it returns the
value as the consumer should use it (`4.0` -> `4` for an integer) or raises `ParamError`
with the parameter, a stable code and the value. Data and model parameters, lr policies,
warm-up, loss scalers, LARC, the pipeline keys, every optimizer's parameters and the
sweep spec are written with these, so one key has one rule and one default, whether it
arrives from YAML, `--set` or the Python API.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable

from opt_train.errors import ParamError
from opt_train.suggest import UnknownNameError


class _Required:
    """The default of a parameter the user must give."""

    def __repr__(self):
        return "REQUIRED"

    def __reduce__(self):
        return "REQUIRED"


REQUIRED = _Required()


@dataclass(frozen=True)
class Param:
    """One parameter: its default (or `REQUIRED`), the rule its value must pass, a one-line doc."""

    default: Any
    rule: Callable[[str, Any], Any]
    doc: str = ""

    @property
    def required(self):
        return self.default is REQUIRED


def fail(name, code, message, value, rule_text=None):
    """Raises `ParamError`; `rule_text` is the whole rule for the Keras wording ("an integer >= 1")."""
    text = None
    if rule_text is not None:
        text = f"`{name}` must be {rule_text}. Received: {name}={value!r}"
    raise ParamError(name, code, message, value, text=text)


# ----- value rules: rule(name, value) -> value, or raise ParamError -----


def is_number(value):
    """A finite real number, booleans excluded (`.nan` in YAML must fail its rule)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _as_number(name, value, rule_text, strings):
    if strings and isinstance(value, str):
        try:
            value_f = float(value)
        except ValueError:
            fail(name, "wrong_type", "must be a number", value, rule_text)
        if not math.isfinite(value_f):
            fail(name, "out_of_range", "must be a finite number", value, rule_text)
        return value_f
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(name, "wrong_type", "must be a number", value, rule_text)
    if not math.isfinite(value):
        fail(name, "out_of_range", "must be a finite number", value, rule_text)
    return value


def number(low=None, high=None, *, low_open=False, high_open=False, interval=False, strings=False,
           schedules=False, text=None):
    """A finite number in a range. The range reads "> 0", "in [0, 1)", or with `interval` "in [0.0, inf]".

    `strings` lets "1e-3" pass as a float; `schedules` lets a callable (an lr schedule) through.
    """
    if high is None and low is not None and not interval:
        bound = f"{'>' if low_open else '>='} {low}"
    elif low is None and high is not None and not interval:
        bound = f"{'<' if high_open else '<='} {high}"
    elif low is None and high is None:
        bound = None
    else:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        bound = f"in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
    rule_text = text or bound or "a number"

    def rule(name, value):
        if schedules and callable(value):
            return value
        checked = _as_number(name, value, None if rule_text == "a number" else rule_text, strings)
        below = low is not None and (checked <= low if low_open else checked < low)
        above = high is not None and (checked >= high if high_open else checked > high)
        if below or above:
            fail(name, "out_of_range", f"must be {rule_text}", value)
        return float(checked)

    return rule


def integer(low=None, *, strict=False, text=None, whole_floats=True, high=None):
    """An integer (`4.0` passes as 4 unless not `whole_floats`), at least `low` (or above it, `strict`), at most `high`."""
    bound = None if low is None else f"{'>' if strict else '>='} {low}"
    if high is not None:
        bound = f"in [{low}, {high}]" if low is not None and not strict else f"<= {high}"
    rule_text = text or ("an integer" + (f" {bound}" if bound else ""))

    def rule(name, value):
        whole = is_number(value) and float(value).is_integer()
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            checked = int(value)
        elif whole_floats and whole:
            checked = int(value)
        else:
            fail(name, "wrong_type", "must be an integer", value, rule_text)
        if low is not None and (checked <= low if strict else checked < low):
            fail(name, "out_of_range", f"must be {bound}", value, rule_text)
        if high is not None and checked > high:
            fail(name, "out_of_range", f"must be {bound}", value, rule_text)
        return checked

    return rule


def boolean(name, value):
    if not isinstance(value, bool):
        fail(name, "wrong_type", "must be true or false", value)
    return value


def string(name, value):
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        fail(name, "wrong_type", "must be a non-empty string", value)
    return value


def regex(name, value):
    """A string that compiles as a Python regular expression."""
    string(name, value)
    try:
        re.compile(value)
    except re.error as error:
        fail(name, "wrong_type", f"is not a valid regular expression ({error})", value)
    return value


def mapping(name, value):
    """A mapping (copied); None counts as `{}`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        fail(name, "wrong_type", "must be a mapping", value)
    return dict(value)


def optional(rule):
    """`None` passes unchanged; anything else must pass `rule`."""

    def optional_rule(name, value):
        return None if value is None else rule(name, value)

    return optional_rule


def one_of(*choices, kind=None, lower=False):
    """A name among `choices` (compared lowercase when `lower`); else `UnknownNameError`."""

    def rule(name, value):
        if not isinstance(value, str):
            fail(name, "wrong_type", f"must be one of {', '.join(choices)}", value)
        picked = value.lower() if lower else value
        if picked not in choices:
            raise UnknownNameError(kind or name, value, choices, param=name)
        return picked

    return rule


def list_of(item_rule, *, text, non_empty=False):
    """A list (or tuple) whose items pass `item_rule`; `text` describes the whole ("a list of numbers")."""

    def rule(name, value):
        if not isinstance(value, (list, tuple)) or (non_empty and not value):
            fail(name, "wrong_type", f"must be {text}", value, text)
        checked = []
        for item in value:
            try:
                checked.append(item_rule(name, item))
            except ParamError as error:
                fail(name, error.code, f"must be {text}", value, text)
        return list(checked)

    return rule


def anything(name, value):
    return value


def existing_file(name, value):
    """A path to an existing file (a relative one from the current directory; the config layer
    has already made a config's paths absolute, see `opt_train.config.paths`)."""
    import os

    string(name, value)
    full = os.path.abspath(os.path.expanduser(value))
    if not os.path.isfile(full):
        fail(name, "file_not_found", "must name an existing file", full)  # the path as resolved
    return value


def matching_globs(name, value):
    """A glob or a list of globs, each matching at least one file."""
    import glob
    import os

    for pattern in [value] if isinstance(value, str) else list(value):
        full = os.path.abspath(os.path.expanduser(pattern))
        if not any(os.path.isfile(path) for path in glob.iglob(full)):
            fail(name, "file_not_found", "must match at least one file (this pattern matches none)", full)
    return value


# ----- rules many specs share, each built here once -----

# Keras' wording for constructor arguments ("`epsilon` must be in [0, inf]"); numbers only.
# The largest step count: `global_step` and the update counters are int64 variables, and a
# larger max_steps (1e30 is a whole float) would never be reached.
MAX_STEP_COUNT = 2**63 - 1
STEP_COUNT = integer(1, high=MAX_STEP_COUNT)  # in [1, 2**63 - 1]
NON_NEGATIVE = number(0, interval=True)  # in [0, inf]
NON_NEGATIVE_FLOAT = number(0.0, interval=True)  # in [0.0, inf]
POSITIVE_FLOAT = number(0.0, low_open=True, interval=True)  # in (0.0, inf]
UNIT = number(0, 1, interval=True)  # in [0, 1]
FRACTION = number(0, 1, high_open=True)  # in [0, 1): a decay rate, a dropout rate
ANY_NUMBER = number()
# Config keys' wording ("must be > 0"); a YAML number may arrive as a string ("1e-3").
YAML_POSITIVE = number(0, low_open=True, strings=True)  # > 0
YAML_NON_NEGATIVE = number(0, strings=True)  # >= 0
YAML_FRACTION = number(0, 1, high_open=True, strings=True)  # in [0, 1)


# ----- rules of data and model parameters, which reach the loaders and builders as given -----

positive_int = integer(1, text="a positive integer", whole_floats=False)  # an integer must be one (no `4.0`)
any_int = integer(text="an integer", whole_floats=False)
non_negative = number(0, text="a number >= 0")
open_fraction = number(0, 1, low_open=True, high_open=True)  # a share held out for evaluation
positive_int_list = list_of(positive_int, text="a non-empty list of positive integers", non_empty=True)
optional_string = optional(string)


def int_at_least(low):
    return integer(low, whole_floats=False)


optional_class_count = optional(int_at_least(2))


def single_character(name, value):
    if not isinstance(value, str) or len(value) != 1:
        fail(name, "wrong_type", "must be one character", value)
    return value


def string_or_int(name, value):
    """A column: its name or its index."""
    if not ((isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and value)):
        fail(name, "wrong_type", "must be a column name or an integer index", value)
    return value


# ----- checking a whole params dict against a spec -----


def defaults(spec):
    """{name: default} of a spec, `REQUIRED` where there is none."""
    return {name: param.default for name, param in spec.items()}


def unknown_keys(spec, params, kind, *, key_kind=None):
    """An `unknown_key` error for each key of `params` that `spec` does not list."""
    return [
        UnknownNameError(key_kind or f"{kind} parameter", key, list(spec), code="unknown_key")
        for key in params
        if key not in spec
    ]


def missing(name, required_by, value=None):
    """The error for a required parameter that was not given: "is required by lr_policy 'exp'"."""
    return ParamError(name, "missing", f"is required {required_by}", value)


def param_errors(spec, params, kind, *, required_by=None, key_kind=None):
    """`(filled, errors)`: `params` checked against `spec`, with defaults filled, and every problem found.

    `kind` names the owner in unknown-key messages ("lr_policy", "dataset npz");
    `required_by` in missing-parameter ones (defaults to "by <kind>").
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return {}, [ParamError(None, "wrong_type", f"{kind} params must be a mapping", params)]
    errors = unknown_keys(spec, params, kind, key_kind=key_kind)
    unknown = bool(errors)
    filled = {}
    for key, param in spec.items():
        if key not in params:
            # A misspelt key is most likely the required one: say that once, not twice.
            if param.required and not unknown:
                errors.append(missing(key, required_by or f"by {kind}"))
            else:
                filled[key] = param.default
            continue
        try:
            filled[key] = param.rule(key, params[key])
        except ParamError as error:
            errors.append(error)
    return filled, errors


def check_params(spec, params, kind, *, required_by=None, key_kind=None):
    """`params` checked against `spec`, defaults filled in; raises the first problem found."""
    return filled_or_first_error(param_errors(spec, params, kind, required_by=required_by, key_kind=key_kind))


def filled_or_first_error(found):
    """The parameters of a `(filled, errors)` pair (every kind's `param_errors` gives one); raises its first error."""
    filled, errors = found
    if errors:
        raise errors[0]
    return filled


class ParamErrors(ValueError):
    """Several `ParamError`s from one check, all to be reported; the first one's text is the message."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__(str(self.errors[0]) if self.errors else "")
