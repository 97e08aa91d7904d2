"""Checkpoints on disk: save every N updates keeping the newest K; restore the newest that restores whole.

`tf.train.CheckpointManager` writes the data files first and then replaces the
`checkpoint` state file atomically, so a kill during a save leaves the state file
pointing at the previous, complete checkpoint. The state file is not what restore goes
by: the checkpoints found from the `.index` files present are tried newest first (a kill
between a save's index and its state file leaves a newer complete one the state file
does not name), and each is verified (every saved object matched, every object
restored) before it is used. A damaged newest checkpoint is passed over with one line,
and the state file is rebuilt from what restored, naming each checkpoint relative to its
own folder, so the manager's rotation never deletes a good checkpoint because a newer
one failed to load. What an interrupted save leaves (`ckpt-N_temp/`, a `.data` file
without its `.index`) is removed by the next run that writes checkpoints.
"""

from __future__ import annotations

import errno
import os
import re
import shutil

import tensorflow as tf

from opt_train import scratch
from opt_train.checkpoint_paths import (  # noqa: F401 - resolve_checkpoint, ACCEPTED: read from here too
    _DATA_FILE, ACCEPTED, _number, list_checkpoints, resolve_checkpoint,
)
from opt_train.training.errors import RunRefused, TrainingFailed

# What TF's checkpoint reader raises on a damaged file or a checkpoint of another model
# (a short read surfaces as IndexError from its C++ reader).
_RESTORE_ERRORS = (tf.errors.OpError, ValueError, AssertionError, OSError, IndexError, KeyError, RuntimeError)
# How the folders begin that non-chief workers write their discarded part of a collective save to.
WORKER_SAVE_PREFIX = "opt-train-worker-save-"


class CheckpointUnusable(Exception):
    """One checkpoint cannot be restored into this run (damaged, or saved by another model)."""


