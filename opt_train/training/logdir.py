"""A logdir belongs to one run: what trained it, who is using it now, and fresh folders for new runs (TF-free)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import socket

import yaml

from opt_train.training.errors import RunRefused, TrainingFailed

# What a run leaves in its logdir once it trains; any of them means the folder holds a run. A start
# that ended before it wrote any (refused at its first step, killed while tracing it) leaves only
# config.yaml, data.json and its HParams session, which hold nothing to resume and which the next
# start writes again: that folder holds no run, and a changed config starts there.
RUN_FILES = ("checkpoints", "metrics.jsonl", "final_metrics.json", "train", "eval")
LOCK_FILE = ".lock"


def holds_run(logdir):
    """Whether `logdir` already holds (part of) a run that trained."""
    return any(os.path.lexists(os.path.join(logdir, name)) for name in RUN_FILES)


def saved_config(logdir):
    """The resolved config that trained `logdir` (its `config.yaml`), or None when absent or unreadable."""
    try:
        with open(os.path.join(logdir, "config.yaml"), encoding="utf-8") as handle:
            saved = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def differences(saved, current, not_run_keys):
    """`[(dotted key, saved value, current value)]` for the run-defining keys that differ.

    `not_run_keys` say how long, how visibly or where a run trains, not what it trains
    (`TrainConfig.not_run_keys()`: declared with each key); every other key defines the run.
    A key one side lacks (a config written before the key existed) is not compared.
    """
    found = []
    for key in sorted(set(saved) & set(current) - set(not_run_keys)):
        _compare(key, saved[key], current[key], found)
    return found


def _compare(key, old, new, found):
    if isinstance(old, dict) and isinstance(new, dict):
        for name in sorted(set(old) | set(new), key=str):
            _compare(f"{key}.{name}", old.get(name), new.get(name), found)
    elif _normal(old) != _normal(new):
        found.append((key, old, new))


def _normal(value):
    # YAML gives back lists for tuples and ints for whole floats only sometimes.
    if isinstance(value, tuple):
        return [_normal(item) for item in value]
    if isinstance(value, list):
        return [_normal(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def where(config, key):
    """`file:line: key` for messages (just `key` when it was not set in a file)."""
    file, line = config.locate(key)
    if not file:
        return key
    return f"{file}:{line}: {key}" if line else f"{file}: {key}"


def check_same_run(config, logdir, *, continue_anyway):
    """Refuses (RunRefused) to continue `logdir` with a config that describes another run.

    Returns the list of differences accepted with `continue_anyway` (empty if none).
    """
    saved = saved_config(logdir)
    if saved is None:
        return []
    changed = differences(saved, config.to_dict(), config.not_run_keys()) + _batch_shards_changed(saved, config)
    if not changed or continue_anyway:
        return changed
    shown = "; ".join(
        f"{where(config, key)} {_show(new)} here, {_show(old)} in the run" for key, old, new in changed[:4]
    )
    more = f" (and {len(changed) - 4} more)" if len(changed) > 4 else ""
    raise RunRefused(
        f"logdir {logdir} holds a run trained with another config: {shown}{more}. "
        "Choose: --resume to continue it anyway with the new values (where its checkpoint "
        "still fits), a new logdir, or --no-resume to start afresh in a new folder beside it"
    )


def _batch_shards_changed(saved, config):
    """`[("mesh", saved, current)]` when the mesh splits the batch into another number of shards.

    `mesh` and `layouts` are placement (a resume may change the model axis and the layouts),
    but the batch axis's size multiplies the global batch: changing it is another run.
    """
    from opt_train.distributed.mesh_layout import DEFAULT_BATCH_AXIS, batch_shards, mesh_axes

    if "mesh" not in saved:
        return []
    try:
        before = batch_shards(mesh_axes(saved.get("mesh")), saved.get("mesh_batch_axis") or DEFAULT_BATCH_AXIS)
    except ValueError:  # a saved config this version cannot read: nothing to compare
        return []
    now = batch_shards(mesh_axes(config.mesh), config.mesh_batch_axis)
    return [] if before == now else [("mesh", saved.get("mesh"), config.mesh)]


def _show(value):
    return json.dumps(value, default=str)


def fresh_folder(logdir):
    """`logdir-2`, `logdir-3`, ...: the first that does not exist."""
    base = os.path.normpath(logdir)
    number = 2
    while os.path.lexists(f"{base}-{number}"):
        number += 1
    return f"{base}-{number}"


def config_fingerprint(config):
    """A 48-bit number that differs between configs that differ (compared across ranks)."""
    return _fingerprint(config.to_dict())


def _fingerprint(value):
    # 48 bits: exact in the float64 that a scalar all-reduce carries.
    text = json.dumps(value, sort_keys=True, default=str)
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:12], 16)


class LogdirLock:
    """An exclusive lock on a logdir (`<logdir>/.lock`, held with flock while the run lives).

    The kernel drops the lock when the process ends however it ends, so a killed run
    never leaves its logdir locked. The file keeps the holder's pid and host for the
    message a second process gets.
    """

    def __init__(self, logdir, config=None):
        self.logdir = logdir
        self.config = config
        self._descriptor = None

    def __enter__(self):
        import fcntl

        self._existing = _nearest_existing(self.logdir)
        usable(self.logdir, self.config)
        path = os.path.join(self.logdir, LOCK_FILE)
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise _unusable(self.logdir, self.config, error) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_holder(descriptor)
            os.close(descriptor)
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise _unusable(self.logdir, self.config, error) from None
            raise RunRefused(
                f"logdir {self.logdir} is in use by another opt-train process ({holder}); "
                "wait for it to end, or choose another logdir"
            ) from None
        self._descriptor = descriptor
        try:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        except OSError as error:
            self.__exit__(None, None, None)
            raise _unusable(self.logdir, self.config, error) from None
        return self

    def __exit__(self, *exc_info):
        if self._descriptor is not None:
            self._forget_if_unused()
            with contextlib.suppress(OSError):
                os.close(self._descriptor)  # closing the only descriptor releases the flock
            self._descriptor = None

    def _forget_if_unused(self):
        """A run that wrote nothing (a config that failed while building) leaves no logdir behind."""
        with contextlib.suppress(OSError):
            if os.listdir(self.logdir) != [LOCK_FILE]:
                return
            os.remove(os.path.join(self.logdir, LOCK_FILE))
            folder = os.path.abspath(self.logdir)
            while folder != self._existing and folder != os.path.dirname(folder):
                os.rmdir(folder)  # only the folders this lock created, each empty
                folder = os.path.dirname(folder)


def _nearest_existing(path):
    """`path`, or its nearest ancestor that exists (absolute)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and path != os.path.dirname(path):
        path = os.path.dirname(path)
    return path


