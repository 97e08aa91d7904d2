"""A sweep's results: one record per trial, `results.jsonl`, and the plain-text table sorted by the chosen metric.

TF-free.
"""

from __future__ import annotations

import json
import math
import os

from opt_train.sweep.status import FAILED, OK, PENDING, PRUNED, RUNNING, STALE, is_number

RESULTS_FILE = "results.jsonl"
# Table and summary order after the ranked trials.
STATUS_ORDER = (OK, PRUNED, FAILED, RUNNING, PENDING, STALE)
# Metrics shown beside the chosen one when the trials have them.
EXTRA_COLUMNS = ("train/loss", "global_step")


def make_record(trial, logdir, status, *, reason=None, exit_code=None, wall_time=None, metrics=None):
    """The facts about one trial, as stored in `trial.json`, `results.jsonl` and the study."""
    return {
        "trial": trial.name,
        "number": trial.number,
        "status": status,
        "reason": reason,
        "exit_code": exit_code,
        "wall_time": None if wall_time is None else round(wall_time, 3),
        "repeat": trial.repeat,
        "overrides": trial.values,
        "logdir": logdir,
        "metrics": metrics or {},
    }


def append_result(out, record):
    """Appends `record` as one line to `out/results.jsonl` (non-finite numbers as text, like metrics.jsonl)."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, RESULTS_FILE), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(finite_json(record), sort_keys=False) + "\n")


def finite_json(value):
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def sort_rows(rows, metric, mode):
    """Finished trials best first by `metric` (`mode` min or max), then ok ones without it, pruned, failed,
    running, pending, stale.

    Ties keep the plan order.
    """

    def rank(row):
        value = row.get("metrics", {}).get(metric)
        if row["status"] == OK and is_number(value):
            return (0, -value if mode == "max" else value)
        return (1 + STATUS_ORDER.index(row["status"]) if row["status"] in STATUS_ORDER else len(STATUS_ORDER) + 1, 0)

    return sorted(rows, key=rank)


def format_value(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _status_text(row):
    if row["status"] == FAILED:
        return f"failed: {row.get('reason') or 'unknown reason'}"
    if row["status"] == PRUNED:
        return f"pruned: {row.get('reason') or 'by the pruner'}"
    return row["status"]


def format_table(rows, swept_keys, metric, mode):
    """Aligned plain-text columns: trial, swept values, the metric, a few more metrics, status (reason last)."""
    extras = [name for name in EXTRA_COLUMNS if name != metric]
    headers = ["trial", *swept_keys, metric, *extras, "status"]
    body = []
    for row in sort_rows(rows, metric, mode):
        metrics = row.get("metrics") or {}
        values = row.get("overrides") or {}
        cells = [row["trial"]]
        cells += [format_value(values.get(key)) for key in swept_keys]
        cells += [format_value(metrics.get(name)) for name in [metric, *extras]]
        cells.append(_status_text(row))
        body.append(cells)
    widths = [max(len(line[column]) for line in [headers, *body]) for column in range(len(headers) - 1)]
    lines = []
    for cells in [headers, *body]:
        padded = [cell.ljust(width) for cell, width in zip(cells, widths)]
        lines.append("  ".join([*padded, cells[-1]]))
    return "\n".join(lines)


def summary_line(rows, metric, mode, out):
    """`6 trials: 4 ok, 1 pruned, 1 failed; sorted by eval/accuracy (max); results in DIR/results.jsonl`."""
    counts = {status: sum(row["status"] == status for row in rows) for status in STATUS_ORDER}
    shown = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    return (
        f"{len(rows)} trials: {shown}; sorted by {metric} ({mode}); "
        f"results in {os.path.join(out, RESULTS_FILE)}"
    )


def jsonable(value):
    """`value` with non-finite floats as text, as results.jsonl keeps them (the study stores strict JSON)."""
    return json.loads(json.dumps(finite_json(value), default=str))
