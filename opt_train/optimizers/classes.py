"""Optimizer classes from names, dotted paths and classes, each imported on first use (TF-free at import).

A registered name is looked up in the table (`table.py`) and its "module:Class"
imported the first time it is asked for; a dotted path names a user's (or a Keras)
class; a Keras built-in class, however it is named, becomes opt-train's subclass of
it with the TF1 API (`keras_family.py`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping

from opt_train.errors import ParamError
from opt_train.optimizers.table import (
    PACKAGE,
    PIPELINE_ARGUMENTS,
    POST_INIT_PARAMETERS,
    PYTHON_ONLY_PARAMETERS,
    OPTIMIZERS,
    TABLE,
    is_path,
    resolve,
    row_of_class,
)
from opt_train.suggest import normalize


def import_location(location, separator=":"):
    """The attribute a "module:attribute" (or, with `separator="."`, "module.attribute") names."""
    module_name, _, attribute = location.rpartition(separator)
    return getattr(importlib.import_module(module_name), attribute)


class _LazyClassMap(Mapping):
    """name -> class; a class is imported on first access. Any accepted spelling looks up."""

    def __init__(self, table):
        self._table = table
        self._classes = {}

    def __getitem__(self, name):
        display = resolve(name)
        if display not in self._table:
            raise KeyError(name)
        if display not in self._classes:
            self._classes[display] = import_location(f"{PACKAGE}.{self._table[display].location}")
        return self._classes[display]

    def __contains__(self, name):
        try:
            return resolve(name) in self._table
        except ValueError:
            return False

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)


OPTIMIZER_CLS_NAMES = _LazyClassMap(TABLE)


def keras_optimizer_base():
    import keras

    return keras.optimizers.Optimizer


def wrapped_keras_class(cls):
    """Our TF1-API subclass for a Keras built-in optimizer class, else `cls` itself."""
    from opt_train.optimizers import keras_family

    return keras_family.WRAPPER_OF.get(cls, cls)


def _tf1_class_name(path):
    """`tf.compat.v1.train.MomentumOptimizer` -> "Momentum" when it names a TF1 optimizer we have."""
    module, _, attribute = path.replace(":", ".").rpartition(".")
    if not (module.startswith("tf.") or module.startswith("tensorflow")):
        return None
    name = OPTIMIZERS.get(normalize(attribute))
    return name if name and TABLE[name].family == "tf1" else None


def class_from_path(path):
    """The optimizer class a dotted path names (`keras.optimizers.RMSprop`, `pkg.mod:Cls`)."""
    tf1_name = _tf1_class_name(path)
    if tf1_name:
        return OPTIMIZER_CLS_NAMES[tf1_name]
    separator = ":" if ":" in path else "."
    try:
        cls = import_location(path, separator)
    except (ImportError, AttributeError, ValueError) as error:
        raise ParamError(
            None, "unknown_name", f"cannot import the optimizer class `{path}`: {error}", path,
            text=f"Cannot import the optimizer class `{path}`: {error}. Received: optimizer={path!r}",
            key="optimizer",
        ) from None
    if not (inspect.isclass(cls) and issubclass(cls, keras_optimizer_base())):
        raise ParamError(
            None, "wrong_type", "is not a Keras optimizer class (a subclass of keras.optimizers.Optimizer)",
            path, key="optimizer",
            text=f"`{path}` is not a Keras optimizer class (a subclass of "
            f"keras.optimizers.Optimizer). Received: optimizer={path!r}",
        )
    return wrapped_keras_class(cls)


def get_class(identifier):
    """The optimizer class for a name, a dotted path or a class."""
    if inspect.isclass(identifier):
        return wrapped_keras_class(identifier)
    display = resolve(identifier)
    if is_path(display):
        return class_from_path(display)
    return OPTIMIZER_CLS_NAMES[display]


def display_name(cls):
    """The name a class is registered (and serialized) under: the table's, else its own."""
    return getattr(cls, "_registry_name", None) or cls.__name__


def registered_name(cls):
    """The table's name when `cls` is the registered class of that name, else None."""
    row = row_of_class(cls)
    return row.name if row else None


def signature_params(cls):
    """{parameter: default} the constructor accepts, following `**kwargs` up the MRO.

    A parameter without a default maps to `inspect.Parameter.empty`.
    """
    params = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        signature = inspect.signature(vars(klass)["__init__"])
        forwards = False
        for p in signature.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                forwards = True
            elif p.kind is not p.VAR_POSITIONAL and p.name != "self":
                params.setdefault(p.name, p.default)
        if not forwards:
            break
    return params


def accepted_params(cls):
    """The parameter names `get` accepts for a user's class (constructor + post-init ones)."""
    names = set(signature_params(cls)) - set(PIPELINE_ARGUMENTS) - set(PYTHON_ONLY_PARAMETERS)
    return names | set(POST_INIT_PARAMETERS)
