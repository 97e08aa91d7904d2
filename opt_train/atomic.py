"""Files written whole or not at all (a temporary file, then a rename), and JSON read back (TF-free)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def write_text(path, text):
    """Writes `text` to `path` so a reader never sees half a file, nor a crash an empty one.

    The temporary file has a name of its own (two writers never share one, and a
    symlink planted under a fixed name is never followed); it is fsynced before the
    rename, so after a power loss `path` holds the old or the new text, whole.
    """
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        # mkstemp makes the file 0600; the file it becomes gets what open() would give it
        # (0666 less the umask), so a group sharing the logdirs can read it.
        os.fchmod(handle, 0o666 & ~current_umask())
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)


def current_umask():
    """The process's umask, read without changing it (Linux's /proc; elsewhere set and put back)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder):
    """Makes the rename itself durable (a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


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
