"""What a run learned about its data, as JSON beside its checkpoints and its export: the label vocabulary and the input statistics.

`logdir/data.json` is written when a run starts and read back by every later command
on that logdir (`eval`, `predict`, `export`, a resume), so they standardise with the
statistics the model trained on even when the data files changed or are gone; the export
folder gets a copy for whoever serves the model.
"""

from __future__ import annotations

import json
import os

from opt_train.data.normalization import Statistics

FILE = "data.json"


def to_json(task):
    """`{"labels": [...] | null, "normalization": {...} | null, "columns": [...] | null}` of a Task.

    `columns`: the training CSV's header, label column included (the model's `inputs` are
    the other columns, in this order), or null when the data had no column names.
    """
    statistics = task.normalization
    return {
        "labels": None if task.labels is None else list(task.labels),
        "normalization": None if statistics is None else statistics.to_json(),
        "columns": None if task.columns is None else list(task.columns),
    }


def write(directory, task):
    """Writes `directory/data.json` (atomically) and returns its path."""
    from opt_train.atomic import write_bytes

    path = os.path.join(directory, FILE)
    write_bytes(path, (json.dumps(to_json(task), indent=1) + "\n").encode())
    return path


def read_statistics(directory):
    """The normalization Statistics saved in `directory/data.json`, or None."""
    path = os.path.join(directory, FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        saved = json.load(handle).get("normalization")
    return None if saved is None else Statistics.from_json(saved)


def describe(task):
    """The lines a run prints at start about its data: the label vocabulary, the standardisation."""
    lines = []
    if task.labels is not None and task.labels != tuple(range(len(task.labels))):
        shown = ", ".join(f"{index}={value}" for index, value in enumerate(task.labels[:20]))
        more = f", ... ({len(task.labels)} classes)" if len(task.labels) > 20 else ""
        lines.append(f"labels (class id = value in the data): {shown}{more}")
    if task.normalization is not None:
        lines.append(f"inputs standardised with the mean and std of {task.normalization.count} train examples "
                     "(data_params.normalize: false turns it off)")
    return lines
