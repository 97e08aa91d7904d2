"""Where a run's figures go: TensorBoard event files and `metrics.jsonl` (rank 0 only).

TensorBoard, as Keras's TensorBoard callback lays it out: one run per split (`train`,
`eval`; Keras says `validation`) with the same tag names in both (`loss` and every
metric), so train and eval curves overlay on one card. Loss, metrics and the learning
rate have plain tags; the gradient pipeline's bookkeeping (loss scale, overflows,
skipped updates, gradient norms) goes under `pipeline/` and throughput under `perf/`,
so its cards come after them. `opt_train.board.tag()` is the one home of that naming.

`metrics.jsonl` holds one record per step and kind (training figures, evaluation,
a stop): on a resume the records after the restored step (written by the run that
was cut short) and a torn last line are dropped, and a record already there is not
written twice.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import tensorflow as tf

from opt_train.atomic import write_json, write_text
from opt_train.board import tag
from opt_train.training.histograms import write_histogram


class Reporter:
    """Writes scalars and histograms to TensorBoard and scalar records to metrics.jsonl."""

    def __init__(self, logdir, enabled=True, tracker=None):
        self.enabled = enabled
        if not enabled:
            return
        # Every record also goes to the experiment tracker (opt_train/tracking.py), if any.
        self.tracker = tracker
        self.logdir = logdir
        # Event files are made on first use: a run refused at its restore leaves none behind.
        self._writers = {}
        self.jsonl_path = os.path.join(logdir, "metrics.jsonl")
        self.jsonl = None
        self.records = []
        self._written = set()
        # Eager histogram writing costs tens of times a small model's step; compiled it
        # is cheap. One function per writer: a traced summary op is bound to the
        # writer that was the default when it was traced.
        self._compiled = {}

    def _writer(self, name):
        if name not in self._writers:
            writer = tf.summary.create_file_writer(os.path.join(self.logdir, name))
            self._writers[name] = writer
            self._compiled[writer] = tf.function(_write_summaries, reduce_retracing=True, autograph=False)
        return self._writers[name]

    def summaries(self, step, values, split="train"):
        """TensorBoard, in run `split`: one-element values as scalars, larger tensors as histograms.

        `values` may hold tensors straight from the train op: nothing is copied to
        the host on the way.
        """
        if not self.enabled:
            return
        writer = self._writer(split)
        tensors = {
            tag(name, split): _on_host(tf.convert_to_tensor(value)) for name, value in values.items()
            if tag(name, split)
        }
        with writer.as_default():
            self._compiled[writer](tf.constant(step, tf.int64), tensors)

    def eval_summaries(self, step, results):
        self.summaries(step, results, split="eval")

    def resume(self, step):
        """Keeps the records up to `step` (the restored one) and drops torn lines; then appends.

        Returns the lines to tell the user (an event file TensorBoard may misorder).
        """
        if not self.enabled:
            return []
        kept, changed = [], False
        try:
            with open(self.jsonl_path, encoding="utf-8") as handle:
                lines = handle.read().split("\n")
        except FileNotFoundError:
            lines = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                changed = True  # half a line: a run killed while writing it
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step"), int) or record["step"] > step:
                changed = True
                continue
            if _identity(record) in self._written:
                changed = True
                continue
            self._written.add(_identity(record))
            kept.append(record)
        if changed:
            write_text(self.jsonl_path, "".join(json.dumps(r) + "\n" for r in kept))
        self.records = kept
        return self._restart_event_files(step)

    def _restart_event_files(self, step):
        """Marks the resume in each event folder a run wrote before, so TensorBoard drops what follows `step`.

        A killed run's event files keep the summaries it wrote after its last checkpoint;
        they cannot be cut like metrics.jsonl. A `SessionLog.START` event at `step + 1`
        is TensorBoard's own sign of a restart: it purges every event read before it
        from that step on, so the curves show what the resumed run wrote there. TensorBoard
        takes a folder's first START for the session's beginning, not a restart, so two
        are written (the second purges whether or not the killed run wrote one).

        TensorBoard reads a folder's files in name order, and TensorFlow names a file
        `events.out.tfevents.<second>.<host>.<pid>...`: a resume within the second the
        killed run made its file may sort before it (a lower pid), and its sign would be
        read before the points it should purge. So the new file is made in a later second.
        """
        notes = []
        for name in ("train", "eval"):
            folder = os.path.join(self.logdir, name)
            earlier = [n for n in os.listdir(folder) if "tfevents" in n] if os.path.isdir(folder) else []
            if not earlier:
                continue
            wait = max(map(_file_second, earlier)) + 1 - time.time()
            if wait > _LONGEST_WAIT:
                notes.append(
                    f"{folder}: an event file is dated {wait:.0f} s ahead of this machine's clock; "
                    f"TensorBoard may show the earlier run's figures after step {step}"
                )
            elif wait > 0:
                time.sleep(wait)
            event = tf.compat.v1.Event(
                wall_time=time.time(), step=step + 1,
                session_log=tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START),
            )
            for _ in range(2):
                # A TF2 summary writer offers no public call for a whole Event; ImportEvent is its op.
                tf.raw_ops.ImportEvent(writer=self._writer(name)._resource, event=event.SerializeToString())
        return notes

    def last_record(self, key, step):
        """The last record at `step` that holds `key` (e.g. the loss of a run that trained to here), or None."""
        found = [r for r in self.records if r.get("step") == step and key in r]
        return found[-1] if found else None

    def record(self, record):
        """One JSON object per line, numbers as plain floats (NaN/inf as strings), once per step and kind."""
        if not self.enabled:
            return
        record = {k: _plain(v) for k, v in record.items()}
        identity = _identity(record)
        if identity in self._written:
            return  # e.g. the evaluation of a finished run, restarted: the same step, the same figures
        self._written.add(identity)
        self.records.append(record)
        if self.jsonl is None:
            self.jsonl = open(self.jsonl_path, "a", encoding="utf-8")
        self.jsonl.write(json.dumps(record) + "\n")
        self.jsonl.flush()
        if self.tracker is not None:
            self.tracker.log_figures(record)

    def close(self):
        if self.enabled:
            for writer in self._writers.values():
                writer.close()  # releases the event files (a logdir on a removable mount can go)
            self._writers = {}
            if self.jsonl is not None:
                self.jsonl.close()


# Seconds a resume waits for its event file to sort after the earlier ones: the file was
# made in this second, or by a clock (of another host sharing the logdir) a second ahead.
_LONGEST_WAIT = 2.0


def _file_second(name):
    """The second in a TensorFlow event file's name (`events.out.tfevents.<second>.<host>...`), or 0."""
    parts = name.split(".")
    return int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0


