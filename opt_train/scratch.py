"""What a process leaves in the temporary folder: folders named by its pid, and AutoGraph's bytecode (TF-free).

A process removes its own temporary folder when it is done with it; one killed in the
meantime (SIGKILL, a restart that ends a worker stuck in a collective) cannot. The folder's
name carries its process's id, so the next process that makes one of the same kind on this
machine removes the folders of processes that are gone (`remove_orphans`). A command removes
the bytecode of AutoGraph's sources as it ends (`remove_autograph_bytecode`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import stat
import sys
import tempfile

# How TensorFlow names the modules of AutoGraph's converted sources (tensorflow/python/autograph/pyct/loader.py).
AUTOGRAPH_MODULES = "__autograph_generated_file"


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


def remove_autograph_bytecode():
    """Removes the bytecode Python cached of AutoGraph's converted sources, beside them in the temporary folder.

    TensorFlow's exit hook removes each source it wrote, not the `__pycache__/*.pyc` that
    importing it left (unless PYTHONDONTWRITEBYTECODE is set): two files a run that exports.
    """
    folders = set()
    for name, module in list(sys.modules.items()):
        if name.startswith(AUTOGRAPH_MODULES) and getattr(module, "__file__", None):
            cached = importlib.util.cache_from_source(module.__file__)
            folders.add(os.path.dirname(cached))
            with contextlib.suppress(OSError):
                os.unlink(cached)
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty: another program's bytecode is there too
            os.rmdir(folder)
