"""`opt-train predict`: a checkpoint's model run over raw examples from a .npz or .csv, its outputs written as .npz or .csv."""

from __future__ import annotations

import io
import os

import numpy as np

from opt_train.training.export import restore_model, serving_model, serving_outputs


class PredictInputError(ValueError):
    """`--input` cannot be read or does not fit the model."""


def check_input_path(path):
    """Raises PredictInputError unless `path` is an existing .npz or .csv file."""
    if not path.endswith((".npz", ".csv")):
        kind = "TFRecord files are not read yet" if path.endswith((".tfrecord", ".tfrecords")) else "expected .npz or .csv"
        raise PredictInputError(f"--input: {path}: {kind}; give a .npz file with an array `x`, or a .csv")
    if not os.path.isfile(path):
        raise PredictInputError(f"--input: no such file {os.path.abspath(path)}")


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_feature_columns(task, label_column):
    """`(feature names in the model's order, the label's name)` from the training header, or (None, None)."""
    if task.columns is None:
        return None, None
    from opt_train.data.registry import label_column_index

    header = list(task.columns)
    label = label_column_index(label_column, header, len(header), "the training data")
    return [name for index, name in enumerate(header) if index != label], header[label]


def _read_csv_rows(path, task, data_params, report=None):
    """The feature columns of a .csv, in the model's order.

    With a header row and a training header (`task.columns`), columns are found by name,
    in any order (the label column, when present, is left out); a missing or an unknown
    column is a PredictInputError naming it. A file whose first row is all numbers has no
    header: its columns are taken by position, as the training file's, and `report` hears so.
    """
    import csv

    delimiter = data_params.get("delimiter", ",")
    label_column = data_params.get("label_column", -1)
    width = int(np.prod(task.input_shape))
    try:
        with open(path, newline="") as handle:
            rows = [[field.strip() for field in row] for row in csv.reader(handle, delimiter=delimiter) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise PredictInputError(f"--input: {path} cannot be read ({error})") from None
    if not rows:
        raise PredictInputError(f"--input: {path} has no rows")
    features, label = _csv_feature_columns(task, label_column)
    if features is None:
        has_header = data_params.get("header", True)
    else:  # a row naming a training column, or with words beside the one a label may hold, is a header
        first = rows[0]
        has_header = any(field in task.columns for field in first) or \
            sum(not _is_number(field) for field in first) > (len(first) == width + 1)
    names = rows.pop(0) if has_header else None
    if not rows:
        raise PredictInputError(f"--input: {path} has no data rows")
    if names is not None and features is not None:
        missing = [name for name in features if name not in names]
        if missing:
            raise PredictInputError(f"--input: {path} lacks the column{'s' * (len(missing) > 1)} "
                                    f"{', '.join(map(repr, missing))} the model was trained on "
                                    f"(it takes {', '.join(features)}, by name in any order)")
        extra = [name for name in names if name not in features and name != label]
        if extra:
            raise PredictInputError(f"--input: {path} has column{'s' * (len(extra) > 1)} "
                                    f"{', '.join(map(repr, extra))} the model was not trained on "
                                    f"(it takes {', '.join(features)}; the label column {label!r} may be there too)")
        picked = [names.index(name) for name in features]
    else:
        if len(rows[0]) not in (width, width + 1):
            raise PredictInputError(f"--input: {path} has {len(rows[0])} columns; the model takes {width} "
                                    "(and the label column may be there too)")
        drop = None
        if len(rows[0]) == width + 1:  # the label column is there too: where the training file had it
            if label is not None:
                drop = list(task.columns).index(label)
            elif isinstance(label_column, str) and names and label_column in names:
                drop = names.index(label_column)
            else:
                drop = label_column % (width + 1) if isinstance(label_column, int) else width
        picked = [index for index in range(len(rows[0])) if index != drop]
        if names is None and features is not None and report is not None:
            report(f"--input: {path} has no header row: its columns are taken by position, as the training "
                   f"data's ({', '.join(features)})")
    try:
        inputs = np.array([[float(row[index]) for index in picked] for row in rows], dtype=np.float64)
    except (ValueError, IndexError) as error:
        raise PredictInputError(f"--input: {path}: every row must hold a number in each feature column ({error})") \
            from None
    bad = ~np.isfinite(inputs)
    if bad.any():
        row, column = np.unravel_index(int(np.argmax(bad)), inputs.shape)
        raise PredictInputError(f"--input: {path} holds NaN or inf (first at row {row}, feature {column})")
    return inputs


def read_inputs(path, task, key=None, data_params=None, report=None):
    """The inputs of a .npz file (`key`, else `x`, else its only array) or a .csv (raw rows); checked against `task`.

    A .csv's columns are mapped by the training header's names (see `_read_csv_rows`).
    """
    check_input_path(path)
    name = "rows"
    if path.endswith(".csv"):
        inputs = _read_csv_rows(path, task, dict(data_params or {}), report)
    else:
        try:
            with np.load(path, allow_pickle=False) as arrays:
                names = list(arrays.files)
                name = key or ("x" if "x" in names else (names[0] if len(names) == 1 else None))
                inputs = arrays[name] if name in names else None
        except (OSError, ValueError) as error:  # not a zip, or object arrays refused without pickle
            raise PredictInputError(f"--input: {path} is not a readable .npz file ({error})") from None
        if inputs is None:
            raise PredictInputError(f"--input: {path} has no array `{key or 'x'}`; it holds {sorted(names)}")
    expected = tuple(task.input_shape)
    if expected == (1,) and inputs.ndim == 1:  # one feature per example, given as a flat array
        inputs = inputs[:, None]
    if tuple(inputs.shape[1:]) != expected:
        raise PredictInputError(
            f"--input: `{name}` has examples of shape {tuple(inputs.shape[1:])}; the model takes {expected}"
        )
    return inputs.astype(task.input_dtype)


def _npz_bytes(results):
    buffer = io.BytesIO()
    np.savez(buffer, **results)
    return buffer.getvalue()


def _csv_bytes(results):
    """One row per example: `class` and `label` when classifying (the user's value beside the id), else the outputs."""
    import csv

    columns = _csv_columns(results)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(list(columns))
    writer.writerows(zip(*(column.tolist() for column in columns.values())))
    return text.getvalue().encode()


def _csv_columns(results):
    """`{column name: values}` of the .csv `predict` writes."""
    if "classes" in results and results["classes"].ndim == 1:
        columns = {"class": results["classes"]}
        if "labels" in results:
            columns["label"] = results["labels"]
    else:
        outputs = results.get("outputs", np.zeros((0, 0)))
        flat = outputs.reshape(len(outputs), -1)
        columns = {f"output_{index}": flat[:, index] for index in range(flat.shape[1])}
    return columns


def _plain(array):
    """A string tensor's bytes as text, so the .npz loads without pickle."""
    if array.dtype == object:
        return np.char.decode(array.astype(bytes), "utf-8")
    return array


def predict(config, input_path, output_path, checkpoint=None, raw_weights=False, report=None):
    """`opt-train predict`: the model of `checkpoint` run over `input_path`'s examples, written to `output_path`.

    `input_path` holds raw inputs (the model standardises them as the run did). The .npz
    written holds `outputs` (what the evaluation scores: logits or regression values)
    and, when classifying, `classes` and, with a label vocabulary, `labels` (the
    user's own label values). An `output_path` ending in .csv gets one row per example
    instead: `class,label` (or the outputs of a regression). With `use_ema`, the moving
    averages of the weights predict, unless `raw_weights`.

    Returns:
        `{"checkpoint", "examples", "output": path written, "holds": what it holds, in words,
        "arrays": {name: shape}}`.
    """
    import tensorflow as tf

    from opt_train.atomic import write_bytes
    from opt_train.training.builder import graph_refusals

    check_input_path(input_path)  # before the model is built: a typo fails at once
    run, restored = restore_model(config, checkpoint, raw_weights, report)
    task = run.data.task
    inputs = read_inputs(input_path, task, key=config.data_params.get("x_key"), data_params=config.data_params,
                         report=report)
    batch = config.eval_batch_size or config.batch_size_per_gpu
    # A compiled inference call, as the evaluation's (without AutoGraph too), so predictions match what it scores.
    model = serving_model(run.model, task)
    step = tf.function(lambda x: serving_outputs(task, model(x, training=False)), reduce_retracing=True,
                       autograph=False)
    with graph_refusals(config):
        pieces = [step(tf.constant(inputs[start:start + batch])) for start in range(0, len(inputs), batch)]
    results = {name: _plain(np.concatenate([piece[name].numpy() for piece in pieces])) for name in pieces[0]} if pieces else {}
    as_csv = output_path.endswith(".csv")
    write_bytes(output_path, _csv_bytes(results) if as_csv else _npz_bytes(results))
    return {"checkpoint": restored, "examples": int(len(inputs)), "output": os.path.abspath(output_path),
            "holds": _holds(results, task, as_csv, len(inputs)),
            "arrays": {name: list(value.shape) for name, value in results.items()}}


# What each array `predict` writes is, for the line that says what the file holds.
_MEANINGS = {"classes": "class ids", "labels": "your label values"}


def _holds(results, task, as_csv, examples):
    """What `predict` wrote, in words: the .csv's columns, or each .npz array with its shape and meaning."""
    if as_csv:
        return f"{examples} rows of {','.join(_csv_columns(results))}"
    outputs = "logits" if task.kind != "regression" else "predicted values"
    if not task.from_logits and task.kind != "regression":
        outputs = "probabilities"
    parts = [f"{name} {tuple(value.shape)} ({_MEANINGS.get(name, outputs)})" for name, value in results.items()]
    return f"{examples} examples: " + ", ".join(parts)
