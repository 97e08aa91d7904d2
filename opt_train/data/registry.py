"""Built-in dataset names and their parameters, TF-free, for the config layer and `opt-train list`.

`DATASET_SPECS` is the one source of truth: the loaders in `opt_train.data.sources`
receive exactly these parameters, with these defaults.
"""

from __future__ import annotations

from opt_train.data import params as p
from opt_train.data import synthetic_images
from opt_train.data.counts import DIGITS_EXAMPLES
from opt_train.suggest import Registry, UnknownNameError, closest
from opt_train.usercode import split_spec

TASK_KINDS = ("classification", "regression")

_SEED = p.Param(0, p.any_int, "seed of the generated data and of the train/eval split")
_EVAL_FRACTION = p.Param(0.2, p.open_fraction, "share of the examples held out for evaluation")
# The user's own numbers arrive in their own units (income in tens of thousands beside a
# ratio); unscaled they train to chance. Keras users put an adapted Normalization first.
_NORMALIZE = p.Param(True, p.boolean, "standardise float inputs with the train split's mean and std "
                     "(saved in logdir/data.json and built into the export)")

DATASET_SPECS = {
    "digits": {
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
    },
    "synthetic_classification": {
        "num_examples": p.Param(2000, p.int_at_least(10), "examples before the split"),
        "num_features": p.Param(20, p.positive_int, "features per example"),
        "num_classes": p.Param(4, p.int_at_least(2), "number of classes"),
        "noise": p.Param(1.0, p.non_negative, "std of the Gaussian around each class centre"),
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
    },
    "synthetic_regression": {
        "num_examples": p.Param(2000, p.int_at_least(10), "examples before the split"),
        "num_features": p.Param(10, p.positive_int, "features per example"),
        "num_targets": p.Param(1, p.positive_int, "outputs per example"),
        "noise": p.Param(0.1, p.non_negative, "std of the Gaussian noise on the target"),
        "nonlinear": p.Param(False, p.boolean, "target sin(x W1) W2 instead of x W + b"),
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
    },
    "reversal": {
        "vocab_size": p.Param(16, p.int_at_least(2), "number of distinct tokens"),
        "seq_len": p.Param(8, p.positive_int, "tokens per sequence"),
        "num_examples": p.Param(4000, p.int_at_least(10), "sequences before the split"),
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
    },
    "npz": {
        "path": p.Param(p.REQUIRED, p.non_empty_string, "the .npz file"),
        "x_key": p.Param("x", p.non_empty_string, "array of inputs in the file"),
        "y_key": p.Param("y", p.non_empty_string, "array of targets in the file"),
        "task": p.Param("classification", p.one_of(*TASK_KINDS, kind="task"), "classification | regression"),
        "num_classes": p.Param(None, p.optional_positive_int, "classes (default: inferred from labels)"),
        "eval_path": p.Param(None, p.optional_string, "a separate .npz for evaluation"),
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
        "normalize": _NORMALIZE,
    },
    "csv": {
        "path": p.Param(p.REQUIRED, p.non_empty_string, "the .csv file"),
        "label_column": p.Param(-1, p.string_or_int, "name or index of the target column"),
        "header": p.Param(True, p.boolean, "the first row holds column names"),
        "delimiter": p.Param(",", p.single_character, "field separator (one character, as csv reads)"),
        "task": p.Param("classification", p.one_of(*TASK_KINDS, kind="task"), "classification | regression"),
        "num_classes": p.Param(None, p.optional_positive_int, "classes (default: inferred from labels)"),
        "eval_path": p.Param(None, p.optional_string, "a separate .csv for evaluation"),
        "eval_fraction": _EVAL_FRACTION,
        "seed": _SEED,
        "normalize": _NORMALIZE,
    },
    # ----- streamed from TFRecord files (opt_train.data.tfrecord) -----
    "tfrecord": {
        "train_files": p.Param(p.REQUIRED, p.file_globs, "a glob or a list of globs of the train files"),
        "eval_files": p.Param(None, p.optional_file_globs, "a glob or a list of globs of the eval files"),
        "compression": p.Param("none", p.compression_name, "none | GZIP | ZLIB"),
        "features": p.Param(p.REQUIRED, p.feature_schema, "the tf.train.Example schema: {name: {dtype, shape}}"),
        "x": p.Param(p.REQUIRED, p.non_empty_string, "the input feature"),
        "y": p.Param(p.REQUIRED, p.non_empty_string, "the target feature"),
        "weight": p.Param(None, p.optional_string, "a per-example sample-weight feature"),
        "task": p.Param("classification", p.one_of(*TASK_KINDS, kind="task"), "classification | regression"),
        "num_classes": p.Param(None, p.optional_positive_int, "classes (required for classification)"),
        "shuffle_buffer": p.Param(10000, p.positive_int, "records in the shuffle buffer (1: no shuffle)"),
        "normalize": _NORMALIZE,
        "labels": p.Param(None, p.optional_label_list, "the label value of each class id (in class-id order)"),
    },
}


