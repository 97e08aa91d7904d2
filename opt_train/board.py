"""How a run shows in TensorBoard, for the trainer and the sweep alike: each figure's run and tag, and the
HParams session (the keys that set the run apart: its non-default keys, a sweep's swept keys) in the logdir.

Every figure is written by `training/reporting.py` under `tag(name, split)`; the sweep's
HParams experiment names the same (run, tag) through `run_and_tag`.

The session summary sits in the logdir itself, the parent of the `train` and `eval`
runs, as Keras's `hp.KerasCallback` places it: TensorBoard's HParams tab then takes a
run's metrics from those two runs (`loss` in group `train`, `loss` and every metric
in group `eval`, last values), so runs started by hand compare there as a sweep's
trials do. Nothing else writes event files directly in the logdir, so each write
replaces the one before (a resumed run shows once).
"""

from __future__ import annotations

import glob
import os

# Tags that keep their name: what people look at first.
_PLAIN_TAGS = ("loss", "learning_rate")
# Throughput figures: their own card group.
_PERF_TAGS = ("samples_per_sec",)
# The x axis of every card, not a curve of its own.
_NOT_PLOTTED = ("global_step",)


def tag(name, split="train"):
    """The TensorBoard tag of figure `name` in run `split` (None: not plotted).

    Evaluation metrics and the loss keep their name, so `train/loss` and `eval/loss`
    share a card; a name with a `/` (per-variable summaries, `larc/...`) is kept; any
    other training statistic is the pipeline's bookkeeping (`pipeline/loss_scale`).
    """
    if name in _NOT_PLOTTED:
        return None
    if split != "train" or name in _PLAIN_TAGS or "/" in name:
        return name
    if name in _PERF_TAGS:
        return f"perf/{name}"
    return f"pipeline/{name}"


def run_and_tag(key):
    """Where a `final_metrics.json` key (`eval/accuracy`, `train/loss`, `skipped_steps`) is plotted: (run, tag) or None."""
    split, _, name = key.rpartition("/")
    if split in ("train", "eval"):
        return split, tag(name, split)
    plotted = tag(key)
    return ("train", plotted) if plotted else None


_EVENT_PATTERN = "events.out.tfevents.*"


def hparam_value(value):
    """A value as HParams takes it: bool, float or string (a list or mapping as its YAML flow text)."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    import math

    import yaml

    return yaml.safe_dump(value, default_flow_style=True, width=math.inf).removesuffix("\n").removesuffix("\n...")


def leaves(mapping, prefix=""):
    """`(dotted key, value)` of every leaf of a nested mapping (an empty mapping has none)."""
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from leaves(value, dotted + ".")
        else:
            yield dotted, value


def clear_session(logdir):
    """Removes the event files directly in `logdir` (the session's; the runs keep theirs in subfolders)."""
    for path in glob.glob(os.path.join(glob.escape(str(logdir)), _EVENT_PATTERN)):
        os.remove(path)


def write_summary(logdir, summary):
    """Writes `summary` (a `Summary` proto) at step 0 as the only event file directly in `logdir`, replacing any.

    TensorBoard's own record format and protos, without TensorFlow: the sweep driver
    writes its HParams summaries without paying TensorFlow's import (seconds of CPU and
    hundreds of MiB beside the trials it runs). The file reads as one
    `tf.summary.create_file_writer` would leave: a version event, then the summary.
    """
    import socket
    import time

    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    os.makedirs(logdir, exist_ok=True)
    clear_session(logdir)
    now = time.time()
    name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.0.v2"
    with open(os.path.join(str(logdir), name), "wb") as handle:
        records = RecordWriter(handle)
        records.write(event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString())
        records.write(event_pb2.Event(wall_time=now, step=0, summary=summary).SerializeToString())


def write_session(logdir, values, group_name=None):
    """Writes the HParams session of the run in `logdir`: `values` ({name: bool/float/str}), replacing an earlier one."""
    from tensorboard.plugins.hparams import summary_v2

    trial_id = group_name or os.path.basename(os.path.normpath(str(logdir)))
    write_summary(logdir, summary_v2.hparams_pb(values, trial_id=trial_id))


def write_run_hparams(config):
    """The HParams session of a run started by `opt-train train`: the keys its config sets apart from the defaults.

    TensorBoard orders the columns by name and shows the first five: a key left at its
    default, or one that does not define the run (`logdir`, `max_steps`, `print_loss_steps`,
    ...), would only push the ones that differ out of sight.
    """
    # One column per leaf: `optimizer_params.learning_rate`, not the mapping as text.
    write_session(config.logdir, {key: hparam_value(value) for key, value in leaves(config.chosen())})
