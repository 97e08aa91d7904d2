"""`build_model`: a built-in model by name, a Keras application, a saved model or the user's factory, for a task."""

from __future__ import annotations

from opt_train.models import registry
from opt_train.models.applications import build_application
from opt_train.models.factory import build_from_factory
from opt_train.models.saved import load_saved_model


def build_model(spec, params, task, regularizer=None):
    """A built keras.Model for `task`, following the global Keras dtype policy.

    Args:
        spec: a name of `MODEL_NAMES` (case-insensitive),
            `{"factory": "package.module:function"}`, `{"keras_application": "ResNet50"}`
            or `{"path": "my_model.keras"}`.
        params: the model's parameters (`model_params` in YAML); missing ones take
            the defaults of the model's row in `registry.MODELS`. A factory gets them as keywords.
        task: the dataset's `opt_train.data.Task`.
        regularizer: a Keras regularizer applied to the built-in models' kernels
            (its penalties appear in `model.losses`; the caller adds them to the
            loss), or None. Ignored for a factory model.

    Returns:
        A built model whose outputs are float32: logits for classification and
        sequence tasks, linear values for regression.

    Raises:
        UnknownNameError: an unknown model or parameter name.
        ValueError: a bad parameter value, a model that cannot serve the task, or a
            factory that cannot be imported or returns no keras.Model.
    """
    params = registry.check_params(spec, params)
    kind = registry.spec_kind(spec)
    if kind == "factory":
        return build_from_factory(spec, params, task)
    if kind == "keras_application":
        registry.check_task(spec, task.kind)
        return build_application(registry.resolve_application(spec[kind]), params, task, regularizer)
    if kind == "path":
        return load_saved_model(spec[kind], params, task)
    name = registry.resolve(spec)
    registry.check_task(name, task.kind)
    return registry.MODELS.load(name)(task, regularizer=regularizer, **params)


def fit_problem(model, task):
    """Why `model`'s outputs cannot serve `task` (e.g. 3 logits for 10 classes), or None.

    Found when the run is built rather than inside the first step, where it would be a
    shape error deep in the loss.
    """
    shape = getattr(model, "output_shape", None)
    if not isinstance(shape, tuple) or not shape or not all(isinstance(d, (int, type(None))) for d in shape):
        return None  # several outputs: the user's loss decides
    if shape[-1] is not None and shape[-1] != task.output_dim:
        return (
            f"the model's outputs have shape {shape}, but the {task.kind} data needs {task.output_dim} "
            f"per {'position' if task.kind == 'sequence' else 'example'}"
        )
    return None