DATASET_SUMMARIES = {
    "digits": f"scikit-learn's {DIGITS_EXAMPLES} real 8x8 handwritten digits, 10 classes (no download)",
    "synthetic_classification": "seeded Gaussian blobs, one per class",
    "synthetic_regression": "seeded linear or sine target with Gaussian noise (MSE)",
    "reversal": "random token sequences; the target is the sequence reversed (OpenSeq2Seq's toy task)",
    "npz": "your own arrays from a .npz file",
    "csv": "your own table from a .csv file",
    "tfrecord": "tf.train.Example records streamed from TFRecord files, sharded across ranks",
}

# The task kind of the datasets whose kind no parameter changes.
_FIXED_TASK_KINDS = {
    "digits": "classification",
    "synthetic_classification": "classification",
    "synthetic_regression": "regression",
    "reversal": "sequence",
}

# A dataset in a module of its own registers with one line here: the module holds its
# `PARAMS`, `SUMMARY`, `TASK_KIND` and `source(**params)`, the loader (TF-free, like this file).
DATASET_MODULES = {
    "synthetic_images": synthetic_images,
}
for _name, _module in DATASET_MODULES.items():
    DATASET_SPECS[_name] = _module.PARAMS
    DATASET_SUMMARIES[_name] = _module.SUMMARY
    _FIXED_TASK_KINDS[_name] = _module.TASK_KIND

DATASET_NAMES = tuple(DATASET_SPECS)

DATASETS = Registry("dataset", DATASET_NAMES)


def resolve(name):
    """The canonical dataset name (case and `_`/`-` ignored); raises UnknownNameError."""
    return DATASETS.resolve(name)


# ----- the user's own pipeline: {factory: "pkg.mod:make"} (opt_train.data.factory) -----

# The parameters opt-train reads itself; every other key goes to the user's function.
FACTORY_SPEC = {
    "task": p.Param("classification", p.one_of(*TASK_KINDS, kind="task"), "classification | regression"),
    "num_classes": p.Param(None, p.optional_positive_int, "classes (required for classification)"),
}


def is_factory(spec):
    """True when `spec` names the user's own pipeline: `{"factory": "package.module:function"}`."""
    return isinstance(spec, dict)


def _factory_errors(spec, params):

    try:
        split_spec(spec)
    except ValueError as error:
        return [error]
    if params is not None and not isinstance(params, dict):
        return [p.ParamError(None, "wrong_type", "data params must be a mapping", params)]
    params = params or {}
    ours = {key: params[key] for key in FACTORY_SPEC if key in params}
    errors = p.param_errors(FACTORY_SPEC, ours, "data factory")
    if not errors and ours.get("task", "classification") == "classification" and ours.get("num_classes") is None:
        errors.append(p.ParamError("num_classes", "missing", "is required for a classification task"))
    return errors


