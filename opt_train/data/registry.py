"""Built-in datasets, one `DatasetRow` each in `DATASETS`, TF-free, for the config layer and `opt-train list`.

`DATASETS` is the one source of truth: a row names the loader its parameters reach (with
these defaults), its task kind, the parameters that name files and, for a streamed
dataset, the builder of its `tf.data` pipelines. Adding a dataset is its module plus one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from opt_train import params as p
from opt_train.data.counts import DIGITS_EXAMPLES
from opt_train.registry import Row, Table
from opt_train.suggest import UnknownNameError, closest
from opt_train.usercode import split_spec

TASK_KINDS = ("classification", "regression")


@dataclass(frozen=True, kw_only=True)
class DatasetRow(Row):
    """A built-in dataset. `code`: its loader, `source(**params) -> data.arrays.Source` (NumPy only; the
    pipeline shards, shuffles and batches it in memory), or with `streamed` the builder of its pipelines,
    `bundle(params, *, batch_size, seed, rank, size, eval_batch_size, statistics, replicas) -> DataBundle`.

    `task_kind`: the kind of task it yields (None: its `task` parameter says). `files`: {param: rule}
    of the parameters naming files, checked once the rest is right (the config layer resolves them
    against the config file's folder). `values_per_example`: for data generated in memory, the numbers
    one example takes while it is made, from the parameters (the memory check reads it). `after_files`:
    a check that reads the files, `after_files(filled) -> [ParamError]`.
    """

    task_kind: str | None = None
    streamed: bool = False
    files: dict = field(default_factory=dict)
    values_per_example: Callable | None = None
    after_files: Callable | None = None


_SEED = p.Param(0, p.any_int, "seed of the generated data and of the train/eval split")
_EVAL_FRACTION = p.Param(0.2, p.open_fraction, "share of the examples held out for evaluation")
# The user's own numbers arrive in their own units (income in tens of thousands beside a
# ratio); unscaled they train to chance. Keras users put an adapted Normalization first.
_NORMALIZE = p.Param(True, p.boolean, "standardise float inputs with the train split's mean and std "
                     "(saved in logdir/data.json and built into the export)")
_TASK = p.Param("classification", p.one_of(*TASK_KINDS, kind="task"), "classification | regression")


# ----- rules of the `tfrecord` dataset (files, the tf.train.Example schema) -----

TFRECORD_COMPRESSIONS = ("none", "GZIP", "ZLIB")
FEATURE_DTYPES = ("float32", "int64", "string")


def file_globs(name, value):
    """A glob, or a non-empty list of globs / paths."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
        return value
    raise p.ParamError(name, "wrong_type", "must be a glob or a non-empty list of globs", value)


def compression_name(name, value):
    """none | GZIP | ZLIB, in any case."""
    if not isinstance(value, str) or value.lower() not in [c.lower() for c in TFRECORD_COMPRESSIONS]:
        raise UnknownNameError("compression", value, TFRECORD_COMPRESSIONS, param=name)
    return value


def feature_schema(name, value):
    """`{feature: {dtype: float32 | int64 | string, shape: [d, ...]}}`, at least one feature."""
    if not isinstance(value, dict) or not value:
        raise p.ParamError(name, "wrong_type", "must be a mapping of feature names to {dtype, shape}", value)
    for feature, spec in value.items():
        key = f"{name}.{feature}"
        if not isinstance(spec, dict) or set(spec) - {"dtype", "shape"} or "dtype" not in spec:
            raise p.ParamError(name, "wrong_type", f"`{feature}` must be {{dtype: ..., shape: [...]}}", spec)
        if spec["dtype"] not in FEATURE_DTYPES:
            raise UnknownNameError("feature dtype", spec["dtype"], FEATURE_DTYPES, param=f"{key}.dtype")
        shape = spec.get("shape", [])
        if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
        ):
            raise p.ParamError(name, "wrong_type", f"`{feature}.shape` must be a list of positive integers", shape)
    return value


def _label_value(name, value):
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        p.fail(name, "wrong_type", "must be a string or an integer", value)
    return value


# The label value of each class id, as `data to-tfrecord` writes it.
_LABEL_LIST = p.optional(p.list_of(_label_value, text="a non-empty list of label values", non_empty=True))


