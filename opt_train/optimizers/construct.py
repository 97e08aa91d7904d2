"""Checks an optimizer class's parameters and builds it: a registered class by its row, a user's by its signature."""

from __future__ import annotations

from opt_train.optimizers import specs
from opt_train.optimizers.classes import accepted_params, display_name, get_class, registered_name
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
