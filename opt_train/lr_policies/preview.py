"""A schedule's values over a run, as a summary, a text table, a CSV file and a PNG plot.

Used by `opt-train lr`. Step `i` is the i-th optimizer update (0-based): the
optimizer applies `schedule(i)` on it, so a run of N updates uses steps
0 .. N-1. Imports no TensorFlow itself (the schedule does); matplotlib is
imported only when a plot is asked for, with the Agg backend.
"""

from __future__ import annotations

import csv
from typing import NamedTuple

import numpy as np

from opt_train.errors import ParamError

# Default table length when no --every is given.
TABLE_ROWS = 20
# The preview holds one float32 per update: 40 MB at this bound, and seconds to compute.
MAX_STEPS = 10_000_000


class Summary(NamedTuple):
    """The figures the preview prints above the table."""

    steps: int
    first: float
    peak: float
    peak_step: int
    last: float


def evaluate(schedule, steps):
    """The learning rate at every update 0 .. steps-1, as a float32 NumPy array."""
    if steps < 1:
        raise ParamError("steps", "out_of_range", "must be >= 1", steps)
    if steps > MAX_STEPS:
        raise ParamError("steps", "out_of_range", f"must be <= {MAX_STEPS:,}", steps)
    values = schedule(np.arange(steps, dtype=np.int64))
    values = np.asarray(values, dtype=np.float32)
    if values.shape != (steps,):
        # A schedule that is not element-wise: evaluate one step at a time.
        values = np.array([float(schedule(step)) for step in range(steps)], dtype=np.float32)
    return values


def summarize(values):
    """First, peak (with its step) and last value."""
    peak_step = int(np.argmax(values))
    first, peak, last = float(values[0]), float(values[peak_step]), float(values[-1])
    return Summary(len(values), first, peak, peak_step, last)


def default_every(steps):
    """A row interval that gives about TABLE_ROWS rows."""
    return max(1, steps // TABLE_ROWS)


def sample(values, every):
    """`(step, value)` rows every `every` updates, always ending with the last update."""
    steps = list(range(0, len(values), every))
    if steps[-1] != len(values) - 1:
        steps.append(len(values) - 1)
    return [(step, float(values[step])) for step in steps]


def format_report(values, every, title=""):
    """The summary lines and the table, as printable text."""
    summary = summarize(values)
    lines = [title] if title else []
    lines += [
        f"updates: {summary.steps}",
        f"first:   {summary.first:.6g} (step 0)",
        f"peak:    {summary.peak:.6g} (step {summary.peak_step})",
        f"last:    {summary.last:.6g} (step {summary.steps - 1})",
        "",
        f"{'step':>10}  learning_rate",
    ]
    lines += [f"{step:>10}  {value:.6g}" for step, value in sample(values, every)]
    return "\n".join(lines)


def write_csv(path, rows):
    """Writes `step,learning_rate` rows with a header."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "learning_rate"])
        for step, value in rows:
            writer.writerow([step, repr(value)])


def write_plot(path, values, title=""):
    """Saves a PNG of the learning rate against the update number."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    try:
        axes.plot(np.arange(len(values)), values, linewidth=1.5)
        axes.set_xlabel("optimizer update")
        axes.set_ylabel("learning rate")
        axes.set_title(title or "learning-rate schedule")
        axes.set_xlim(0, max(len(values) - 1, 1))
        axes.set_ylim(bottom=0)
        axes.grid(True, alpha=0.3)
        axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
