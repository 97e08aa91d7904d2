"""`{path: my_model.keras}`: a model the user saved with Keras, loaded with safe mode on unless asked."""

from __future__ import annotations

import os

import keras

from opt_train.errors import ParamError


def _shape(tensor):
    return tuple(tensor.shape)[1:]


def _fits(model_shape, data_shape):
    return len(model_shape) == len(data_shape) and all(
        m is None or m == d for m, d in zip(model_shape, data_shape)
    )


def load_saved_model(path, params, task):
    """The model in `path` (a .keras file; a config's relative path arrives resolved against its folder), uncompiled.

    Args:
        path: the `.keras` file.
        params: `{"safe_mode": bool}`; with safe mode on (the default) a file that would
            run code on loading (a Lambda layer's bytecode) is refused.
        task: the dataset's `Task`; the model must take its inputs and give its outputs.

    Raises:
        ValueError naming `model`: a missing or unreadable file, code refused by safe
        mode, or inputs / outputs that do not fit the data.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise ParamError.at(
            "model.path", "file_not_found", f"must name an existing .keras file; no such file {full}", path,
        )
    try:
        model = keras.saving.load_model(full, compile=False, safe_mode=params["safe_mode"])
    except Exception as error:  # whatever a user's file makes Keras raise, it is that file's fault
        reason = " ".join(str(error).split())
        raise ParamError.at("model", "out_of_range", f"`model` {path} cannot be loaded: {reason}") from None
    if not isinstance(model, keras.Model):
        raise ParamError.at(
            "model", "out_of_range", f"`model` {path} must hold a keras.Model. Received: {type(model).__name__}",
        )
    if getattr(model, "inputs", None) and len(model.outputs) == 1:
        expected_in, given_in = _shape(model.inputs[0]), tuple(task.input_shape)
        if len(model.inputs) != 1 or not _fits(expected_in, given_in):
            raise ParamError.at(
                "model", "out_of_range",
                f"`model` {path} takes inputs of shape {expected_in}; the data gives {given_in} per example",
            )
        width = _shape(model.outputs[0])[-1:]
        if width and width[0] is not None and width[0] != task.output_dim:
            raise ParamError.at(
                "model", "out_of_range",
                f"`model` {path} gives {width[0]} outputs per example; the data needs {task.output_dim}",
            )
    return model
