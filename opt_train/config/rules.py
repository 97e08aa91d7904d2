"""Value rules for config fields: each takes a raw YAML value, returns it typed or raises `RuleError`.

Rules know nothing of files or keys; the validator adds where a value was set.
"""

from __future__ import annotations

import math
import numbers
import re

from opt_train.config.issues import RuleError
from opt_train.suggest import UnknownNameError, closest



def require_int(value):
    """An integer; `3.0` passes as 3, booleans and `2.5` do not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RuleError("must be an integer", value, "wrong_type")
    if isinstance(value, numbers.Integral):
        return int(value)
    if math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise RuleError("must be an integer", value, "wrong_type")


def reads_as_float(text):
    """True when the string `text` is a number to `float()` (`"1e-3"`, `"-2"`)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def require_float(value):
    """A finite number as a float; ints and strings such as `"1e-3"` pass."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise RuleError("must be a number", value, "wrong_type") from None
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RuleError("must be a number", value, "wrong_type")
    else:
        number = float(value)
    if not math.isfinite(number):
        raise RuleError("must be a finite number", value, "out_of_range")
    return number


def require_bool(value):
    if not isinstance(value, bool):
        raise RuleError("must be true or false", value, "wrong_type")
    return value


def require_str(value):
    if not isinstance(value, str) or not value:
        raise RuleError("must be a non-empty string", value, "wrong_type")
    return value


def require_dict(value):
    """A mapping (copied); an empty YAML value counts as `{}`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RuleError("must be a mapping", value, "wrong_type")
    return dict(value)


def require_list(value):
    """A list; an empty YAML value counts as `[]`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RuleError("must be a list", value, "wrong_type")
    return list(value)


def at_least(low):
    def check(value):
        if value < low:
            raise RuleError(f"must be >= {low}", value)
        return value

    return check


def greater_than(low):
    def check(value):
        if not value > low:
            raise RuleError(f"must be > {low}", value)
        return value

    return check


def both(*rules):
    """Applies rules in turn, each on the result of the last; errors show the value as given."""

    def check(value):
        result = value
        for rule in rules:
            try:
                result = rule(result)
            except RuleError as error:
                if error.subkey is None:
                    error.value = value
                raise
        return result

    return check


def optional(rule):
    """`None` passes unchanged; anything else must pass `rule`."""

    def check(value):
        return None if value is None else rule(value)

    return check


def one_of(kind, choices, lower=False):
    """A string from `choices` (compared lowercase when `lower`); else an `unknown_name` error."""

    def check(value):
        if not isinstance(value, str):
            raise RuleError(f"must be one of {', '.join(choices)}", value, "wrong_type")
        name = value.lower() if lower else value
        if name not in choices:
            raise unknown_name(UnknownNameError(kind, value, choices))
        return name

    return check


def unknown_name(error):
    """An `UnknownNameError` as an `unknown_name` rule error (its message has the suggestion)."""
    return RuleError(str(error), None, "unknown_name")


def unknown_key(name, known):
    """`unknown key; did you mean 'logdir'?` for a key that no schema has."""
    from opt_train.config.compat import synonym

    # Another tool's name for the key (`lr`) before the nearest spelling (`logdir`).
    suggestion = synonym(name, known) or closest(str(name), known)
    if suggestion:
        hint = f"; did you mean '{suggestion}'?"
    elif len(known) <= 12:
        hint = f"; valid: {', '.join(sorted(map(str, known)))}"
    else:
        hint = ""
    return RuleError(f"unknown key{hint}", None, "unknown_key", subkey=str(name))


def check_known_keys(params, known):
    """Raises for the first key of `params` not in `known`."""
    for name in params:
        if name not in known:
            raise unknown_key(name, known)


def require_regex(value):
    """A string that compiles as a Python regular expression."""
    require_str(value)
    try:
        re.compile(value)
    except re.error as error:
        raise RuleError(f"is not a valid regular expression ({error})", value, "wrong_type") from None
    return value


int_at_least_1 = both(require_int, at_least(1))
positive_float = both(require_float, greater_than(0))
nonnegative_float = both(require_float, at_least(0))
