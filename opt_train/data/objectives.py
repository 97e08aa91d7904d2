"""Losses and metrics by name from Keras's registries (or the user's loss function), as a Task uses them.

A named loss is the Keras loss class with `loss_params`; `from_logits` defaults to
true where the class takes it, because opt-train's models output logits. Every loss
runs in float32 on float32 predictions whatever the dtype policy, with Keras's
"sum_over_batch_size" reduction: sample weights multiply each example's loss and
the sum is divided by the batch size, so averaged micro-batches or ranks equal one
big batch.
"""

from __future__ import annotations

import dataclasses
import inspect

import keras

from opt_train import usercode
from opt_train.data.objective_names import resolve_loss, resolve_metric
from opt_train.errors import ParamError
from opt_train.suggest import UnknownNameError


def _loss_classes():
    """Keras loss function -> the Loss class that wraps it (`mse` and `mean_squared_error` alike)."""
    classes = {}
    for value in vars(keras.losses).values():
        if inspect.isclass(value) and issubclass(value, keras.losses.Loss):
            try:
                fn = getattr(value(), "fn", None)
            except TypeError:  # a class that needs arguments wraps nothing we look up by name
                continue
            if fn is not None:
                classes[fn] = value
    return classes


def _check_params(callable_, params, what):
    accepted = inspect.signature(callable_).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return
    for key in params:
        if key not in accepted:
            error = UnknownNameError(f"{what} parameter", key, [k for k in accepted if k != "self"])
            error.param = key
            raise error


class _FunctionLoss(keras.losses.Loss):
    """The user's `fn(y_true, y_pred, **params)`, reduced and weighted by the Keras Loss base class."""

    def __init__(self, fn, params):
        super().__init__(name=fn.__name__, dtype="float32")
        self.fn, self.params = fn, params

    def call(self, y_true, y_pred):
        return self.fn(y_true, y_pred, **self.params)


def make_loss(spec, params, from_logits=True):
    """A `keras.losses.Loss` from a Keras name or `{"factory": "pkg.mod:fn"}`, with `params`.

    A factory names the loss function itself, `fn(y_true, y_pred, **params)`, which
    returns a loss per example (or per element); Keras's Loss base class reduces it.
    `from_logits` is the default of a class that takes it (False: the model outputs
    probabilities); `params` may still set it.
    """
    params = dict(params or {})
    if isinstance(spec, dict):
        fn = usercode.load(":".join(usercode.split_spec(spec)), "loss.factory")
        _check_params(fn, params, "loss")
        return _FunctionLoss(fn, params)
    fn = keras.losses.get(resolve_loss(spec))
    cls = _loss_classes().get(fn)
    _check_params(cls.__init__, params, "loss")
    if "from_logits" in inspect.signature(cls.__init__).parameters:
        params.setdefault("from_logits", from_logits)
    return cls(**params, dtype="float32") if "dtype" in inspect.signature(cls.__init__).parameters else cls(**params)


def make_metric(name, task):
    """A fresh `keras.metrics.Metric` called `name`; `accuracy` is the task's own (logits against class ids)."""
    canonical = resolve_metric(name)
    if canonical == "accuracy" and task.kind != "regression":
        return keras.metrics.SparseCategoricalAccuracy(name=name)
    metric = keras.metrics.get(canonical)
    if not isinstance(metric, keras.metrics.Metric):
        return keras.metrics.MeanMetricWrapper(metric, name=name)
    if "from_logits" in inspect.signature(type(metric).__init__).parameters:
        # Keras's default reads probabilities; opt-train's models output logits unless they end in softmax.
        return type(metric)(name=name, from_logits=task.from_logits)
    return metric


def match_output(task, probability, loss=None, loss_params=None):
    """`task` scored on a model whose output is already a probability, or a ValueError (with `.key`) saying the fix.

    Args:
        probability: `(layer name, "softmax" | "sigmoid")` from
            `opt_train.models.output.probability_output`, or None (logits: `task` as it is).
        loss, loss_params: the config's `loss` and `loss_params`.
    """
    if probability is None or task.kind == "regression":
        return task
    layer, activation = probability
    params = dict(loss_params or {})

    def refuse(key, message):
        return ParamError.at(key, "conflict", f"the model's last layer {layer!r} ends in {activation}, so it "
                             f"outputs probabilities; {message}")

    if params.get("from_logits") is True:
        raise refuse("loss_params.from_logits", "from_logits: true would apply it twice. "
                     "Drop loss_params.from_logits, or give that layer no activation (logits)")
    if loss is None and activation == "sigmoid":
        raise refuse("model", "independent per-class probabilities, which the default loss (sparse categorical "
                     "crossentropy over classes) cannot score. End the model in softmax, or in no activation (logits)")
    task = dataclasses.replace(task, from_logits=False)
    if loss is not None and not isinstance(loss, dict):
        task = dataclasses.replace(task, loss_object=make_loss(loss, params, from_logits=False))
    return task


def with_objectives(task, loss=None, loss_params=None, metrics=()):
    """`task` computing `loss` (a name or factory spec, with `loss_params`) and adding `metrics`."""
    loss_object = task.loss_object if loss is None else make_loss(loss, loss_params)
    names = tuple(resolve_metric(name) for name in metrics)
    for index, name in enumerate(names):
        try:
            make_metric(name, task)
        except (TypeError, ValueError) as error:
            raise ParamError.at(f"metrics[{index}]", "conflict",
                                f"metric {name!r} cannot be built from its name alone: {error}") from None
    return dataclasses.replace(task, loss_object=loss_object, metric_names=names)