def _tfrecord_errors(params):
    """`x`, `y`, `weight` name features of the schema; classification has `num_classes` and integer labels."""
    features, errors = params["features"], []
    for key in ("x", "y", "weight"):
        name = params.get(key)
        if name is not None and name not in features:
            error = UnknownNameError("feature", name, list(features))
            error.param = key
            errors.append(error)
    task = params.get("task", "classification")
    if task == "classification" and params.get("num_classes") is None:
        errors.append(p.ParamError("num_classes", "missing", "is required for a classification task"))
    if not errors:
        for key in ("x", "y", "weight"):
            name = params.get(key)
            if name is not None and features[name]["dtype"] == "string":
                errors.append(p.ParamError(key, "wrong_type", "must name a float32 or int64 feature", name))
        if task == "classification" and features[params["y"]]["dtype"] != "int64":
            errors.append(p.ParamError("y", "wrong_type", "must name an int64 feature for classification", params["y"]))
    labels, classes = params.get("labels"), params.get("num_classes")
    if labels is not None and classes is not None and len(labels) != classes:
        errors.append(p.ParamError("labels", "conflict", f"must hold one value per class ({classes})", labels))
    if errors:
        raise p.ParamErrors(errors)


def _csv_header_errors(params):
    """`label_column` against the header of `path` and `eval_path`, as reading them at train would judge it."""
    import os

    for key in ("path", "eval_path"):
        if params.get(key) is None:
            continue
        path = params[key]
        try:
            first = csv_header(os.path.abspath(os.path.expanduser(path)), params["delimiter"])
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # reading the file at train says what is wrong with it
        if not first:
            continue
        try:
            label_column_index(params["label_column"], first if params["header"] else None, len(first), path)
        except p.ParamError as error:
            return [error]
    return []


_SOURCES = "opt_train.data.sources"

