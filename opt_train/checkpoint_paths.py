"""Where a checkpoint argument points (TF-free): a prefix, its `.index` / `.data-*` file, a folder or a logdir.

The one reader of a checkpoint path, for `eval`, `export`, `predict` and `init_from`; the
config layer calls it too (below both layers, beside `opt_train.errors`), so `validate` finds
a missing checkpoint without importing TensorFlow or the training layer.
"""

from __future__ import annotations

import os
import re

from opt_train.errors import RunRefused

_NUMBERED = re.compile(r"-(\d+)$")
_DATA_FILE = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")
# How a checkpoint argument may be given, for the message that refuses anything else.
ACCEPTED = "a checkpoint prefix (…/checkpoints/ckpt-100), its .index or .data-* file, or a folder (its newest)"


def list_checkpoints(directory):
    """The checkpoint prefixes in `directory` that have an `.index` file, newest (highest number) first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    prefixes = [os.path.join(directory, name[: -len(".index")]) for name in names if name.endswith(".index")]
    return sorted(prefixes, key=_number, reverse=True)


def _number(prefix):
    found = _NUMBERED.search(os.path.basename(prefix))
    return int(found.group(1)) if found else -1


def resolve_checkpoint(path, logdir=None, *, option="--checkpoint"):
    """The checkpoint prefix `path` names, for `eval`, `export`, `predict` and `init_from`.

    `path` may be a prefix, its `.index` or `.data-*` file, a checkpoints folder or a
    logdir (their newest checkpoint); None means the newest in `logdir`. Anything else
    is a RunRefused naming `option`.
    """
    if path is None:
        folder = os.path.join(logdir, "checkpoints")
        found = list_checkpoints(folder)
        if not found:
            raise RunRefused(f"no checkpoint in {folder}: train first, or give {option} ({ACCEPTED})")
        return found[0]
    path = os.fspath(path)
    if os.path.isdir(path):
        for folder in (path, os.path.join(path, "checkpoints")):
            found = list_checkpoints(folder)
            if found:
                return found[0]
        raise RunRefused(f"{option} {path}: a folder with no checkpoint in it; give {ACCEPTED}")
    prefix = path
    if path.endswith(".index"):
        prefix = path[: -len(".index")]
    elif _DATA_FILE.match(os.path.basename(path)):
        prefix = os.path.join(os.path.dirname(path), _DATA_FILE.match(os.path.basename(path)).group("prefix"))
    if os.path.isfile(prefix + ".index"):
        return prefix
    if os.path.lexists(path):
        raise RunRefused(f"{option} {path}: not a checkpoint; give {ACCEPTED}")
    raise RunRefused(f"{option} {path}: no such checkpoint; give {ACCEPTED}")


# What `init_from.path` may name besides a checkpoint: Keras's own files, by their endings.
KERAS_FILES = {".keras": "keras", ".weights.h5": "weights"}
INIT_SOURCES = f"{ACCEPTED}, a .keras file or a .weights.h5 file"


def init_source(path, *, option="init_from.path"):
    """`(kind, path)` of a warm start's source: ("checkpoint", prefix), ("keras", file) or ("weights", file).

    A Keras file is told by its ending (`.keras`, `.weights.h5`) and must exist; anything
    else is read as a checkpoint argument (`resolve_checkpoint`). Raises RunRefused naming `option`.
    """
    path = os.fspath(path)
    for ending, kind in KERAS_FILES.items():
        if path.endswith(ending):
            if not os.path.isfile(path):
                raise RunRefused(f"{option} {path}: no such file")
            return kind, path
    if path.endswith(".h5"):
        raise RunRefused(f"{option} {path}: an .h5 file of Keras 2 (whole model or weights); give {INIT_SOURCES}")
    try:
        return "checkpoint", resolve_checkpoint(path, option=option)
    except RunRefused as error:
        raise RunRefused(str(error).replace(f"give {ACCEPTED}", f"give {INIT_SOURCES}")) from None
