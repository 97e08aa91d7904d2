"""The built-in datasets as in-memory NumPy arrays, split into train and eval, with their Task.

Each loader takes the parameters of its row in `DATASETS` (defaults filled) and
returns a `Source`. Everything here is NumPy (and scikit-learn for `digits`): the
`tf.data` side lives in `opt_train.data.pipeline`.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import os
import zipfile

import numpy as np

from opt_train.data.arrays import Source, split
from opt_train.data.registry import DATASETS, csv_header, label_column_index
from opt_train.data.task import Task
from opt_train.errors import ParamError


def _file_error(param, path, code, message):
    """A problem with the file `param` names: filed at `data_params.<param>`, the file named in the message."""
    return ParamError(param, code, f"{path}: {message}", text=f"`{param}` {path}: {message}")


def _digits_arrays():
    """scikit-learn's digits as (pixels (1797, 64), labels), as `sklearn.datasets.load_digits` reads them.

    Read from the file scikit-learn ships, found without importing scikit-learn:
    `sklearn.datasets` imports scipy and pandas, 1.5 s of CPU in every process of a
    run on `digits`. Through `load_digits()` should a scikit-learn release move it.
    """
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec and spec.submodule_search_locations) or ():
        path = os.path.join(folder, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            table = np.loadtxt(path, delimiter=",")
            return table[:, :-1], table[:, -1].astype(int)
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.data, digits.target


def load_digits_source(eval_fraction, seed):
    """scikit-learn's 8x8 digits, pixels scaled from [0, 16] to [0, 1], flattened to 64."""
    pixels, labels = _digits_arrays()
    x = (pixels / 16.0).astype(np.float32)
    y = labels.astype(np.int32)
    train, held_out = split(x, y, eval_fraction, seed)
    task = Task("classification", (64,), 10, num_classes=10, image_shape=(8, 8, 1))
    return Source(train, held_out, task)


def synthetic_classification_source(
    num_examples, num_features, num_classes, noise, eval_fraction, seed
):
    """Gaussian blobs: class centres drawn N(0, 1), examples = centre + noise * N(0, 1)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, num_features))
    y = rng.integers(num_classes, size=num_examples).astype(np.int32)
    x = (centres[y] + noise * rng.normal(size=(num_examples, num_features))).astype(np.float32)
    train, held_out = split(x, y, eval_fraction, seed)
    task = Task("classification", (num_features,), num_classes, num_classes=num_classes)
    return Source(train, held_out, task)


def synthetic_regression_source(
    num_examples, num_features, num_targets, noise, nonlinear, eval_fraction, seed
):
    """x ~ N(0, 1); target x W + b (or sin(x W1) W2 when nonlinear) plus noise * N(0, 1)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(num_examples, num_features))
    if nonlinear:
        hidden = 16
        w1 = rng.normal(size=(num_features, hidden)) / np.sqrt(num_features)
        w2 = rng.normal(size=(hidden, num_targets)) / np.sqrt(hidden)
        target = np.sin(3.0 * x @ w1) @ w2
    else:
        w = rng.normal(size=(num_features, num_targets)) / np.sqrt(num_features)
        target = x @ w + rng.normal(size=(num_targets,))
    y = target + noise * rng.normal(size=target.shape)
    train, held_out = split(x.astype(np.float32), y.astype(np.float32), eval_fraction, seed)
    task = Task("regression", (num_features,), num_targets)
    return Source(train, held_out, task)


def reversal_source(vocab_size, seq_len, num_examples, eval_fraction, seed):
    """OpenSeq2Seq's toy task: uniform random token sequences; the target is each reversed."""
    rng = np.random.default_rng(seed)
    x = rng.integers(vocab_size, size=(num_examples, seq_len)).astype(np.int32)
    y = np.ascontiguousarray(x[:, ::-1])
    train, held_out = split(x, y, eval_fraction, seed)
    task = Task("sequence", (seq_len,), vocab_size, input_dtype="int32", vocab_size=vocab_size)
    return Source(train, held_out, task)


# ----- the user's own files -----


def _existing(path, param):
    from opt_train.params import existing_file

    existing_file(param, path)  # a config's relative paths arrive resolved against its folder
    return os.path.abspath(os.path.expanduser(path))


