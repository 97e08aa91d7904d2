"""TensorBoard HParams summaries for a sweep: the experiment (swept keys, metrics) in DIR and one session per trial logdir.

TensorFlow and TensorBoard's hparams API are imported inside the functions, so
planning a sweep stays TF-free. Each write replaces the event files the sweep wrote
there before, so a resumed sweep shows each trial once.
"""

from __future__ import annotations

import glob
import os

from opt_train.sweep.plan import render
from opt_train.sweep.status import is_number

_EVENT_PATTERN = "events.out.tfevents.*"
# Metrics listed for the dashboard besides the chosen one, when any trial has them.
_USUAL_METRICS = ("eval/accuracy", "eval/loss", "train/loss", "global_step", "skipped_steps")


def hparam_value(value):
    """A swept value as HParams takes it: bool, float or string (lists and mappings as their YAML text)."""
    if isinstance(value, bool) or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return render(value)


def domain(key, values, distribution=None):
    """The HParams domain of `key`: the random range it was drawn from, else the discrete values seen (or None)."""
    from tensorboard.plugins.hparams import api as hp

    if distribution is not None and distribution.kind in ("log_uniform", "uniform", "int_uniform"):
        low, high = distribution.args
        return hp.RealInterval(float(low), float(high))
    converted = {hparam_value(value) for value in values}
    kinds = {type(value) for value in converted}
    if len(kinds) != 1:
        return None
    return hp.Discrete(sorted(converted))


def _clear_events(directory):
    """Removes the event files directly in `directory` (the sweep's own; runs keep theirs in subfolders)."""
    for path in glob.glob(os.path.join(directory, _EVENT_PATTERN)):
        os.remove(path)


def write_experiment(out, swept_keys, rows, metric, ranges=None):
    """Writes the experiment summary in `out`: one HParam per swept key, the metrics the trials report."""
    from opt_train.quiet import import_tensorflow

    tf = import_tensorflow()
    from tensorboard.plugins.hparams import api as hp

    ranges = ranges or {}
    hparams = []
    for key in swept_keys:
        values = [row["overrides"][key] for row in rows if key in row.get("overrides", {})]
        hparams.append(hp.HParam(key, domain(key, values, ranges.get(key))))
    seen = {name for row in rows for name in (row.get("metrics") or {})}
    names = [metric] + [name for name in _USUAL_METRICS if name in seen and name != metric]
    metrics = [hp.Metric(name, display_name=name) for name in names]
    os.makedirs(out, exist_ok=True)
    _clear_events(out)
    writer = tf.summary.create_file_writer(out)
    with writer.as_default():
        hp.hparams_config(hparams=hparams, metrics=metrics)
    writer.close()


def write_session(logdir, record):
    """Writes one trial's session in its logdir: its swept values and, when it finished, its final metrics."""
    from opt_train.quiet import import_tensorflow

    tf = import_tensorflow()
    from tensorboard.plugins.hparams import api as hp

    values = {key: hparam_value(value) for key, value in record["overrides"].items()}
    metrics = record.get("metrics") or {}
    step = int(metrics.get("global_step") or 0) if is_number(metrics.get("global_step")) else 0
    os.makedirs(logdir, exist_ok=True)
    _clear_events(logdir)
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        hp.hparams(values, trial_id=record["trial"])
        for name, value in metrics.items():
            if is_number(value):
                tf.summary.scalar(name, float(value), step=step)
    writer.close()
