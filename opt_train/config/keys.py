"""The config keys as people read them: `opt-train list keys` and the key table of docs/config.md, from `schema.key`."""

from __future__ import annotations

import re

from opt_train.config.schema import config_fields, default_of

# Read by the loader before any field (config/layering.py), so it is no TrainConfig field.
LOADER_KEYS = (("base", "path", None, "another YAML file this one builds on; relative to this file"),)

TABLE_HEADER = ("| key | type | default | meaning |", "|---|---|---|---|")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")


def rows():
    """`[(key, values, default as shown, doc)]`: the loader's keys, then every field in declaration order."""
    found = [(name, values, "–", doc) for name, values, _, doc in LOADER_KEYS]
    for field in config_fields():
        meta = field.metadata
        found.append((field.name, meta["values"], meta["shown"] or show_default(default_of(field)), meta["doc"]))
    return found


def show_default(value):
    """A default as YAML writes it, in backticks (`null` bare, as the docs write it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (tuple, list)):
        return "`[" + ", ".join(str(item) for item in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def markdown():
    """The key table of docs/config.md (`opt-train list keys --markdown` prints it)."""
    return "\n".join(TABLE_HEADER + tuple(f"| `{name}` | {values} | {default} | {doc} |"
                                          for name, values, default, doc in rows()))


def lines():
    """One line per key for a terminal: name, default, accepted values and what it does (links as their text)."""
    for name, values, default, doc in rows():
        text = _LINK.sub(r"\1", f"{doc} ({values})").replace("`", "")
        yield f"{name:<26} {default.replace('`', ''):<12} {text}"