DATASETS = Table("dataset", [
    DatasetRow(
        name="digits",
        summary=f"scikit-learn's {DIGITS_EXAMPLES} real 8x8 handwritten digits, 10 classes (no download)",
        code=f"{_SOURCES}:load_digits_source",
        task_kind="classification",
        params={"eval_fraction": _EVAL_FRACTION, "seed": _SEED},
    ),
    DatasetRow(
        name="synthetic_classification",
        summary="seeded Gaussian blobs, one per class",
        code=f"{_SOURCES}:synthetic_classification_source",
        task_kind="classification",
        values_per_example=lambda q: q["num_features"] + 1,
        params={
            "num_examples": p.Param(2000, p.int_at_least(10), "examples before the split"),
            "num_features": p.Param(20, p.positive_int, "features per example"),
            "num_classes": p.Param(4, p.int_at_least(2), "number of classes"),
            "noise": p.Param(1.0, p.non_negative, "std of the Gaussian around each class centre"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
        },
    ),
    DatasetRow(
        name="synthetic_regression",
        summary="seeded linear or sine target with Gaussian noise (MSE)",
        code=f"{_SOURCES}:synthetic_regression_source",
        task_kind="regression",
        values_per_example=lambda q: q["num_features"] + 2 * q["num_targets"] + 16 * q["nonlinear"],
        params={
            "num_examples": p.Param(2000, p.int_at_least(10), "examples before the split"),
            "num_features": p.Param(10, p.positive_int, "features per example"),
            "num_targets": p.Param(1, p.positive_int, "outputs per example"),
            "noise": p.Param(0.1, p.non_negative, "std of the Gaussian noise on the target"),
            "nonlinear": p.Param(False, p.boolean, "target sin(x W1) W2 instead of x W + b"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
        },
    ),
    DatasetRow(
        name="reversal",
        summary="random token sequences; the target is the sequence reversed (OpenSeq2Seq's toy task)",
        code=f"{_SOURCES}:reversal_source",
        task_kind="sequence",
        params={
            "vocab_size": p.Param(16, p.int_at_least(2), "number of distinct tokens"),
            "seq_len": p.Param(8, p.positive_int, "tokens per sequence"),
            "num_examples": p.Param(4000, p.int_at_least(10), "sequences before the split"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
        },
    ),
    DatasetRow(
        name="npz",
        summary="your own arrays from a .npz file",
        code=f"{_SOURCES}:npz_source",
        files={"path": p.existing_file, "eval_path": p.existing_file},
        params={
            "path": p.Param(p.REQUIRED, p.string, "the .npz file"),
            "x_key": p.Param("x", p.string, "array of inputs in the file"),
            "y_key": p.Param("y", p.string, "array of targets in the file"),
            "task": _TASK,
            "num_classes": p.Param(None, p.optional_class_count, "classes (default: inferred from labels)"),
            "eval_path": p.Param(None, p.optional_string, "a separate .npz for evaluation"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
            "normalize": _NORMALIZE,
        },
    ),
    DatasetRow(
        name="csv",
        summary="your own table from a .csv file",
        code=f"{_SOURCES}:csv_source",
        files={"path": p.existing_file, "eval_path": p.existing_file},
        after_files=_csv_header_errors,
        params={
            "path": p.Param(p.REQUIRED, p.string, "the .csv file"),
            "label_column": p.Param(-1, p.string_or_int, "name or index of the target column"),
            "header": p.Param(True, p.boolean, "the first row holds column names"),
            "delimiter": p.Param(",", p.single_character, "field separator (one character, as csv reads)"),
            "task": _TASK,
            "num_classes": p.Param(None, p.optional_class_count, "classes (default: inferred from labels)"),
            "eval_path": p.Param(None, p.optional_string, "a separate .csv for evaluation"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
            "normalize": _NORMALIZE,
        },
    ),
    DatasetRow(
        name="tfrecord",
        summary="tf.train.Example records streamed from TFRecord files, sharded across ranks",
        code="opt_train.data.pipeline:tfrecord_bundle",
        streamed=True,
        files={"train_files": p.matching_globs, "eval_files": p.matching_globs},
        cross=_tfrecord_errors,
        params={
            "train_files": p.Param(p.REQUIRED, file_globs, "a glob or a list of globs of the train files"),
            "eval_files": p.Param(None, p.optional(file_globs), "a glob or a list of globs of the eval files"),
            "compression": p.Param("none", compression_name, "none | GZIP | ZLIB"),
            "features": p.Param(p.REQUIRED, feature_schema, "the tf.train.Example schema: {name: {dtype, shape}}"),
            "x": p.Param(p.REQUIRED, p.string, "the input feature"),
            "y": p.Param(p.REQUIRED, p.string, "the target feature"),
            "weight": p.Param(None, p.optional_string, "a per-example sample-weight feature"),
            "task": _TASK,
            "num_classes": p.Param(None, p.optional_class_count, "classes (required for classification)"),
            "shuffle_buffer": p.Param(10000, p.positive_int, "records in the shuffle buffer (1: no shuffle)"),
            "normalize": _NORMALIZE,
            "labels": p.Param(None, _LABEL_LIST, "the label value of each class id (in class-id order)"),
        },
    ),
    DatasetRow(
        name="synthetic_images",
        summary="seeded random images (height x width x channels), one coarse pattern per class plus noise",
        code="opt_train.data.synthetic_images:source",
        task_kind="classification",
        values_per_example=lambda q: q["height"] * q["width"] * q["channels"] + 1,
        params={
            "num_examples": p.Param(256, p.int_at_least(10), "images before the split"),
            "height": p.Param(32, p.positive_int, "image height in pixels"),
            "width": p.Param(32, p.positive_int, "image width in pixels"),
            "channels": p.Param(3, p.positive_int, "channels per pixel"),
            "num_classes": p.Param(10, p.int_at_least(2), "number of classes"),
            "noise": p.Param(1.0, p.non_negative, "std of the Gaussian noise on each pixel"),
            "eval_fraction": _EVAL_FRACTION,
            "seed": _SEED,
        },
    ),
], owner="{name}", required_by="for {name}", as_given=True, columns=("summary", "task_kind", "parameters"))

# Views of the table.
DATASET_NAMES = tuple(DATASETS.rows)
DATASET_SPECS = DATASETS.column("params")
PATH_PARAMS = {name: row.files for name, row in DATASETS.rows.items() if row.files}


def resolve(name):
    """The canonical dataset name (case and `_`/`-` ignored); raises UnknownNameError."""
    return DATASETS.resolve(name)


# ----- the user's own pipeline: {factory: "pkg.mod:make"} (opt_train.data.factory) -----

# The parameters opt-train reads itself; every other key goes to the user's function.
FACTORY_SPEC = {
    "task": _TASK,
    "num_classes": p.Param(None, p.optional_class_count, "classes (required for classification)"),
}


def is_factory(spec):
    """True when `spec` names the user's own pipeline: `{"factory": "package.module:function"}`."""
    return isinstance(spec, dict)


def _factory_errors(spec, params):
    """`(filled, errors)` for a factory's params: the ones opt-train reads (`FACTORY_SPEC`) checked, defaults
    filled; the others pass through to the user's function."""
    try:
        split_spec(spec)
    except ValueError as error:
        return {}, [error]
    if params is not None and not isinstance(params, dict):
        return {}, [p.ParamError(None, "wrong_type", "data params must be a mapping", params)]
    params = params or {}
    ours = {key: params[key] for key in FACTORY_SPEC if key in params}
    errors = p.param_errors(FACTORY_SPEC, ours, "data factory", required_by="for data factory")[1]
    if not errors and ours.get("task", "classification") == "classification" and ours.get("num_classes") is None:
        errors.append(p.ParamError("num_classes", "missing", "is required for a classification task"))
    return {**{key: param.default for key, param in FACTORY_SPEC.items()}, **params}, errors



def _file_errors(row, params):
    errors = []
    for param, rule in row.files.items():
        value = params.get(param)
        if value is None:
            continue
        try:
            rule(param, value)
        except p.ParamError as error:
            errors.append(error)
    return errors


_BYTES_PER_VALUE = 12  # a generated dataset's float64 draw and its float32 copy


def _memory_errors(row, filled):
    """`num_examples` whose arrays cannot fit in this machine's memory (a traceback from NumPy otherwise)."""
    import os

    needed = filled["num_examples"] * row.values_per_example(filled) * _BYTES_PER_VALUE
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return []
    if needed <= memory:
        return []
    return [p.ParamError(
        "num_examples", "out_of_range",
        f"needs about {needed / 2**30:.3g} GiB to generate, more than this machine's {memory / 2**30:.3g} GiB",
        filled["num_examples"],
    )]


def param_errors(name, params):
    """`(filled, errors)` for dataset `name` (or a factory), as `Table.param_errors`: the row's rules, then its
    memory, its files (missing files last) and what it checks of them (`after_files`)."""
    if is_factory(name):
        return _factory_errors(name, params)
    row = DATASETS[name]
    filled, errors = DATASETS.param_errors(row.name, params)
    if not errors and row.values_per_example is not None:
        errors = _memory_errors(row, filled)
    errors = errors or _file_errors(row, filled)
    if not errors and row.after_files is not None:
        errors = row.after_files(filled)
    return filled, errors


def csv_header(path, delimiter):
    """The first row of the .csv at `path`, its fields stripped ([] for an empty file)."""
    import csv

    with open(path, newline="") as handle:
        for row in csv.reader(handle, delimiter=delimiter):
            if row:
                return [field.strip() for field in row]
    return []


def label_column_index(label_column, names, width, path):
    """Where `label_column` (a header name, or an index into `width` columns) is; the one rule of validate and train.

    `names`: the file's header (stripped), or None when it has none. A name not in it is
    refused with the closest one and the columns there are.
    """
    if isinstance(label_column, str):
        if names is None or label_column not in names:
            listed = " (it has no header row: give an index)" if names is None else f" {names}"
            suggestion = None if names is None else closest(label_column, names)
            hint = f"; did you mean '{suggestion}'?" if suggestion else ""
            raise p.ParamError("label_column", "unknown_name", f"must name a column of {path}{listed}{hint}",
                               label_column)
        return names.index(label_column)
    if not -width <= label_column < width:
        raise p.ParamError("label_column", "out_of_range", f"must be in [{-width}, {width})", label_column)
    return label_column % width




def check_params(name, params):
    """`params` for dataset `name` with defaults filled; raises the first problem."""
    return p.filled_or_first_error(param_errors(name, params))


def task_kind(name, params=None):
    """The task kind dataset `name` yields (classification | regression | sequence)."""
    if is_factory(name):
        return (params or {}).get("task", "classification")
    row = DATASETS[name]
    if row.task_kind is not None:
        return row.task_kind
    return (params or {}).get("task", row.params["task"].default)
