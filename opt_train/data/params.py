"""The value rules dataset and model parameter specs use, on the one mechanism of `opt_train.params`.

A spec is a dict `{param_name: Param(default, rule, doc)}`. `check_params` fills the
defaults, rejects unknown names with a did-you-mean and runs each rule, which raises
`ParamError` ("`dropout` must be in [0, 1). Received: dropout=1.5", code
`out_of_range`). Both registries (`opt_train.models.registry`, `opt_train.data.registry`)
keep their specs with these rules, so the builders and the config layer read one source of truth.
"""

from __future__ import annotations

from opt_train import params as _p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param, fail
from opt_train.suggest import UnknownNameError

__all__ = ["REQUIRED", "Param", "ParamError", "check_params", "param_errors"]

# Data parameters reach the loaders as given, so an integer must be one (no `4.0`).
positive_int = _p.integer(1, text="a positive integer", whole_floats=False)
any_int = _p.integer(text="an integer", whole_floats=False)
non_negative = _p.number(0, text="a number >= 0")
positive = _p.number(0, low_open=True, text="a number > 0")
fraction = _p.FRACTION  # a dropout rate
open_fraction = _p.number(0, 1, low_open=True, high_open=True)  # a share held out for evaluation
boolean = _p.boolean
non_empty_string = _p.string
existing_file = _p.existing_file
matching_globs = _p.matching_globs
positive_int_list = _p.list_of(positive_int, text="a non-empty list of positive integers", non_empty=True)


def int_at_least(low):
    return _p.integer(low, whole_floats=False)


def int_list_or_none(name, value):
    return None if value is None else positive_int_list(name, value)


def single_character(name, value):
    if not isinstance(value, str) or len(value) != 1:
        fail(name, "wrong_type", "must be one character", value)
    return value


optional_string = _p.optional(non_empty_string)


def _label_value(name, value):
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        fail(name, "wrong_type", "must be a string or an integer", value)
    return value


# The label value of each class id, as `data to-tfrecord` writes it.
optional_label_list = _p.optional(_p.list_of(_label_value, text="a non-empty list of label values", non_empty=True))
optional_positive_int = _p.optional(int_at_least(2))


def string_or_int(name, value):
    if not (any_int_ok(value) or (isinstance(value, str) and value)):
        fail(name, "wrong_type", "must be a column name or an integer index", value)
    return value


def any_int_ok(value):
    return isinstance(value, int) and not isinstance(value, bool)


def one_of(*choices, kind):
    """A rule accepting only `choices`; anything else is an UnknownNameError for `kind`."""
    return _p.one_of(*choices, kind=kind)


def param_errors(spec, params, kind):
    """Every problem with `params` under `spec`, as `ParamError`s."""
    return _p.param_errors(spec, params, kind, required_by=f"for {kind}")[1]


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
    raise ParamError(name, "wrong_type", "must be a glob or a non-empty list of globs", value)


def optional_file_globs(name, value):
    if value is not None:
        file_globs(name, value)


def compression_name(name, value):
    """none | GZIP | ZLIB, in any case."""
    if not isinstance(value, str) or value.lower() not in [c.lower() for c in TFRECORD_COMPRESSIONS]:
        raise UnknownNameError("compression", value, TFRECORD_COMPRESSIONS, param=name)


def feature_schema(name, value):
    """`{feature: {dtype: float32 | int64 | string, shape: [d, ...]}}`, at least one feature."""
    if not isinstance(value, dict) or not value:
        raise ParamError(name, "wrong_type", "must be a mapping of feature names to {dtype, shape}", value)
    for feature, spec in value.items():
        key = f"{name}.{feature}"
        if not isinstance(spec, dict) or set(spec) - {"dtype", "shape"} or "dtype" not in spec:
            raise ParamError(name, "wrong_type", f"`{feature}` must be {{dtype: ..., shape: [...]}}", spec)
        if spec["dtype"] not in FEATURE_DTYPES:
            raise UnknownNameError("feature dtype", spec["dtype"], FEATURE_DTYPES, param=f"{key}.dtype")
        shape = spec.get("shape", [])
        if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
        ):
            raise ParamError(name, "wrong_type", f"`{feature}.shape` must be a list of positive integers", shape)
