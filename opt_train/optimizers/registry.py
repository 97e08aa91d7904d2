"""The optimizer registry: names, parameter spellings, `get`, `serialize` and `deserialize`.

Importing this module does not import TensorFlow: `OPTIMIZER_NAMES`, `resolve`
and the alias tables are plain Python, and optimizer classes are imported on
first access (`OPTIMIZER_CLS_NAMES[name]`, `get`, `check_params`, `describe`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping

from opt_train.errors import ParamError
from opt_train.optimizers import specs
from opt_train.optimizers.specs import (
    BASE_PARAMS,
    OPTIMIZER_PARAMS,
    PARAMETER_ALIASES,
    PARAMETER_RENAMES,
    PIPELINE_ARGUMENTS,
    POST_INIT_PARAMETERS,
    PYTHON_ONLY_PARAMETERS,
)
from opt_train.suggest import Registry, UnknownNameError, normalize

_PACKAGE = "opt_train.optimizers"

# display name -> "module:Class" (module relative to opt_train.optimizers), by family.
TF1_FAMILY = {
    "GradientDescent": "gradient_descent:GradientDescent",
    "ProximalGradientDescent": "gradient_descent:ProximalGradientDescent",
    "Momentum": "momentum:Momentum",
    "Adagrad": "adagrad:Adagrad",
    "ProximalAdagrad": "adagrad:ProximalAdagrad",
    "AdagradDA": "adagrad_da:AdagradDA",
    "Adadelta": "adadelta:Adadelta",
    "Adam": "adam:Adam",
    "LazyAdam": "adam:LazyAdam",
    "Ftrl": "ftrl:Ftrl",
    "RMSProp": "rmsprop:RMSProp",
}
OPENSEQ2SEQ_FAMILY = {
    "NovoGrad": "novograd:NovoGrad",
}
RETURNN_FAMILY = {
    "AMSGrad": "amsgrad:AMSGrad",
    "CustomGradientDescent": "custom:CustomGradientDescent",
    "CustomAdam": "custom:CustomAdam",
    "GradVarianceScaled": "grad_variance_scaled:GradVarianceScaled",
    "NeuralOptimizer1": "neural_optimizer1:NeuralOptimizer1",
    "NormalizedSGD": "normalized_sgd:NormalizedSGD",
    "ReturnnNadam": "returnn_nadam:ReturnnNadam",
}
# Keras 3's classes, wrapped in keras_family.py; TF1 names win a clash, so
# Keras's Adam & co. are registered with a "Keras" prefix.
KERAS_FAMILY = {
    name: f"keras_family:{name}"
    for name in (
        "SGD",
        "Adamax",
        "Nadam",
        "AdamW",
        "Adafactor",
        "Lion",
        "Lamb",
        "Muon",
        "ScheduleFreeAdamW",
        "KerasAdam",
        "KerasAdagrad",
        "KerasAdadelta",
        "KerasFtrl",
        "KerasRMSprop",
    )
}
FAMILIES = {
    "tf1": TF1_FAMILY,
    "keras": KERAS_FAMILY,
    "openseq2seq": OPENSEQ2SEQ_FAMILY,
    "returnn": RETURNN_FAMILY,
}
_LOCATIONS = {name: where for family in FAMILIES.values() for name, where in family.items()}
OPTIMIZER_NAMES = tuple(_LOCATIONS)
OPTIMIZERS = Registry("optimizer", OPTIMIZER_NAMES)

# Names TF1 / RETURNN users know that are not optimizers here, and what replaces them.
REPLACED = {
    "syncreplicas": (
        "`SyncReplicas` is not an optimizer in opt-train: synchronous data-parallel "
        "training is a backend. Set `num_gpus: N` (replicas in one process) or launch "
        "`opt-train train --np N --config x.yaml` (workers; `distributed: tf`, or "
        "`distributed: horovod`), and name the inner optimizer in `optimizer`."
    ),
}

def reject_pipeline_arguments(params):
    """Raises a `conflict` ParamError for a Keras argument the opt-train gradient pipeline replaces."""
    for name in PIPELINE_ARGUMENTS:
        BASE_PARAMS[name].rule(name, params.get(name))


is_path = specs.is_path


def resolve(name):
    """The display name for any accepted spelling (`adam`, `AdamOptimizer`, `ADAM`).

    Raises `UnknownNameError` with the closest name, or a ValueError for a TF1
    name that opt-train replaces (`SyncReplicas`). A dotted path is returned
    unchanged; it is imported by `get`.
    """
    if not isinstance(name, str):
        raise ParamError(None, "wrong_type", "an optimizer name must be a string", name,
                         text=f"An optimizer name must be a string. Received: {name!r}")
    if is_path(name):
        return name
    key = normalize(name)
    if key in REPLACED:
        raise ParamError(None, "unknown_name", REPLACED[key], text=REPLACED[key])
    return OPTIMIZERS.resolve(name)


def family_of(name):
    """The family ("tf1", "keras", "openseq2seq", "returnn") of a registered name."""
    display = resolve(name)
    return next(family for family, names in FAMILIES.items() if display in names)


def _import(location, separator=":"):
    module_name, _, attribute = location.rpartition(separator)
    return getattr(importlib.import_module(module_name), attribute)


class _LazyClassMap(Mapping):
    """name -> class; a class is imported on first access. Any accepted spelling looks up."""

    def __init__(self, locations):
        self._locations = locations
        self._classes = {}

    def __getitem__(self, name):
        display = resolve(name)
        if display not in self._locations:
            raise KeyError(name)
        if display not in self._classes:
            self._classes[display] = _import(f"{_PACKAGE}.{self._locations[display]}")
        return self._classes[display]

    def __contains__(self, name):
        try:
            return resolve(name) in self._locations
        except ValueError:
            return False

    def __iter__(self):
        return iter(self._locations)

    def __len__(self):
        return len(self._locations)


OPTIMIZER_CLS_NAMES = _LazyClassMap(_LOCATIONS)


def _keras_optimizer_base():
    import keras

    return keras.optimizers.Optimizer


def _wrapped_keras_class(cls):
    """Our TF1-API subclass for a Keras built-in optimizer class, else `cls` itself."""
    from opt_train.optimizers import keras_family

    return keras_family.WRAPPER_OF.get(cls, cls)


def _tf1_class_name(path):
    """`tf.compat.v1.train.MomentumOptimizer` -> "Momentum" when it names a TF1 optimizer we have."""
    module, _, attribute = path.replace(":", ".").rpartition(".")
    if not (module.startswith("tf.") or module.startswith("tensorflow")):
        return None
    key = normalize(attribute)
    return OPTIMIZERS.get(key) if OPTIMIZERS.get(key) in TF1_FAMILY else None


def class_from_path(path):
    """The optimizer class a dotted path names (`keras.optimizers.RMSprop`, `pkg.mod:Cls`)."""
    tf1_name = _tf1_class_name(path)
    if tf1_name:
        return OPTIMIZER_CLS_NAMES[tf1_name]
    separator = ":" if ":" in path else "."
    try:
        cls = _import(path, separator)
    except (ImportError, AttributeError, ValueError) as error:
        raise ParamError(
            None, "unknown_name", f"cannot import the optimizer class `{path}`: {error}", path,
            text=f"Cannot import the optimizer class `{path}`: {error}. Received: optimizer={path!r}",
            key="optimizer",
        ) from None
    if not (inspect.isclass(cls) and issubclass(cls, _keras_optimizer_base())):
        raise ParamError(
            None, "wrong_type", "is not a Keras optimizer class (a subclass of keras.optimizers.Optimizer)",
            path, key="optimizer",
            text=f"`{path}` is not a Keras optimizer class (a subclass of "
            f"keras.optimizers.Optimizer). Received: optimizer={path!r}",
        )
    return _wrapped_keras_class(cls)


def get_class(identifier):
    """The optimizer class for a name, a dotted path or a class."""
    if inspect.isclass(identifier):
        return _wrapped_keras_class(identifier)
    display = resolve(identifier)
    if is_path(display):
        return class_from_path(display)
    return OPTIMIZER_CLS_NAMES[display]


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
    """The parameter names `get` accepts for `cls` (constructor + post-init ones)."""
    names = set(signature_params(cls)) - set(PIPELINE_ARGUMENTS) - set(PYTHON_ONLY_PARAMETERS)
    return names | set(POST_INIT_PARAMETERS)


def _display_name(cls):
    return getattr(cls, "_registry_name", None) or cls.__name__


def _rename_alias(params, accepted, spellings, name):
    """Renames the one spelling of a parameter that `cls` does not take to the one it does."""
    given = [s for s in spellings if s in params]
    if len(given) > 1:
        received = ", ".join(f"{s}={params[s]!r}" for s in given)
        raise ParamError(
            given[0], "conflict", f"and `{given[1]}` are two spellings of one parameter; give one",
            params[given[0]],
            text=f"`{given[0]}` and `{given[1]}` are two spellings of one parameter of {name}; "
            f"give one. Received: {received}",
        )
    target = next((s for s in spellings if s in accepted), None)
    if given and target and given[0] != target:
        params[target] = params.pop(given[0])


def check_params(identifier, params):
    """`params` renamed to the spellings the optimizer's class takes, after validation.

    Accepts TF1 and Keras spellings (`beta1` / `beta_1`, `decay` / `rho`,
    `use_nesterov` / `nesterov`, `lr`); raises a ValueError when both spellings
    are given or a pipeline argument appears, and `UnknownNameError` naming an
    unknown parameter with the closest valid one.
    """
    cls = get_class(identifier)
    name = _display_name(cls)
    if name in _LOCATIONS and OPTIMIZER_CLS_NAMES[name] is cls:
        # A registered class: its TF-free table, the one `opt-train validate` checks with.
        return specs.check_params(name, params)
    params = dict(params or {})
    reject_pipeline_arguments(params)
    for short, full in PARAMETER_RENAMES.items():
        _rename_alias(params, {full}, (short, full), name)
    accepted = accepted_params(cls)
    for spellings in PARAMETER_ALIASES:
        _rename_alias(params, accepted, spellings, name)
    for key in params:
        if key not in accepted:
            raise UnknownNameError(f"parameter of {name}", key, accepted, code="unknown_key")
    return params


def _instantiate(cls, params):
    params = check_params(cls, params)
    excluded = params.pop("exclude_from_weight_decay", None)
    optimizer = cls(**params)
    if excluded is not None:
        names = [excluded] if isinstance(excluded, str) else list(excluded)
        optimizer.exclude_from_weight_decay(var_names=names)
    return optimizer


def get(identifier, **params):
    """An optimizer instance from a name, dotted path, class, instance or serialized dict.

    Examples: `get("Momentum", learning_rate=0.1, momentum=0.9)`,
    `get("AdamOptimizer", beta1=0.8)`, `get("keras.optimizers.RMSprop")`,
    `get({"class_name": "SGD", "config": {...}})`.
    """
    if identifier is None:
        raise ParamError("optimizer", "missing", "is required", None,
                         text="An optimizer is required. Received: optimizer=None")
    if isinstance(identifier, dict):
        return deserialize(identifier, **params)
    if not isinstance(identifier, (str, type)) and isinstance(
        identifier, _keras_optimizer_base()
    ):
        if params:
            raise ParamError(
                None, "conflict", "parameters cannot be given with an optimizer instance", sorted(params),
                text=f"Parameters cannot be given with an optimizer instance. Received: {sorted(params)}",
            )
        return identifier
    return _instantiate(get_class(identifier), params)


def serialize(optimizer):
    """A Keras-style dict (`module`, `class_name`, `config`, `registered_name`) for `optimizer`."""
    import keras

    cls = type(optimizer)
    config = optimizer.get_config()
    if isinstance(config.get("learning_rate"), keras.optimizers.schedules.LearningRateSchedule):
        config["learning_rate"] = keras.saving.serialize_keras_object(config["learning_rate"])
    registered = _display_name(cls)
    return {
        "module": cls.__module__,
        "class_name": cls.__name__,
        "config": config,
        "registered_name": registered if registered in _LOCATIONS else None,
    }


def _class_of_serialized(config):
    """The class a serialized dict names: ours by registered name, else Keras or a user module."""
    registered = config.get("registered_name")
    if registered in _LOCATIONS:
        return OPTIMIZER_CLS_NAMES[registered]
    class_name = config.get("class_name")
    module = config.get("module") or ""
    if not class_name:
        raise ParamError("class_name", "missing", "is required in a serialized optimizer", None,
                         text=f"A serialized optimizer needs `class_name`. Received: {config!r}")
    if module.startswith("keras"):
        import keras

        return _wrapped_keras_class(getattr(keras.optimizers, class_name))
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
    return _instantiate(cls, kwargs)


def describe():
    """[(name, family, {parameter: default})] for every registered optimizer, TF-free.

    Read from the table in `opt_train.optimizers.specs`; a required parameter's
    default is the string "required". The Keras base arguments common to all
    (weight_decay, clipnorm, ...) are left out, unless the class has its own default.
    """
    rows = []
    for family, names in FAMILIES.items():
        for name in names:
            params = {
                key: "required" if param.required else param.default
                for key, param in OPTIMIZER_PARAMS[name].items()
                if key not in specs.COMMON_PARAMETERS  # every own class takes them: said once
            }
            rows.append((name, family, params))
    return rows
