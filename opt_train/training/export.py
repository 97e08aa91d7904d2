"""Models out: `logdir/export/` (model.keras and a serving SavedModel), from a run or a checkpoint, and predictions."""

from __future__ import annotations

import contextlib

import io
import os
import shutil

import numpy as np

KERAS_FILE = "model.keras"
SAVED_MODEL_DIR = "saved_model"
SIGNATURE = "serving_default"


class CheckpointNotFound(ValueError):
    """No checkpoint where one was asked for (a bad `--checkpoint`, or a logdir never trained)."""


def export_dir(config):
    return os.path.join(config.logdir, "export")


def serving_outputs(task, outputs):
    """The serving signature's outputs: `outputs` (what evaluation scores), plus `classes` when classifying.

    With a label vocabulary (`task.labels`) also `labels`: each class id as the data wrote it.
    """
    import tensorflow as tf

    result = {"outputs": outputs}
    if task.kind in ("classification", "sequence"):
        result["classes"] = tf.argmax(outputs, axis=-1, output_type=tf.int32)
        if task.labels is not None and task.kind == "classification":
            result["labels"] = tf.gather(tf.constant(list(task.labels)), result["classes"])
    return result


def serving_model(model, task):
    """`model` taking raw inputs: behind the data's standardisation layer when the data had one.

    The run trained on standardised inputs; the exported model and `predict` take rows as
    the user has them, so the same statistics go in front as a Keras `Normalization` layer.
    """
    if task.normalization is None:
        return model
    import keras

    from opt_train.data.normalization import keras_layer

    inputs = keras.Input(tuple(task.input_shape), dtype=task.input_dtype, name="inputs")
    outputs = model(keras_layer(task.normalization, task.input_shape)(inputs))
    return keras.Model(inputs, outputs, name=f"{model.name}_on_raw_inputs")


def export_model(model, task, directory):
    """Writes `directory/model.keras` (no optimizer) and `directory/saved_model/` (signature `serving_default`).

    The signature takes `inputs` (a batch of the task's input shape and dtype, raw:
    the data's standardisation is the models' first layer) and returns `outputs`
    (float32: logits, or regression values) and, for classification and sequence tasks,
    `classes` (their argmax), plus `labels` when the data had a label vocabulary.
    `directory/data.json` holds that vocabulary and the statistics. Each artifact is
    written beside its final place and then renamed, so a reader never sees half of one.

    Returns:
        `{"keras": path, "saved_model": path, "data": path}`.
    """
    import keras
    import tensorflow as tf

    from opt_train.data import card

    os.makedirs(directory, exist_ok=True)
    model = serving_model(model, task)
    # The SavedModel first: it needs no layer configs, so a model Keras cannot serialize still ships.
    archive = keras.export.ExportArchive()
    archive.track(model)
    spec = tf.TensorSpec((None,) + tuple(task.input_shape), task.input_dtype, name="inputs")
    archive.add_endpoint(
        "serve", lambda inputs: serving_outputs(task, model(inputs, training=False)), input_signature=[spec]
    )
    saved_path = os.path.join(directory, SAVED_MODEL_DIR)
    _replace_directory(saved_path, lambda path: archive.write_out(path, verbose=False))

    keras_path = os.path.join(directory, KERAS_FILE)
    # Keras insists on the .keras suffix, so the temporary name keeps it.
    temporary = os.path.join(directory, f".tmp-{KERAS_FILE}")
    try:
        # The loop trains with its own optimizer objects; the model itself is never compiled.
        model.save(temporary)
        os.replace(temporary, keras_path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return {"keras": keras_path, "saved_model": saved_path, "data": card.write(directory, task)}


def export_at_end(run, say):
    """The end-of-run export to `logdir/export` (rank 0); a model Keras cannot save costs only its export.

    The run's checkpoints are already written, so a failing export is reported through
    `say` instead of failing a run that trained.
    """
    from opt_train.training.evaluation import averaged_weights, weights_note

    directory = export_dir(run.config)
    try:
        # With use_ema, what ships is the moving average of the weights, as Keras's fit() leaves it.
        with averaged_weights(getattr(run.train_op, "optimizer", None)) as averaged, _unsharded(run):
            export_model(run.model, run.data.task, directory)
    except (NotImplementedError, TypeError, ValueError) as error:  # e.g. a custom layer without get_config
        say(f"export to {directory} incomplete: {' '.join(str(error).split())[:300]}")
        return None
    written = f"{os.path.join(directory, KERAS_FILE)} and {os.path.join(directory, SAVED_MODEL_DIR)}/"
    say(f"exported {written}{weights_note(averaged)}")
    return directory


def _unsharded(run):
    """Within: a mesh run's model holds whole, ordinary variables (what ships is never sharded)."""
    if run.backend.mesh is None:
        return contextlib.nullcontext()
    return run.backend.unsharded(run.model.variables)


def _replace_directory(path, write):
    """`write(temporary)`, then the temporary directory takes `path`'s place."""
    temporary, old = f"{path}.tmp", f"{path}.old"
    for leftover in (temporary, old):
        shutil.rmtree(leftover, ignore_errors=True)
    write(temporary)
    if os.path.exists(path):
        os.replace(path, old)
    os.replace(temporary, path)
    shutil.rmtree(old, ignore_errors=True)


def restore_model(config, checkpoint=None, raw_weights=False, report=None):
    """The config's run with its model's weights from `checkpoint` (default: logdir's latest).

    With `use_ema` the model holds the checkpoint's moving averages of the weights (as
    the run's own export does), unless `raw_weights`; `report(line)` then hears
    `using the EMA weights of CHECKPOINT`.

    Returns:
        `(run, restored_path)`.

    Raises:
        CheckpointNotFound: `checkpoint` names no checkpoint (a prefix, or a directory
            holding some), or the logdir has none.
    """
    from opt_train.training.evaluation import finalize_averages, restore_run

    run, path, optimizer = restore_run(config, _checkpoint_path(config, checkpoint), raw_weights)
    if finalize_averages(optimizer) and report is not None:
        report(f"using the EMA weights of {path}")
    return run, path


def _checkpoint_path(config, checkpoint):
    import tensorflow as tf

    if checkpoint is None:
        directory = os.path.join(config.logdir, "checkpoints")
        latest = tf.train.latest_checkpoint(directory)
        if latest is None:
            raise CheckpointNotFound(f"no checkpoint in {directory}; train first or give --checkpoint")
        return latest
    if os.path.isdir(checkpoint):
        latest = tf.train.latest_checkpoint(checkpoint)
        if latest is None:
            raise CheckpointNotFound(f"--checkpoint: no checkpoint in directory {checkpoint}")
        return latest
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise CheckpointNotFound(f"--checkpoint: no checkpoint at {checkpoint} (expected {checkpoint}.index)")
    return checkpoint


def export_checkpoint(config, checkpoint=None, out=None, raw_weights=False, report=None):
    """`opt-train export`: the model of `checkpoint` exported to `out` (default logdir/export).

    With `use_ema`: its moving averages of the weights, unless `raw_weights` (see `restore_model`).
    """
    from opt_train.training.builder import graph_refusals

    run, restored = restore_model(config, checkpoint, raw_weights, report)
    with graph_refusals(config):
        paths = export_model(run.model, run.data.task, out or export_dir(config))
    return {"checkpoint": restored, **paths}


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
