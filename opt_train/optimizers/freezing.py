"""`freeze_variables_regex`: picks the variables that get no update and no optimizer slots."""

from __future__ import annotations

import re

from opt_train import params
from opt_train.errors import ParamError


def variable_path(variable):
    """The name a regex is matched against: Keras's `path` ("dense/kernel"), else the TF name without ":0"."""
    return getattr(variable, "path", None) or variable.name.split(":")[0]


def split_frozen(variables, regex=None, path=variable_path):
    """Splits `variables` into `(trainable, frozen)` by `re.search(regex, path(variable))`.

    Frozen variables are left out of the optimizer entirely, so they get no
    gradient, no update and no slot variables. `path=str` splits paths themselves
    (`validate`, which knows a built-in model's variable paths before TensorFlow starts).
    """
    if regex is None:
        return list(variables), []
    # The config layer's rule for the key, so YAML and Python are judged alike.
    pattern = re.compile(params.regex("freeze_variables_regex", regex))
    trainable, frozen = [], []
    for variable in variables:
        (frozen if pattern.search(path(variable)) else trainable).append(variable)
    return trainable, frozen


def check_left_to_train(trainable, frozen, regex):
    """A `ParamError` at `freeze_variables_regex` when it froze every variable (`split_frozen`'s halves)."""
    if frozen and not trainable:
        raise ParamError(
            "freeze_variables_regex", "out_of_range",
            f"matches all {len(frozen)} variables: no variable left to train", regex,
            key="freeze_variables_regex",
            text=f"No variable left to train. Received: freeze_variables_regex={regex!r} matched all {len(frozen)} "
                 "variables",
        )
