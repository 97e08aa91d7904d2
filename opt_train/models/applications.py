"""`{keras_application: Name}`: a `keras.applications` architecture, untrained, shaped by the data."""

from __future__ import annotations

import inspect

import keras

from opt_train.errors import ParamError
from opt_train.models.layers import image_shape, output_head, task_input
from opt_train.models.registry import APPLICATION_FIXED_PARAMS
from opt_train.suggest import UnknownNameError


def application_image_shape(name, task):
    """(height, width, channels) the architecture sees; ValueError naming `model` when there is none."""
    shape = tuple(task.input_shape)
    image = image_shape(task)
    # A flat input becomes an image only when it holds features, not token ids.
    if image is None or (len(shape) not in (2, 3) and task.input_dtype != "float32"):
        raise ParamError.at(
            "model", "out_of_range",
            f"`model` {name} needs image inputs (height, width, channels) per example. Received: input_shape={shape}",
        )
    return image


def _constructor(name):
    constructor = getattr(keras.applications, name, None)
    if not callable(constructor):
        available = [n for n in dir(keras.applications) if n[:1].isupper()]
        raise UnknownNameError("keras application", name, available)
    return constructor


def _check_params(constructor, params):
    accepted = [n for n in inspect.signature(constructor).parameters if n not in APPLICATION_FIXED_PARAMS]
    for param in params:
        if param not in accepted:
            raise UnknownNameError(f"{constructor.__name__} parameter", param, accepted, param=param, code="unknown_key")


def build_application(name, params, task, regularizer=None):
    """`keras.applications.<name>(weights=None, input_shape=<the data's>)` with an output head for `task`.

    Without `include_top` (the default) the features are pooled (`pooling: avg`
    unless given) and a Dense layer gives the task's outputs; with `include_top:
    true` the architecture's own classifier gives `task.output_dim` logits. The
    weights are always freshly initialised: nothing is downloaded.

    Args:
        name: a `keras.applications` constructor name, e.g. "ResNet50".
        params: passed on to the constructor (`pooling`, `alpha`, `include_top`, ...).
        task: the dataset's `Task`; its inputs must be images.
        regularizer: a Keras regularizer for the output head's kernel, or None.

    Raises:
        ValueError naming `model`: the architecture cannot take the data's image shape.
    """
    constructor = _constructor(name)
    params = dict(params or {})
    _check_params(constructor, params)
    image = application_image_shape(name, task)
    include_top = bool(params.pop("include_top", False))
    kwargs = {"pooling": "avg", **params, "include_top": include_top, "weights": None, "input_shape": image}
    if include_top:
        if task.kind != "classification":
            raise ParamError("include_top", "conflict", "needs a classification task", task.kind,
                             key="model_params.include_top")
        kwargs.pop("pooling")
        kwargs.update(classes=task.output_dim, classifier_activation=None)
    try:
        body = constructor(**kwargs)
    except ValueError as error:  # Keras's own shape checks, e.g. "at least 32x32"
        raise ParamError.at("model", "out_of_range", f"`model` {name} cannot take this data's images {image}: {error}") from None
    inputs = task_input(task)
    hidden = inputs if tuple(task.input_shape) == image else keras.layers.Reshape(image, name="to_image")(inputs)
    features = body(hidden)
    if include_top:
        outputs = keras.layers.Activation("linear", dtype="float32", name="outputs")(features)
    else:
        if len(features.shape) > 2:  # pooling: null leaves a feature map
            features = keras.layers.Flatten(name="flatten")(features)
        outputs = output_head(features, task, regularizer)
    return keras.Model(inputs, outputs, name=name.lower())
