"""Loading the user's own model from `{factory: "package.module:function"}`."""

from __future__ import annotations

import inspect

import keras

from opt_train import usercode
from opt_train.errors import ParamError
from opt_train.usercode import split_spec

KEY = "model.factory"


def load_factory(spec):
    """The function a factory spec names; a `UserCodeError` naming the spec when it cannot be imported."""
    module_name, function_name = split_spec(spec)
    try:
        return usercode.load(f"{module_name}:{function_name}", KEY)
    except usercode.UserCodeError as error:
        raise _named(spec, error) from None


def _named(spec, error):
    return usercode.UserCodeError(KEY, f"Model factory '{spec['factory']}': {error.message}", error.details)


def _accepts_task(function):
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "task" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def build_from_factory(spec, params, task):
    """Calls the factory as `fn(task=task, **params)` (or `fn(**params)` when it takes no `task`).

    Returns the built keras.Model; a model not yet built, or built without weights (a
    subclassed model's `build(shape)` without a `build` method of its own only marks it
    built), is called once on a zero batch of the task's input shape.
    """
    function = load_factory(spec)
    target = spec["factory"]
    kwargs = dict(params or {})
    problem = usercode.call_problem(target, usercode.signature(function), kwargs, supplied=("task",))
    if problem:
        param, code, message = problem
        raise ParamError.at(f"model_params.{param}", code, message, kwargs.get(param))
    if _accepts_task(function):
        kwargs["task"] = task
    try:
        model = usercode.call(_bind(function, kwargs, target, params), KEY, **kwargs)
    except usercode.UserCodeError as error:
        raise _named(spec, error) from None
    if not isinstance(model, keras.Model):
        raise ParamError.at(KEY, "wrong_type", f"Model factory '{target}' must return a keras.Model. "
                            f"Received: {type(model).__name__}")
    if not model.built or not model.weights:
        try:
            model(keras.ops.zeros((1,) + tuple(task.input_shape), dtype=task.input_dtype))
        except Exception as error:  # the user's layers met the data's input shape
            raise _named(spec, usercode.failure(KEY, f"calling the model on the input shape {task.input_shape}", error)) from None
    return model


def _bind(function, kwargs, target, params):
    """`function`, after checking that it accepts `kwargs` (a mismatch is the config's, not a crash)."""
    try:
        inspect.signature(function).bind(**kwargs)
    except TypeError as error:
        raise ParamError.at("model_params", "unknown_key",
                            f"Model factory '{target}' rejected its params {sorted(params or {})}: {error}") from None
    except ValueError:  # no signature to check (a builtin): let the call decide
        pass
    return function