# The parameters that name files, and the rule each file must pass (checked once the
# parameters are otherwise right, so `validate` and `train` find a missing file alike).
# The config layer resolves these against the config file's folder (`opt_train.config.paths`).
PATH_PARAMS = {
    "npz": {"path": p.existing_file, "eval_path": p.existing_file},
    "csv": {"path": p.existing_file, "eval_path": p.existing_file},
    "tfrecord": {"train_files": p.matching_globs, "eval_files": p.matching_globs},
}


def _file_errors(name, params):
    errors = []
    for param, rule in PATH_PARAMS.get(name, {}).items():
        value = (params or {}).get(param)
        if value is None:
            continue
        try:
            rule(param, value)
        except p.ParamError as error:
            errors.append(error)
    return errors


def param_errors(name, params):
    """Every problem with `params` for dataset `name` (exceptions with `.param`); missing files last."""
    if is_factory(name):
        return _factory_errors(name, params)
    name = resolve(name)
    errors = p.param_errors(DATASET_SPECS[name], params, name)
    if not errors and name in _GENERATED_VALUES:
        errors += _memory_errors(name, params)
    if not errors and name == "tfrecord":
        errors = _tfrecord_errors(params)
    errors = errors or _file_errors(name, params)
    if not errors and name == "csv":
        errors = _csv_header_errors(params)
    return errors


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


def _csv_header_errors(params):
    """`label_column` against the header of `path` and `eval_path`, as reading them at train would judge it."""
    import os

    filled = {key: param.default for key, param in DATASET_SPECS["csv"].items()} | dict(params)
    for key in ("path", "eval_path"):
        if filled.get(key) is None:
            continue
        path = filled[key]
        try:
            first = csv_header(os.path.abspath(os.path.expanduser(path)), filled["delimiter"])
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # reading the file at train says what is wrong with it
        if not first:
            continue
        try:
            label_column_index(filled["label_column"], first if filled["header"] else None, len(first), path)
        except p.ParamError as error:
            return [error]
    return []


# Generated datasets live in memory: the numbers one example takes while it is made
# (float64 draws and the float32 copy kept), from the dataset's parameters.
_GENERATED_VALUES = {
    "synthetic_classification": lambda q: q["num_features"] + 1,
    "synthetic_regression": lambda q: q["num_features"] + 2 * q["num_targets"] + 16 * q["nonlinear"],
    "synthetic_images": lambda q: q["height"] * q["width"] * q["channels"] + 1,
}
_BYTES_PER_VALUE = 12  # a float64 draw and its float32 copy


def _memory_errors(name, params):
    """`num_examples` whose arrays cannot fit in this machine's memory (a traceback from NumPy otherwise)."""
    import os

    values = {key: param.default for key, param in DATASET_SPECS[name].items()} | dict(params or {})
    needed = values["num_examples"] * _GENERATED_VALUES[name](values) * _BYTES_PER_VALUE
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return []
    if needed <= memory:
        return []
    return [p.ParamError(
        "num_examples", "out_of_range",
        f"needs about {needed / 2**30:.3g} GiB to generate, more than this machine's {memory / 2**30:.3g} GiB",
        values["num_examples"],
    )]


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
    return errors


def check_params(name, params):
    """`params` for dataset `name` with defaults filled; raises the first problem."""
    errors = param_errors(name, params)
    if errors:
        raise errors[0]
    if is_factory(name):
        return {**{key: param.default for key, param in FACTORY_SPEC.items()}, **(params or {})}
    name = resolve(name)
    return p.check_params(DATASET_SPECS[name], params, name)


def task_kind(name, params=None):
    """The task kind dataset `name` yields (classification | regression | sequence)."""
    if is_factory(name):
        return (params or {}).get("task", "classification")
    name = resolve(name)
    if name in _FIXED_TASK_KINDS:
        return _FIXED_TASK_KINDS[name]
    return (params or {}).get("task", DATASET_SPECS[name]["task"].default)
