"""Where a run's figures go: TensorBoard event files and `metrics.jsonl` (rank 0 only)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import tensorflow as tf

from opt_train.atomic import write_json
from opt_train.training.histograms import write_histogram


class Reporter:
    """Writes scalars and histograms to TensorBoard and scalar records to metrics.jsonl."""

    def __init__(self, logdir, enabled=True):
        self.enabled = enabled
        if not enabled:
            return
        os.makedirs(logdir, exist_ok=True)
        self.train_writer = tf.summary.create_file_writer(os.path.join(logdir, "train"))
        self.eval_writer = tf.summary.create_file_writer(os.path.join(logdir, "eval"))
        self.jsonl = open(os.path.join(logdir, "metrics.jsonl"), "a", encoding="utf-8")
        # Eager histogram writing costs tens of times a small model's step; compiled it
        # is cheap. One function per writer: a traced summary op is bound to the
        # writer that was the default when it was traced.
        self._compiled = {
            writer: tf.function(_write_summaries, reduce_retracing=True)
            for writer in (self.train_writer, self.eval_writer)
        }

    def summaries(self, step, values, writer=None):
        """TensorBoard: one-element values as scalars, larger tensors as histograms.

        `values` may hold tensors straight from the train op: nothing is copied to
        the host on the way.
        """
        if not self.enabled:
            return
        writer = writer or self.train_writer
        tensors = {name: tf.convert_to_tensor(value) for name, value in values.items()}
        with writer.as_default():
            self._compiled[writer](tf.constant(step, tf.int64), tensors)

    def eval_summaries(self, step, results):
        self.summaries(step, {f"eval/{k}": v for k, v in results.items()}, self.eval_writer)

    def record(self, record):
        """One JSON object per line, numbers as plain floats (NaN/inf as strings)."""
        if not self.enabled:
            return
        self.jsonl.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
        self.jsonl.flush()

    def close(self):
        if self.enabled:
            self.train_writer.flush()
            self.eval_writer.flush()
            self.jsonl.close()


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
