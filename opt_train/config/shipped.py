"""The example configs shipped inside the package: listing them and copying one (with its `base:` files) out.

`opt_train/configs` is the repository's `configs/` folder (a symlink in a checkout,
real files in a wheel), so `pip install opt-train` alone is enough to start a run:
`opt-train configs copy default . && opt-train train --config default.yaml`.
Imports no TensorFlow.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shutil

from opt_train.config.source import read_yaml_file
from opt_train.suggest import Registry

# A config naming a module of the repository's examples/ folder (a factory or an
# optimizer class): that folder is not part of the package.
_EXAMPLES_MODULE = re.compile(r"\bexamples\.(\w+)")
_SUMMARY_WIDTH = 100


def folder():
    """The folder that holds the shipped configs."""
    return str(importlib.resources.files("opt_train") / "configs")


def names():
    """The shipped configs' names (file names without `.yaml`), sorted."""
    return sorted(entry[:-5] for entry in os.listdir(folder()) if entry.endswith(".yaml"))


def summary(name):
    """The first line of the config's leading comment, and the repository modules it needs."""
    with open(os.path.join(folder(), f"{name}.yaml"), encoding="utf-8") as stream:
        text = stream.read()
    comment = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        comment.append(line.lstrip("#").strip())
    first = re.split(r"(?<=\.)\s", " ".join(comment), maxsplit=1)[0].rstrip(".")
    if len(first) > _SUMMARY_WIDTH:
        first = first[: first.rfind(" ", 0, _SUMMARY_WIDTH)] + " ..."
    return first, sorted(set(_EXAMPLES_MODULE.findall(text)))


def resolve(name):
    """The shipped config's name for `name` (`default`, `default.yaml`, any case), or `UnknownNameError`."""
    stem = name[:-5] if name.lower().endswith(".yaml") else name
    return Registry("example config", names()).resolve(stem)


def chain(name):
    """The file names `name` needs: its own, then every `base:` file it builds on."""
    files, current = [], f"{name}.yaml"
    while current is not None and current not in files:
        files.append(current)
        data, _, _ = read_yaml_file(os.path.join(folder(), current), current)
        base = data.get("base") if isinstance(data, dict) else None
        current = os.path.normpath(base) if isinstance(base, str) else None
    return files


def own_files(name):
    """The files of the folder named like the config (`fine_tuning/` of `fine_tuning.yaml`): what it reads besides YAML."""
    base = os.path.join(folder(), name)
    if not os.path.isdir(base):
        return []
    return sorted(os.path.join(name, entry) for entry in os.listdir(base) if os.path.isfile(os.path.join(base, entry)))


def copy(name, destination):
    """Copies the config `name`, its `base:` files and its own files into `destination`; returns the paths written.

    An existing file is never overwritten: `FileExistsError` names it, and nothing is copied.
    """
    name = resolve(name)
    files = chain(name) + own_files(name)
    targets = [os.path.join(destination, file) for file in files]
    for target in targets:
        if os.path.exists(target):
            raise FileExistsError(target)
    for file, target in zip(files, targets):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        shutil.copyfile(os.path.join(folder(), file), target)
    return targets
