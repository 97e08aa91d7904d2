"""`{keras_application: Name}`: a `keras.applications` architecture shaped by the data, fresh or with Keras's weights."""

from __future__ import annotations

import inspect
import warnings

import keras

from opt_train.errors import ParamError
from opt_train.models.layers import output_head, task_input
from opt_train.models.registry import APPLICATION_FIXED_PARAMS, IMAGENET, application_image
from opt_train.suggest import UnknownNameError


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
    """`keras.applications.<name>(weights=..., input_shape=<the data's>)` with an output head for `task`.

    Without `include_top` (the default) the features are pooled (`pooling: avg`
    unless given) and a Dense layer gives the task's outputs; with `include_top:
    true` the architecture's own classifier gives `task.output_dim` logits.
    `weights` is what Keras takes: None (fresh), `imagenet` (Keras downloads the file
    into its cache once) or a weights file; Keras loads it into the architecture, so
    with `include_top: false` the new head alone starts fresh.

    Args:
        name: a `keras.applications` constructor name, e.g. "ResNet50".
        params: passed on to the constructor (`pooling`, `alpha`, `include_top`, `weights`, ...).
        task: the dataset's `Task`; its inputs must be images.
        regularizer: a Keras regularizer for the output head's kernel, or None.

    Raises:
        ValueError naming `model`: the architecture cannot take the data's image shape;
        naming `model_params.weights`: the weights do not fit, or `imagenet` cannot be downloaded.
    """
    constructor = _constructor(name)
    params = dict(params or {})
    _check_params(constructor, params)
    image = application_image(name, task)
    include_top = bool(params.pop("include_top", False))
    weights = params.pop("weights", None)
    kwargs = {"pooling": "avg", **params, "include_top": include_top, "weights": weights, "input_shape": image}
    if include_top:
        if task.kind != "classification":
            raise ParamError("include_top", "conflict", "needs a classification task", task.kind,
                             key="model_params.include_top")
        kwargs.pop("pooling")
        kwargs.update(classes=task.output_dim, classifier_activation=None)
    body = _construct(constructor, name, kwargs, image)
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


def _construct(constructor, name, kwargs, image):
    """The architecture, with its weights loaded by Keras; Keras's refusals located at their key."""
    weights = kwargs["weights"]
    try:
        with warnings.catch_warnings():
            # Keras 3.15's load_weights walks the functional model's internal containers too and warns
            # for each it finds no group for; the layers' weights themselves load (tests compare outputs).
            warnings.filterwarnings("ignore", message="Skipping nested container")
            return constructor(**kwargs)
    except ValueError as error:
        text = _first_line(error)
        if weights is not None and ("weights" in text or "load" in text.lower() or "layer" in text.lower()):
            # Keras's checks of pretrained weights (imagenet needs 1000 classes, a file of another
            # architecture or size) and load_weights's refusals.
            raise ParamError("weights", "conflict", f"do not fit {name} here: {text}", weights,
                             key="model_params.weights") from None
        raise ParamError.at("model", "out_of_range", f"`model` {name} cannot take this data's images {image}: {text}") from None
    except Exception as error:  # noqa: BLE001 - keras.utils.get_file raises a bare Exception on a failed download
        if weights != IMAGENET:
            raise
        raise ParamError(
            "weights", "file_not_found",
            f"Keras could not download {name}'s imagenet weights into its cache (KERAS_HOME, ~/.keras by default): "
            f"{_first_line(error)}; without a network, copy the file into the cache's models/ folder or give a "
            "weights file", weights, key="model_params.weights") from None


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
