"""Parameter specs for models and datasets: defaults and value rules, checked without TensorFlow.

A spec is a dict `{param_name: Param(default, rule, doc)}`. `check_params` fills the
defaults, rejects unknown names with a did-you-mean (`UnknownNameError`) and runs each
rule, which raises a Keras-style `ValueError` ("`dropout` must be in [0, 1). Received:
dropout=1.5"). Both registries (`opt_train.models.registry`, `opt_train.data.registry`)
keep their specs here so the builders and the config layer read one source of truth.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from opt_train.suggest import UnknownNameError

REQUIRED = object()  # default of a parameter the user must give


class ParamError(ValueError):
    """A parameter value that breaks its rule; `.param` names the parameter."""

    def __init__(self, param, message):
        self.param = param
        super().__init__(message)


@dataclass(frozen=True)
class Param:
    """One parameter: its default (or REQUIRED), the rule its value must pass, a one-line doc."""

    default: Any
    rule: Callable[[str, Any], None]
    doc: str = ""


def _fail(name, rule, value):
    raise ParamError(name, f"`{name}` must be {rule}. Received: {name}={value!r}")


# ----- rules: each takes (name, value) and raises ParamError, or returns None -----


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value):
    # NaN and inf are floats but no usable parameter: `.nan` in YAML must fail its rule.
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(name, value):
    if not _is_int(value) or value < 1:
        _fail(name, "a positive integer", value)


def int_at_least(low):
    def rule(name, value):
        if not _is_int(value) or value < low:
            _fail(name, f"an integer >= {low}", value)

    return rule


def any_int(name, value):
    if not _is_int(value):
        _fail(name, "an integer", value)


def positive_int_list(name, value):
    if not isinstance(value, (list, tuple)) or not value:
        _fail(name, "a non-empty list of positive integers", value)
    if not all(_is_int(v) and v >= 1 for v in value):
        _fail(name, "a non-empty list of positive integers", value)


def int_list_or_none(name, value):
    if value is None:
        return
    positive_int_list(name, value)


def non_negative(name, value):
    if not _is_number(value) or value < 0:
        _fail(name, "a number >= 0", value)


def positive(name, value):
    if not _is_number(value) or value <= 0:
        _fail(name, "a number > 0", value)


def fraction(name, value):
    """In [0, 1): a dropout rate."""
    if not _is_number(value) or not 0 <= value < 1:
        _fail(name, "in [0, 1)", value)


def open_fraction(name, value):
    """In (0, 1): a share of the examples held out for evaluation."""
    if not _is_number(value) or not 0 < value < 1:
        _fail(name, "in (0, 1)", value)


def boolean(name, value):
    if not isinstance(value, bool):
        _fail(name, "true or false", value)


def non_empty_string(name, value):
    if not isinstance(value, str) or not value:
        _fail(name, "a non-empty string", value)


def single_character(name, value):
    if not isinstance(value, str) or len(value) != 1:
        _fail(name, "one character", value)


def optional_string(name, value):
    if value is not None:
        non_empty_string(name, value)


def optional_positive_int(name, value):
    if value is not None:
        int_at_least(2)(name, value)


def string_or_int(name, value):
    if not (_is_int(value) or (isinstance(value, str) and value)):
        _fail(name, "a column name or an integer index", value)


def one_of(*choices, kind):
    """A rule accepting only `choices`; anything else is an UnknownNameError for `kind`."""

    def rule(name, value):
        if not isinstance(value, str) or value not in choices:
            error = UnknownNameError(kind, value, choices)
            error.param = name
            raise error

    return rule


# ----- checking a whole params dict against a spec -----


def param_errors(spec, params, kind):
    """Every problem with `params` under `spec`, as exceptions (each has `.param`)."""
    params = {} if params is None else params
    if not isinstance(params, dict):
        return [ParamError(None, f"{kind} params must be a mapping. Received: {params!r}")]
    errors = []
    for key in params:
        if key not in spec:
            error = UnknownNameError(f"{kind} parameter", key, spec)
            error.param = key
            errors.append(error)
    for key, param in spec.items():
        if key not in params:
            if param.default is REQUIRED:
                errors.append(ParamError(key, f"`{key}` is required for {kind}."))
            continue
        try:
            param.rule(key, params[key])
        except ValueError as error:
            if not hasattr(error, "param"):
                error.param = key
            errors.append(error)
    return errors


def check_params(spec, params, kind):
    """`params` with the spec's defaults filled in; raises the first problem found."""
    errors = param_errors(spec, params, kind)
    if errors:
        raise errors[0]
    filled = {key: param.default for key, param in spec.items()}
    filled.update(params or {})
    return filled


# ----- rules of the `tfrecord` dataset (files, the tf.train.Example schema) -----

TFRECORD_COMPRESSIONS = ("none", "GZIP", "ZLIB")
FEATURE_DTYPES = ("float32", "int64", "string")


def file_globs(name, value):
    """A glob, or a non-empty list of globs / paths."""
    if isinstance(value, str) and value:
        return
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
        return
    _fail(name, "a glob or a non-empty list of globs", value)


def optional_file_globs(name, value):
    if value is not None:
        file_globs(name, value)


def compression_name(name, value):
    """none | GZIP | ZLIB, in any case."""
    if not isinstance(value, str) or value.lower() not in [c.lower() for c in TFRECORD_COMPRESSIONS]:
        error = UnknownNameError("compression", value, TFRECORD_COMPRESSIONS)
        error.param = name
        raise error


def feature_schema(name, value):
    """`{feature: {dtype: float32 | int64 | string, shape: [d, ...]}}`, at least one feature."""
    if not isinstance(value, dict) or not value:
        _fail(name, "a mapping of feature names to {dtype, shape}", value)
    for feature, spec in value.items():
        key = f"{name}.{feature}"
        if not isinstance(spec, dict) or set(spec) - {"dtype", "shape"} or "dtype" not in spec:
            raise ParamError(key, f"`{key}` must be {{dtype: ..., shape: [...]}}. Received: {spec!r}")
        if spec["dtype"] not in FEATURE_DTYPES:
            error = UnknownNameError("feature dtype", spec["dtype"], FEATURE_DTYPES)
            error.param = f"{key}.dtype"
            raise error
        shape = spec.get("shape", [])
        if not isinstance(shape, (list, tuple)) or not all(_is_int(d) and d >= 1 for d in shape):
            raise ParamError(
                f"{key}.shape", f"`{key}.shape` must be a list of positive integers. Received: {shape!r}"
            )
