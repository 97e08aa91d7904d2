"""The TF-free registries the config layer asks about names and parameters, imported when first needed."""

from __future__ import annotations

import importlib

MODULES = {
    "optimizer": "opt_train.optimizers.table",
    "optimizer_params": "opt_train.optimizers.specs",
    "lr_policy": "opt_train.lr_policies.registry",
    "model": "opt_train.models.registry",
    "data": "opt_train.data.registry",
}


def registry(kind):
    """The registry module for `kind`."""
    return importlib.import_module(MODULES[kind])