def _identity(record):
    """(step, kind): training figures, an evaluation, a stop or an interruption."""
    if "loss" in record:
        kind = "train"
    elif any(key.startswith("eval/") for key in record):
        kind = "eval"
    else:
        kind = ",".join(sorted(key for key in record if key != "step"))
    return record.get("step"), kind


def _on_host(value):
    """A mesh run's DTensor as one ordinary tensor (its whole value): summary ops have no DTensor rules."""
    from tensorflow.experimental import dtensor

    if not dtensor.is_dtensor(value):
        return value
    layout = dtensor.fetch_layout(value)
    if not layout.is_fully_replicated():
        value = dtensor.relayout(value, dtensor.Layout.replicated(layout.mesh, value.shape.rank))
    return dtensor.unpack(value)[0]


def _write_summaries(step, tensors):
    for name, value in tensors.items():
        value = tf.cast(value, tf.float32)
        if value.shape.num_elements() == 1:
            tf.summary.scalar(name, tf.reshape(value, []), step=step)
        else:
            write_histogram(name, value, step)


def _plain(value):
    value = np.asarray(value).item() if not isinstance(value, (str, int, float, bool)) else value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_final_metrics(path, payload):
    """`final_metrics.json`: plain numbers (NaN/inf as text), written atomically."""
    write_json(path, {k: _plain(v) for k, v in payload.items()})
