"""The lines a run prints about how it was built: weights, batch normalization, XLA on a mesh, memory, groups.

Each is a fact the config alone does not show, or a way the run differs from what the same
config meant elsewhere (OpenSeq2Seq's towers, XLA), said once before the first step.
"""

from __future__ import annotations

import keras


def of_model(config, backend, model, with_train_op=True):
    """The notes on the built model (the memory plan's lines only for a run that trains)."""
    from opt_train.models.registry import weights_note

    notes = [weights_note(config.model, config.model_params), batch_norm_note(config, backend, model),
             jit_note(config, backend), *(memory_notes(config, model) if with_train_op else ())]
    return tuple(filter(None, notes))


def of_groups(config, optimizer):
    """One line per optimizer group: the variables it took, its optimizer and rate (none without groups)."""
    describe = getattr(optimizer, "describe", None)
    if not config.optimizer_groups or describe is None:
        return ()
    return tuple(f"{label}: {count} variable{'s' if count != 1 else ''}, {name}"
                 + (f", lr x {multiplier:g}" if multiplier != 1.0 else "")
                 for label, count, name, multiplier in describe())


def memory_notes(config, model):
    """The memory plan's lines for a model built by code (a factory, a Keras application), sized now it is built.

    A built-in model's plan is `validate`'s (`opt_train.config.memory`), known before TensorFlow starts;
    under a mesh it is checked here too, for what `train` would otherwise take silently (a `layouts`
    key that is the first match of no variable leaves them replicated): a ConfigError at `layouts`.
    """
    from opt_train.config.memory import plan_lines

    if isinstance(config.model, str) and not config.mesh:
        return ()
    lines = tuple(plan_lines(config, [(v.path, tuple(v.shape), v.dtype, v.trainable) for v in model.weights]))
    return () if isinstance(config.model, str) else lines


def jit_note(config, backend):
    """One line when `jit_compile` is not XLA's: DTensor runs a step on a mesh of CPU devices without XLA, else None.

    A DTensor step traced with jit_compile=True on CPU devices raised TensorFlow's own error for an
    out-of-range gather where XLA returns a clamped value: DTensor expands it and runs it itself.
    """
    if not config.jit_compile or backend.mesh is None or backend.mesh.device_type() != "CPU":
        return None
    return ("jit_compile: on a mesh of CPU devices DTensor runs the step itself, without XLA "
            "(the numbers are the same as with it)")


def batch_norm_note(config, backend, model):
    """One line when replicas normalize their own batches (not one process's global batch), else None.

    On a mesh there are no replicas: DTensor takes a layer's moments over the whole batch.
    """
    if backend.size <= 1 or backend.mesh is not None:
        return None
    local = [layer for layer in _all_layers(model)
             if isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized]
    if not local:
        return None
    # Keras' synchronized batch normalization reduces its moments through tf.distribute's
    # replica context: Horovod ranks have none, so there it stays local.
    remedy = ("; keras.layers.BatchNormalization(synchronized=True) in your model uses the global batch"
              if backend.strategy is not None else "")
    return (
        f"{len(local)} BatchNormalization layer(s) normalize each replica's own batch_size_per_gpu="
        f"{config.batch_size_per_gpu} examples, not the global batch (as OpenSeq2Seq's towers and "
        f"Horovod ranks do){remedy}"
    )


def _all_layers(layer):
    for inner in getattr(layer, "layers", ()):
        yield inner
        yield from _all_layers(inner)