def _read_npz(path, x_key, y_key, param):
    try:
        with np.load(_existing(path, param), allow_pickle=False) as arrays:
            for name, key in (("x_key", x_key), ("y_key", y_key)):
                if key not in arrays.files:
                    raise ParamError(name, "unknown_name",
                                     f"must name an array in {path}; it holds {sorted(arrays.files)}", key)
            x, y = arrays[x_key], arrays[y_key]
    except ParamError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, ValueError) as error:
        # A truncated or foreign file fails inside NumPy's reader; say which file.
        raise _file_error(param, path, "wrong_type",
                          f"cannot be read as .npz ({type(error).__name__}: {error})") from None
    for key, array in ((x_key, x), (y_key, y)):
        if array.ndim == 0:
            raise _file_error(param, path, "wrong_type", f"array '{key}' is a scalar; it must hold one row per example")
    if len(x) != len(y):
        raise _file_error(param, path, "conflict",
                          f"`{x_key}` and `{y_key}` must have as many rows. Received: {len(x)} and {len(y)}")
    _check_finite(x, param, path, f"array '{x_key}'")
    return x, y


def _check_finite(array, param, path, what=None, columns=None):
    """A NaN or inf in the input would train into NaN weights with exit 0: refuse it when read."""
    if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.integer):
        return
    bad = ~np.isfinite(array)
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), array.shape)
        column = ""
        if columns is not None and len(index) > 1:
            column = f", column {columns[index[1]]!r}"
        where = f"{what} " if what else ""
        raise _file_error(param, path, "out_of_range",
                          f"{where}holds NaN or inf (first at row {index[0]}{column}; {int(bad.sum())} values in all)")


def _read_csv(path, label_column, header, delimiter, param):
    try:
        with open(_existing(path, param), newline="") as handle:
            rows = [row for row in csv.reader(handle, delimiter=delimiter) if row]
    except (UnicodeDecodeError, csv.Error) as error:
        raise _file_error(param, path, "wrong_type", f"cannot be read as CSV ({type(error).__name__}: {error})") from None
    names = rows.pop(0) if header and rows else None
    if not rows:
        raise _file_error(param, path, "out_of_range", "no data rows")
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise _file_error(param, path, "wrong_type", f"every row must have {width} fields")
    column = label_column_index(label_column, None if names is None else [n.strip() for n in names], width, path)
    labels = np.array([row[column].strip() for row in rows])
    try:
        features = np.array([[float(v) for i, v in enumerate(row) if i != column] for row in rows])
    except ValueError as error:
        raise _file_error(param, path, "wrong_type", f"feature columns must be numbers ({error})") from None
    feature_names = [
        (names[i].strip() if names else i) for i in range(width) if i != column
    ]
    _check_finite(features, param, path, columns=feature_names)
    return features, labels


def _class_labels(train_y, eval_y, num_classes):
    """Labels as int32 class ids and the vocabulary: integers as they are, anything else mapped by sorted value.

    Returns `(ids_train, ids_eval, num_classes, labels)`; `labels[i]` is the value class `i`
    was written as (an int, or a str), so predictions can be given back in the user's terms.
    """
    both = np.concatenate([np.ravel(train_y), np.ravel(eval_y)])
    try:
        numeric = both.astype(np.float64)
        integral = np.all(numeric == np.round(numeric)) and numeric.min() >= 0
    except ValueError:
        integral = False
    if integral:
        ids_train, ids_eval = (np.ravel(a).astype(np.float64).astype(np.int32) for a in (train_y, eval_y))
        values = None
    else:
        values = np.unique(both.astype(str))
        ids_train, ids_eval = (
            np.searchsorted(values, np.ravel(a).astype(str)).astype(np.int32) for a in (train_y, eval_y)
        )
    found = int(max(ids_train.max(), ids_eval.max())) + 1
    if num_classes is None:
        num_classes = found
    elif found > num_classes:
        raise ParamError("num_classes", "out_of_range", f"must exceed every label (the largest is {found - 1})",
                         num_classes)
    if values is None:
        labels = tuple(range(num_classes))
    else:  # classes beyond the values seen (a larger num_classes) answer with their id
        labels = tuple(str(v) for v in values) + tuple(str(i) for i in range(len(values), num_classes))
    return ids_train, ids_eval, num_classes, labels


