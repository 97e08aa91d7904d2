"""Layers config sources into one mapping: `base:` chains, several `--config` files, then `--set` overrides."""

from __future__ import annotations

import os

import yaml

from opt_train.config.issues import OVERRIDE_FILE, ConfigError, ConfigIssue
from opt_train.config.source import child_key, item_key, parse_scalar, read_yaml_file


class Layered:
    """Data merged so far, where each dotted key was last set, and the problems met on the way."""

    def __init__(self):
        self.data = {}
        self.locations = {}
        self.issues = []

    def merge(self, data, locations):
        """Lays `data` over what is here: mappings merge deeply, anything else replaces.

        A file that names another `model` (or `data`) than the files below it starts that
        block afresh: the lower files' `model_params` (`data_params`) belonged to the old
        one and are dropped, not merged into the new one's.
        """
        for block, params in FRESH_BLOCKS.items():
            if block in data and block in self.data and not same_spec(data[block], self.data[block]):
                if params in self.data:
                    forget(self.locations, self.data.pop(params), params)
        merge_into(self.data, self.locations, data, locations, "")


# A key whose change makes the parameters below it meaningless: key -> its parameter block.
FRESH_BLOCKS = {"model": "model_params", "data": "data_params"}


def same_spec(a, b):
    """One model / dataset: names compared as the registries do (case, `_` and `-` ignored)."""
    if isinstance(a, str) and isinstance(b, str):
        return a.lower().replace("_", "").replace("-", "") == b.lower().replace("_", "").replace("-", "")
    return a == b


def dotted_keys(value, key):
    """`key` and every dotted key inside `value` (`a.b`, `a[0]`): the keys a location may be kept for."""
    yield key
    if isinstance(value, dict):
        for name, item in value.items():
            yield from dotted_keys(item, child_key(key, name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from dotted_keys(item, item_key(key, index))


def forget(locations, value, key):
    """Drops the locations of `key` and of everything inside its old `value`."""
    for dotted in dotted_keys(value, key):
        locations.pop(dotted, None)


def merge_into(data, locations, upper, upper_locations, prefix):
    # Walks the values rather than scanning every location per key, so merging costs
    # the size of the data, not its square (a config of 10,000 keys merges at once).
    for name, value in upper.items():
        key = child_key(prefix, name)
        if isinstance(value, dict) and isinstance(data.get(name), dict):
            if key in upper_locations:
                locations[key] = upper_locations[key]
            merge_into(data[name], locations, value, upper_locations, key)
            continue
        if name in data:
            forget(locations, data[name], key)
        data[name] = value
        for dotted in dotted_keys(value, key):
            if dotted in upper_locations:
                locations[dotted] = upper_locations[dotted]


def read_config_file(path, layered, chain=()):
    """Merges `path` (after its `base:` chain) into `layered`."""
    if str(path).endswith(".py"):
        layered.issues.append(python_config_issue(path))
        return
    data, locations, issues = read_yaml_file(path, path)
    layered.issues.extend(issues)
    if data is None:
        return
    if not isinstance(data, dict):
        layered.issues.append(
            ConfigIssue(path, 1, "", "wrong_type", "a config file must be a mapping of keys")
        )
        return
    chain = chain + (os.path.realpath(path),)
    if "base" in data:
        base = data.pop("base")
        where = locations.get("base", (path, None))
        forget(locations, base, "base")
        read_base(path, base, where, layered, chain)
    layered.merge(data, locations)


def python_config_issue(path):
    """An OpenSeq2Seq / RETURNN `.py` config given as a config: opt-train never runs it; `convert` reads it."""
    try:
        with open(path, encoding="utf-8") as handle:
            kind = "openseq2seq" if "base_params" in handle.read() else "returnn"
    except OSError:
        kind = "openseq2seq"
    out = os.path.splitext(str(path))[0] + ".yaml"
    return ConfigIssue(path, 1, "", "python_config",
                       f"is a Python config, which opt-train never runs: convert it with `opt-train convert {kind} "
                       f"{path} -o {out}`, fill in what it asks for, and give {out}")


def read_base(path, base, where, layered, chain):
    """Reads the file named by `base:` in `path`, relative to `path`'s folder."""
    file, line = where
    if not isinstance(base, str) or not base:
        layered.issues.append(
            ConfigIssue(file, line, "base", "wrong_type", "must be a path to a YAML file", base)
        )
        return
    base_path = os.path.normpath(os.path.join(os.path.dirname(path), base))
    if os.path.realpath(base_path) in chain:
        layered.issues.append(
            ConfigIssue(file, line, "base", "base_cycle", "the base chain comes back to this file", base)
        )
        return
    if not os.path.isfile(base_path):
        layered.issues.append(
            ConfigIssue(file, line, "base", "file_not_found", f"no such file {base_path!r}", base)
        )
        return
    read_config_file(base_path, layered, chain)


def bad_override(text, key, message):
    return ConfigIssue(OVERRIDE_FILE, 0, key, "bad_override", message, text)


def parse_override(text):
    """`"a.b=1"` -> `(["a", "b"], 1)`; the value is read as YAML. Raises `ConfigError`."""
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError([bad_override(text, "", "expected KEY=VALUE, e.g. max_steps=100")])
    dotted, raw = text.split("=", 1)
    dotted = dotted.strip()
    keys = dotted.split(".")
    if not all(part.strip() for part in keys):
        raise ConfigError([bad_override(text, dotted, "expected a dotted key before '='")])
    try:
        value = parse_scalar(raw)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError([bad_override(text, dotted, f"the value is not valid YAML ({problem})")]) from None
    except ValueError as error:
        raise ConfigError([bad_override(text, dotted, str(error))]) from None
    return [part.strip() for part in keys], value


def sub_locations(value, key):
    """Every dotted key inside an override's value, all placed at `--set`."""
    return dict.fromkeys(dotted_keys(value, key), (OVERRIDE_FILE, 0))


def apply_override(layered, text):
    """Sets one `--set KEY=VALUE`, creating mappings on the way; problems become issues."""
    try:
        keys, value = parse_override(text)
    except ConfigError as error:
        layered.issues.extend(error.issues)
        return
    node = layered.data
    for depth, name in enumerate(keys[:-1]):
        if node.get(name) is None:
            node[name] = {}
            # A mapping the override creates is the override's, wherever its parent stood.
            layered.locations[".".join(keys[: depth + 1])] = (OVERRIDE_FILE, 0)
        if not isinstance(node[name], dict):
            key = ".".join(keys[: depth + 1])
            layered.issues.append(bad_override(text, key, "is not a mapping, so it has no sub-keys"))
            return
        node = node[name]
    dotted = ".".join(keys)
    forget(layered.locations, node.get(keys[-1]), dotted)
    node[keys[-1]] = value
    layered.locations.update(sub_locations(value, dotted))


def layer(paths, overrides=()):
    """All sources merged: `(Layered)` with data, locations and issues."""
    layered = Layered()
    for path in paths:
        read_config_file(str(path), layered)
    for text in overrides:
        apply_override(layered, text)
    return layered
