"""`freeze_variables_regex`: picks the variables that get no update and no optimizer slots."""

from __future__ import annotations

import re

from opt_train import params


def variable_path(variable):
    """The name a regex is matched against: Keras's `path` ("dense/kernel"), else the TF name without ":0"."""
    return getattr(variable, "path", None) or variable.name.split(":")[0]


def split_frozen(variables, regex=None):
    """Splits `variables` into `(trainable, frozen)` by `re.search(regex, path)`.

    Frozen variables are left out of the optimizer entirely, so they get no
    gradient, no update and no slot variables.
    """
    if regex is None:
        return list(variables), []
    # The config layer's rule for the key, so YAML and Python are judged alike.
    pattern = re.compile(params.regex("freeze_variables_regex", regex))
    trainable, frozen = [], []
    for variable in variables:
        (frozen if pattern.search(variable_path(variable)) else trainable).append(variable)
    return trainable, frozen
