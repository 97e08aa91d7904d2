"""Temporary folders named by the process that made them, and the removal of those a killed process left (TF-free).

A process removes its own temporary folder when it is done with it; one killed in the
meantime (SIGKILL, a restart that ends a worker stuck in a collective) cannot. The folder's
name carries its process's id, so the next process that makes one of the same kind on this
machine removes the folders of processes that are gone (`remove_orphans`).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile


def alive(pid):
    """Whether process `pid` exists on this machine (another user's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def make_folder(prefix):
    """A new folder `<prefix><pid>-<random>` in the system's temporary folder, for this process alone."""
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def remove_orphans(prefix):
    """Removes this user's folders `make_folder(prefix)` made whose process is gone, with what they hold."""
    directory = tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        owner = name[len(prefix):].partition("-")[0] if name.startswith(prefix) else ""
        if not owner.isdigit() or alive(int(owner)):
            continue
        path = os.path.join(directory, name)
        try:
            found = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)
