"""Files written whole or not at all (a temporary file, then a rename), and JSON read back (TF-free)."""

from __future__ import annotations

import json
import os


def write_text(path, text):
    """Writes `text` to `path` so a reader never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def write_bytes(path, data):
    """Writes `data` to `path` so a reader never sees half a file."""
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def write_json(path, payload):
    """`payload` as indented, key-sorted JSON (what JSON cannot hold is written as text)."""
    write_text(path, json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path):
    """The JSON object in `path`, or None when it is missing or unreadable (e.g. cut short)."""
    try:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
    except (OSError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
