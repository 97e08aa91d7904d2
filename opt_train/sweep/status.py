"""A trial's state on disk: `trial.json` (ok / failed, reason, exit code, wall time) beside the run's `final_metrics.json`.

TF-free, so `--dry-run` can say which trials a re-run would skip.
"""

from __future__ import annotations

import math
import os
import signal

from opt_train.atomic import read_json

STATUS_FILE = "trial.json"
METRICS_FILE = "final_metrics.json"
LOG_FILE = "train.log"

OK = "ok"
FAILED = "failed"
PENDING = "pending"
# How much of the end of train.log is read to find why a trial failed.
_LOG_TAIL_BYTES = 16384


def final_metrics(logdir):
    """`final_metrics.json` of the run in `logdir`, numbers only (NaN written as text becomes a float)."""
    payload = read_json(os.path.join(logdir, METRICS_FILE))
    if payload is None:
        return None
    return {key: number(value) for key, value in payload.items()}


def number(value):
    """A metric as a float where it is one (`"nan"` -> nan), else unchanged."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def trial_state(logdir):
    """`(status, record)`: OK or FAILED with the stored `trial.json` record, or PENDING with None.

    A trial is finished when its `trial.json` says failed, or when its run wrote
    `final_metrics.json` (even if it ran outside the sweep, from `--print-commands`).
    """
    record = read_json(os.path.join(logdir, STATUS_FILE))
    metrics = final_metrics(logdir)
    if record is not None and record.get("status") == FAILED:
        return FAILED, record
    if metrics is not None:
        record = dict(record or {"status": OK, "reason": None, "exit_code": None, "wall_time": None})
        record["status"] = OK
        record["metrics"] = metrics
        return OK, record
    return PENDING, None


def failure_reason(log_path, exit_code, start=0):
    """Why a trial's process failed: its last `Error:` line, else the last line it wrote, else the exit code.

    Only what was written after byte `start` counts (the log is appended to by each attempt).
    """
    if exit_code is not None and exit_code < 0:
        return exit_description(exit_code)
    lines = _log_tail(log_path, start)
    errors = [line for line in lines if line.startswith("Error:")]
    if errors:
        return errors[-1].removeprefix("Error:").strip()
    if lines:
        return lines[-1]
    return exit_description(exit_code)


def exit_description(exit_code):
    """`exit code 3`, or `killed by SIGKILL` for a process ended by a signal."""
    if exit_code is not None and exit_code < 0:
        try:
            return f"killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    return f"exit code {exit_code}"


def _log_tail(log_path, start=0):
    """The non-empty lines at the end of the log after byte `start` (progress redraws split on carriage returns)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(start, handle.tell() - _LOG_TAIL_BYTES))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    pieces = text.replace("\r", "\n").splitlines()
    return [piece.strip() for piece in pieces if piece.strip()]


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
