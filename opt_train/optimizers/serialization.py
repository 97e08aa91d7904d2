"""`serialize` / `deserialize`: an optimizer to and from a Keras-style dict, registered names from the table."""

from __future__ import annotations

from opt_train.errors import ParamError
from opt_train.optimizers.classes import (
    OPTIMIZER_CLS_NAMES,
    class_from_path,
    display_name,
    get_class,
    wrapped_keras_class,
)
from opt_train.optimizers.construct import instantiate
from opt_train.optimizers.table import PIPELINE_ARGUMENTS, TABLE


def serialize(optimizer):
    """A Keras-style dict (`module`, `class_name`, `config`, `registered_name`) for `optimizer`."""
    import keras

    cls = type(optimizer)
    config = optimizer.get_config()
    if isinstance(config.get("learning_rate"), keras.optimizers.schedules.LearningRateSchedule):
        config["learning_rate"] = keras.saving.serialize_keras_object(config["learning_rate"])
    registered = display_name(cls)
    return {
        "module": cls.__module__,
        "class_name": cls.__name__,
        "config": config,
        "registered_name": registered if registered in TABLE else None,
    }


def _class_of_serialized(config):
    """The class a serialized dict names: ours by registered name, else Keras or a user module."""
    registered = config.get("registered_name")
    if registered in TABLE:
        return OPTIMIZER_CLS_NAMES[registered]
    class_name = config.get("class_name")
    module = config.get("module") or ""
    if not class_name:
        raise ParamError("class_name", "missing", "is required in a serialized optimizer", None,
                         text=f"A serialized optimizer needs `class_name`. Received: {config!r}")
    if module.startswith("keras"):
        import keras

        return wrapped_keras_class(getattr(keras.optimizers, class_name))
    if module:
        return class_from_path(f"{module}:{class_name}")
    return get_class(class_name)


def deserialize(config, custom_objects=None, **params):
    """The optimizer a `serialize` (or `keras.optimizers.serialize`) dict describes.

    `params` override entries of the stored config.
    """
    import keras

    cls = _class_of_serialized(config)
    kwargs = dict(config.get("config", {}))
    kwargs.update(params)
    if isinstance(kwargs.get("learning_rate"), dict):
        kwargs["learning_rate"] = keras.saving.deserialize_keras_object(
            kwargs["learning_rate"], custom_objects=custom_objects
        )
    # Keras's get_config writes every base argument, pipeline ones as None.
    for name in PIPELINE_ARGUMENTS:
        if kwargs.get(name) is None:
            kwargs.pop(name, None)
    return instantiate(cls, kwargs)