def _read_holder(descriptor):
    try:
        text = os.pread(descriptor, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "pid unknown"


def usable(logdir, config=None):
    """Creates `logdir` if needed; a path that cannot be a writable folder is one RunRefused line."""
    if os.path.lexists(logdir) and not os.path.isdir(logdir):
        raise RunRefused(f"{_key(config)}: {logdir} exists and is not a folder; choose another logdir")
    try:
        os.makedirs(logdir, exist_ok=True)
    except OSError as error:
        raise _unusable(logdir, config, error) from None
    if not os.access(logdir, os.W_OK | os.X_OK):
        raise RunRefused(f"{_key(config)}: {logdir} is not writable; choose another logdir")


def _key(config):
    return where(config, "logdir") if config is not None else "logdir"


def _unusable(logdir, config, error):
    if error.errno == errno.ENOSPC:
        return TrainingFailed(f"disk full: cannot write in logdir {logdir} ({error.strerror})")
    reason = {
        errno.ENOTDIR: "a part of its path is a file, not a folder",
        errno.EEXIST: "a part of its path is a file, not a folder",
        errno.EROFS: "it is on a read-only file system",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
    }.get(error.errno, error.strerror or str(error))
    return RunRefused(f"{_key(config)}: cannot use {logdir}: {reason}; choose another logdir")


def prepare(config, backend, *, resume, resume_changed=False):
    """Decides where the run goes and whether it continues; returns (config, resume, notes). Writes nothing.

    - `resume` (the default): a logdir holding a run continues only if the config
      describes the same run (RunRefused otherwise), or anyway with `resume_changed`.
    - not `resume` (`--no-resume`, `--benchmark`): a logdir holding a run is left as it
      is and the new run goes to a fresh folder beside it, `<logdir>-N`.
    Under Horovod the ranks must agree on the whole config (checked here, at start).
    """
    notes = []
    logdir = config.logdir
    if os.path.isdir(logdir) and holds_run(logdir):
        if not resume:
            fresh = fresh_folder(logdir)
            notes.append(f"logdir {logdir} holds a run, left as it is; starting afresh in {fresh}")
            config = dataclasses.replace(config, logdir=fresh)
        else:
            changed = check_same_run(config, logdir, continue_anyway=resume_changed)
            if changed:
                keys = ", ".join(key for key, _, _ in changed)
                notes.append(f"--resume: continuing {logdir} with changed {keys}")
    if backend.size > 1:
        mine = config_fingerprint(config)
        low, high = backend.allreduce_scalar(mine, op="min"), backend.allreduce_scalar(mine, op="max")
        if low != high:
            differing = _keys_ranks_disagree_on(config, backend)
            shown = "; ".join(f"{where(config, key)} {_show(config.to_dict()[key])} on rank {backend.rank}"
                              for key in differing[:4])
            more = f" (and {len(differing) - 4} more)" if len(differing) > 4 else ""
            raise RunRefused(
                f"the {backend.size} ranks were given different configs: {shown}{more}; "
                "every rank must run the same config files and --set values"
            )
    return config, resume, notes


def _keys_ranks_disagree_on(config, backend):
    """The top-level keys whose values differ between ranks (every rank calls this, in the same order)."""
    values = config.to_dict()
    differing = []
    for key in sorted(values):  # the same keys on every rank: the fields of TrainConfig
        mine = _fingerprint(values[key])
        if backend.allreduce_scalar(mine, op="min") != backend.allreduce_scalar(mine, op="max"):
            differing.append(key)
    return differing