def _user_source(train, held_out, task_kind, num_classes):
    """A Source from user arrays: features float32, labels by task kind."""
    (x_train, y_train), (x_eval, y_eval) = train, held_out
    x_train, x_eval = (np.asarray(a, dtype=np.float32) for a in (x_train, x_eval))
    if x_train.ndim == 1:
        x_train, x_eval = x_train[:, None], x_eval[:, None]
    if x_train.shape[1:] != x_eval.shape[1:]:
        raise ParamError("eval_path", "conflict", "must hold inputs of the same shape per example as `path`. "
                         f"Received: {x_train.shape[1:]} and {x_eval.shape[1:]}")
    input_shape = tuple(int(d) for d in x_train.shape[1:])
    image_shape = _image_shape(input_shape)
    if task_kind == "regression":
        y_train, y_eval = (np.asarray(a, dtype=np.float32).reshape(len(a), -1) for a in (y_train, y_eval))
        task = Task("regression", input_shape, int(y_train.shape[1]), image_shape=image_shape)
    else:
        y_train, y_eval, num_classes, labels = _class_labels(y_train, y_eval, num_classes)
        task = Task("classification", input_shape, num_classes, num_classes=num_classes, image_shape=image_shape,
                    labels=labels)
    return Source((x_train, y_train), (x_eval, y_eval), task)


def _image_shape(input_shape):
    """(h, w, c) for image-like inputs: (h, w) gains a channel; flat and other shapes get None."""
    if len(input_shape) == 2:
        return input_shape + (1,)
    if len(input_shape) == 3:
        return input_shape
    return None


def _train_and_eval(read, path, eval_path, eval_fraction, seed):
    x, y = read(path, "path")
    if eval_path is not None:
        return (x, y), read(eval_path, "eval_path")
    return split(x, y, eval_fraction, seed)


def npz_source(path, x_key, y_key, task, num_classes, eval_path, eval_fraction, seed):
    """Arrays `x_key` / `y_key` of a .npz file; eval from `eval_path` or a seeded split."""
    def read(file, param):
        return _read_npz(file, x_key, y_key, param)

    train, held_out = _train_and_eval(read, path, eval_path, eval_fraction, seed)
    return _user_source(train, held_out, task, num_classes)


def csv_source(path, label_column, header, delimiter, task, num_classes, eval_path, eval_fraction, seed):
    """A numeric table with one label column; eval from `eval_path` or a seeded split."""
    headers = {}  # each file's, read once `_read_csv` has found it readable

    def read(file, param):
        features, labels = _read_csv(file, label_column, header, delimiter, param)
        if header:
            headers[param] = tuple(csv_header(_existing(file, param), delimiter))
        if param == "eval_path" and header:
            features = _in_train_order(features, headers["path"], headers[param], label_column, file)
        return features, labels

    train, held_out = _train_and_eval(read, path, eval_path, eval_fraction, seed)
    source = _user_source(train, held_out, task, num_classes)
    if not header:
        return source
    return source._replace(task=dataclasses.replace(source.task, columns=headers["path"]))


def _in_train_order(features, train_header, header, label_column, path):
    """`eval_path`'s feature columns in the order of `path`'s header, found by name (any order)."""
    def feature_names(names):
        label = label_column_index(label_column, list(names), len(names), path)
        return [name for index, name in enumerate(names) if index != label]

    wanted, have = feature_names(train_header), feature_names(header)
    if sorted(wanted) != sorted(have):
        missing, extra = [n for n in wanted if n not in have], [n for n in have if n not in wanted]
        raise _file_error("eval_path", path, "conflict",
                          f"must hold the feature columns of `path` ({', '.join(wanted)}); "
                          f"missing: {', '.join(missing) or 'none'}; not in `path`: {', '.join(extra) or 'none'}")
    return features[:, [have.index(name) for name in wanted]]


def load_source(name, params):
    """The Source of dataset `name` (canonical) with checked, defaults-filled `params`.

    `normalize` is the pipeline's (`opt_train.data.pipeline`): a Source holds the data as read.
    """
    params = {key: value for key, value in params.items() if key != "normalize"}
    return DATASETS.load(name)(**params)
