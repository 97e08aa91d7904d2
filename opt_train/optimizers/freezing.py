"""`freeze_variables_regex`: picks the variables that get no update and no optimizer slots."""

from __future__ import annotations

import re

from opt_train import params
from opt_train.errors import ParamError


def variable_path(variable):
    """The name a regex is matched against: Keras's `path` ("dense/kernel"), else the TF name without ":0"."""
    return getattr(variable, "path", None) or variable.name.split(":")[0]


def few_paths(paths, shown=4):
    """The first `shown` of `paths` for an error line, and how many there are in all."""
    listed = ", ".join(paths[:shown])
    return listed + (f", ... ({len(paths)} in all)" if len(paths) > shown else "")


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


def check_left_to_train(trainable, frozen, regex, path=variable_path):
    """A `ParamError` at `freeze_variables_regex` when it froze every variable or none (`split_frozen`'s halves).

    A regex that matches nothing would train the variables it was written to hold still: a typo in
    a fine-tuning config, found only when the "frozen" layers have moved. OpenSeq2Seq trained on
    silently; opt-train refuses it as it refuses an optimizer group or a `layouts` key that takes
    no variable.
    """
    if frozen and not trainable:
        raise ParamError(
            "freeze_variables_regex", "out_of_range",
            f"matches all {len(frozen)} variables: no variable left to train", regex,
            key="freeze_variables_regex",
            text=f"No variable left to train. Received: freeze_variables_regex={regex!r} matched all {len(frozen)} "
                 "variables",
        )
    if regex is not None and trainable and not frozen:
        paths = [path(variable) for variable in trainable]
        shown = few_paths(paths)
        raise ParamError(
            "freeze_variables_regex", "out_of_range",
            f"matches no trainable variable (their paths: {shown}): nothing would be frozen", regex,
            key="freeze_variables_regex",
            text=f"Nothing to freeze. Received: freeze_variables_regex={regex!r} matched none of the "
                 f"{len(paths)} trainable variables ({shown})",
        )