def _first_line(error):
    text = str(error).strip().splitlines()
    text = text[0] if text else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class Checkpoints:
    """The run's checkpoint directory (`<logdir>/checkpoints`)."""

    def __init__(self, logdir, items, *, step, max_to_keep, writer=True, optional=None, collective=False,
                 together=False, refused_hint=None):
        self.directory = os.path.join(logdir, "checkpoints")
        # What the command that reads them can do when none restores (train: --no-resume; eval: its config).
        self.refused_hint = refused_hint
        self.checkpoint = tf.train.Checkpoint(**items)
        # {item: fill()}: items a checkpoint written before they existed may lack; such a
        # checkpoint still restores whole (everything else), then `fill` sets the item.
        self._items = dict(items)
        self._optional = dict(optional or {})
        self.writer = writer
        # Every process saves (its reads of replica-local variables are collectives); a
        # non-writer's copy goes to a temporary folder, removed at once.
        self.collective = collective
        # A collective save whose every part lands in the writer's checkpoint (`Backend.saves_together`):
        # a non-writer writes to the same path, the writer alone keeps the state file and rotates.
        self.together = together
        self.step_counter = step
        self.max_to_keep = max_to_keep
        self.last_saved_step = None
        # One line per checkpoint passed over on restore, for the progress output.
        self.notes = []
        # Made on the first save: it reads the state file, which a restore may rebuild first.
        self._manager = None

    @property
    def latest(self):
        found = list_checkpoints(self.directory)
        return found[0] if found else None

    def restore(self, path=None, *, whole=True):
        """Restores `path`, or else the newest checkpoint that restores; returns the path restored, or None.

        `whole`: every object of the checkpoint must match one of this run and every
        object of this run must be restored (a resume); otherwise only this run's
        objects must all be found (an evaluation of the model alone).
        """
        if path is not None:
            self._restore_one(path, whole, given=True)
            return path
        if self.writer:
            self.remove_debris()
        failures = []
        for candidate in self._candidates():
            try:
                self._restore_one(candidate, whole)
            except CheckpointUnusable as error:
                failures.append((candidate, error))
                continue
            self.notes += [
                f"checkpoint {os.path.basename(bad)} does not restore ({error}); it is passed over, not deleted"
                for bad, error in failures
            ]
            number = _number(candidate)
            self.last_saved_step = number if number >= 0 else None
            if self.writer:
                self._rebuild_state(candidate)
            return candidate
        if failures:
            newest, error = failures[0]
            raise RunRefused(
                f"no checkpoint in {self.directory} restores into this run ({len(failures)} tried); "
                f"{os.path.basename(newest)}: {str(error).rstrip('.')}"
                + (f". {self.refused_hint}" if self.refused_hint else "")
            )
        return None

    def _candidates(self):
        """Every checkpoint with an index, newest first (each is verified as it is restored)."""
        return list_checkpoints(self.directory)

    def _restore_one(self, path, whole, given=False):
        status = None
        missing = self._missing_optional(path)
        checkpoint = self.checkpoint
        if missing:
            checkpoint = tf.train.Checkpoint(**{k: v for k, v in self._items.items() if k not in missing})
        try:
            status = checkpoint.restore(path)
            if whole:
                status.assert_consumed()
            else:
                status.expect_partial()
                status.assert_existing_objects_matched()
        except _RESTORE_ERRORS as error:
            if status is not None:
                status.expect_partial()  # the refusal says it; TF's warnings at exit would repeat it
            if given:
                raise RunRefused(f"checkpoint {path} does not restore into this model: {_first_line(error)}") from None
            raise CheckpointUnusable(_first_line(error)) from None
        for name in missing:
            self._optional[name]()

    def _missing_optional(self, path):
        """The optional items `path` has no value for (none when it cannot be read: restore says why)."""
        if not self._optional:
            return []
        try:
            saved = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
        except _RESTORE_ERRORS:
            return []
        return [name for name in self._optional if name not in saved]

    def _rebuild_state(self, restored):
        """Points the `checkpoint` state file at `restored` and the complete checkpoints before it."""
        number = _number(restored)
        kept = [p for p in reversed(list_checkpoints(self.directory)) if _number(p) <= number]
        kept = [p for p in kept if any(n.startswith(os.path.basename(p) + ".data-") for n in os.listdir(self.directory))]
        try:
            state = tf.train.get_checkpoint_state(self.directory)
        except Exception:  # noqa: BLE001 - a garbled state file is what is being rebuilt
            state = None
        if state is not None and state.model_checkpoint_path == restored and list(state.all_model_checkpoint_paths) == kept:
            return
        # With their times, the manager rotates these as its own (without, it keeps them forever).
        # An absolute folder: given a relative one, TF writes each name relative to the
        # current directory instead ("../../ckpt-6"), which nothing then finds.
        tf.compat.v1.train.update_checkpoint_state(
            os.path.abspath(self.directory),
            os.path.basename(restored),
            all_model_checkpoint_paths=[os.path.basename(p) for p in kept],
            all_model_checkpoint_timestamps=[os.path.getmtime(p + ".index") for p in kept],
        )

    def save(self, step):
        """Writes a checkpoint for update `step` once (rank 0 only; others do nothing).

        A failed save (disk full, say) is a TrainingFailed naming the previous
        checkpoint, which stays intact; the save's temporary files are removed.
        """
        if step == self.last_saved_step:
            return None
        if not self.writer:
            if self.together:
                self._save_alongside(step)
            elif self.collective:
                self._save_and_discard(step)
            return None
        if self._manager is None:
            if not self.together:  # the others may be writing their parts into `ckpt-N_temp` already
                self.remove_debris()
            self._manager = tf.train.CheckpointManager(
                self.checkpoint, self.directory, max_to_keep=self.max_to_keep, step_counter=self.step_counter
            )
        try:
            path = self._manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as error:
            self._remove_temporaries()
            previous = self.latest
            kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint"
            if _is_disk_full(error):
                raise TrainingFailed(f"disk full while saving the checkpoint at step {step}; {kept}") from None
            raise TrainingFailed(f"could not save the checkpoint at step {step}: {_first_line(error)}; {kept}") from None
        self.last_saved_step = step
        return path

    def _save_alongside(self, step):
        """A non-writer's part in a save that lands whole in the writer's checkpoint (`together`).

        The same path and the same objects as the writer's `CheckpointManager.save` (which
        counts `save_counter` too), so that every process runs the same save.
        """
        write_alongside(self.checkpoint, self.directory, step)
        self.last_saved_step = step

    def _save_and_discard(self, step):
        """A non-chief worker's part in a collective save: written to a local temporary folder, then deleted.

        Not in the logdir: the chief removes what it finds of interrupted saves there. The
        folders of workers killed during a save (a restart ends one stuck in the save's
        collective) are removed here too, on the next save of a worker on this machine.
        """
        scratch.remove_orphans(WORKER_SAVE_PREFIX)
        folder = scratch.make_folder(WORKER_SAVE_PREFIX)
        try:
            self.checkpoint.write(os.path.join(folder, "ckpt"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        self.last_saved_step = step

    def remove_debris(self):
        """Removes what interrupted saves left: temporaries, and `.data` files whose `.index` was never written."""
        self._remove_temporaries()
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        indexed = {name[: -len(".index")] for name in names if name.endswith(".index")}
        for name in names:
            found = _DATA_FILE.match(name)
            if found and found.group("prefix") not in indexed:
                try:
                    os.unlink(os.path.join(self.directory, name))
                except OSError:
                    pass

    def _remove_temporaries(self):
        """What a failed save leaves: `ckpt-N_temp/` folders and the state file's temporary."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            path = os.path.join(self.directory, name)
            if name.endswith("_temp") or "_temp/" in name or re.search(r"_temp$|\.tmp[0-9a-f]*$", name):
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass


def write_alongside(checkpoint, directory, step):
    """A non-writer's part of the writer's `CheckpointManager(checkpoint, directory).save(checkpoint_number=step)`.

    The same path and the same objects, with `save_counter` counted as the manager counts it,
    so that every process runs the same collective save (`Backend.saves_together`).
    """
    checkpoint.save_counter.assign_add(1)
    checkpoint.write(os.path.join(directory, f"ckpt-{step}"))


def _is_disk_full(error):
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return "No space left" in str(error) or isinstance(error, tf.errors.ResourceExhaustedError)
