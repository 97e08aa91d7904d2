"""TensorBoard HParams summaries for a sweep: the experiment (swept keys, metrics) in DIR and one session per trial logdir.

The experiment and every trial's session hold the swept keys alone: a key every trial
shares is no column (TensorBoard orders columns by name and shows the first five, so
constant ones would hide the swept ones). A trial's session replaces the one its run
wrote (`opt_train/board.py`): the trial's curves stay in its `train` and `eval` runs, and the experiment's
metrics point there (`accuracy` in group `eval`), so a trial adds no third run.
TensorBoard's hparams API is imported inside the functions, and the event files are
written without TensorFlow (`board.write_summary`), so the whole sweep driver stays
TF-free. Each write replaces the event files the sweep wrote there before, so a
resumed sweep shows each trial once.
"""

from __future__ import annotations

import os

from opt_train import board
from opt_train.board import hparam_value, run_and_tag

# Metrics listed for the dashboard besides the chosen one, when any trial has them.
_USUAL_METRICS = ("eval/accuracy", "eval/loss", "train/loss", "skipped_steps")


def domain(key, values, distribution=None):
    """The HParams domain of `key`: the random range it was drawn from, else the discrete values seen (or None)."""
    from tensorboard.plugins.hparams import summary_v2 as hp  # not `api`: it imports TensorFlow

    if distribution is not None and distribution.kind in ("log_uniform", "uniform", "int_uniform"):
        low, high = distribution.args
        return hp.RealInterval(float(low), float(high))
    converted = {hparam_value(value) for value in values}
    kinds = {type(value) for value in converted}
    if len(kinds) != 1:
        return None
    return hp.Discrete(sorted(converted))


def _metric(name):
    """The HParams metric of a final-metrics key: its tag in the trial's `train` or `eval` run."""
    from tensorboard.plugins.hparams import summary_v2 as hp  # not `api`: it imports TensorFlow

    run, tag = run_and_tag(name)
    return hp.Metric(tag, group=run, display_name=name)


def write_experiment(out, swept_keys, rows, metric, ranges=None):
    """Writes the experiment summary in `out`: one HParam per swept key (no other), the metrics the trials report."""
    from tensorboard.plugins.hparams import summary_v2 as hp  # not `api`: it imports TensorFlow

    ranges = ranges or {}
    columns = []
    for key in swept_keys:
        values = [row["overrides"][key] for row in rows if key in row.get("overrides", {})]
        columns.append(hp.HParam(key, domain(key, values, ranges.get(key))))
    seen = {name for row in rows for name in (row.get("metrics") or {})}
    names = [metric] + [name for name in _USUAL_METRICS if name in seen and name != metric]
    metrics = [_metric(name) for name in names]
    board.write_summary(out, hp.hparams_config_pb(hparams=columns, metrics=metrics))


def write_session(logdir, record):
    """Writes one trial's session in its logdir: its swept values (the record's overrides), nothing else.

    Its metrics are the last values of its `train` and `eval` runs, which the
    experiment's metrics name.
    """
    # One column per swept key, as in the experiment: a swept mapping stays one value.
    values = {key: hparam_value(value) for key, value in record["overrides"].items()}
    board.write_session(logdir, values, group_name=record["trial"])
