"""Models out: `logdir/export/` (model.keras and a serving SavedModel), from a run or a checkpoint."""

from __future__ import annotations

import contextlib
import os
import shutil

KERAS_FILE = "model.keras"
SAVED_MODEL_DIR = "saved_model"


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
