"""`get`: an optimizer instance from a name, dotted path, class, instance or serialized dict, its parameters checked.

A registered class's parameters are checked with its row of the table (the rules
`opt-train validate` uses, `specs.check_params`); a user's class by its constructor's
signature. Names live in `table.py`, classes in `classes.py`, serialisation in
`serialization.py`.
"""

from __future__ import annotations

from opt_train.errors import ParamError
from opt_train.optimizers import specs
from opt_train.optimizers.classes import accepted_params, display_name, get_class, keras_optimizer_base, registered_name
from opt_train.optimizers.table import BASE_PARAMS, PIPELINE_ARGUMENTS
from opt_train.suggest import UnknownNameError


def reject_pipeline_arguments(params):
    """Raises a `conflict` ParamError for a Keras argument the opt-train gradient pipeline replaces."""
    for name in PIPELINE_ARGUMENTS:
        BASE_PARAMS[name].rule(name, params.get(name))


def check_params(identifier, params):
    """`params` renamed to the spellings the optimizer's class takes, after validation.

    Accepts TF1 and Keras spellings (`beta1` / `beta_1`, `decay` / `rho`,
    `use_nesterov` / `nesterov`, `lr`); raises a ValueError when both spellings
    are given or a pipeline argument appears, and `UnknownNameError` naming an
    unknown parameter with the closest valid one.
    """
    cls = get_class(identifier)
    name = registered_name(cls)
    if name:
        # A registered class: its TF-free row, the one `opt-train validate` checks with.
        return specs.check_params(name, params)
    name = display_name(cls)
    params = dict(params or {})
    reject_pipeline_arguments(params)
    accepted = accepted_params(cls)
    params, errors = specs.rename(params, accepted, name)
    if errors:
        raise errors[0]
    for key in params:
        if key not in accepted:
            raise UnknownNameError(f"parameter of {name}", key, accepted, code="unknown_key")
    return params


def instantiate(cls, params):
    """`cls(**params)` after `check_params`, with Keras's post-init settings (`exclude_from_weight_decay`)."""
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
        from opt_train.optimizers.serialization import deserialize  # it builds with `instantiate`

        return deserialize(identifier, **params)
    if not isinstance(identifier, (str, type)) and isinstance(identifier, keras_optimizer_base()):
        if params:
            raise ParamError(
                None, "conflict", "parameters cannot be given with an optimizer instance", sorted(params),
                text=f"Parameters cannot be given with an optimizer instance. Received: {sorted(params)}",
            )
        return identifier
    return instantiate(get_class(identifier), params)
