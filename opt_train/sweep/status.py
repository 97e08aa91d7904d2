"""A trial's state on disk: `trial.json` (ok / failed / pruned, reason, exit code, wall time) beside the run's
`final_metrics.json`, and why a run stopped, from its own records: `failure.json` (`opt_train/trial.py`) and
`metrics.jsonl`.

TF-free, so `--dry-run` can say which trials a re-run would skip.
"""

from __future__ import annotations

import json
import math
import os

from opt_train.atomic import read_json
from opt_train.distributed.launcher import exit_description
from opt_train.trial import read_failure

STATUS_FILE = "trial.json"
METRICS_FILE = "final_metrics.json"
LOG_FILE = "train.log"
RECORDS_FILE = "metrics.jsonl"

OK = "ok"
FAILED = "failed"
PENDING = "pending"
PRUNED = "pruned"
RUNNING = "running"
# A trial of an earlier base config: listed, never ranked or reported.
STALE = "stale"
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


def stop_record(logdir, key, start=0):
    """The run's last `metrics.jsonl` record holding `key` ("stopped", "pruned", "interrupted") written after
    byte `start`, or None."""
    try:
        with open(os.path.join(logdir, RECORDS_FILE), "rb") as handle:
            handle.seek(start)
            lines = handle.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed process
        if isinstance(record, dict) and key in record:
            return record
    return None


def records_size(logdir):
    """Bytes in the run's `metrics.jsonl` now (where the next attempt's records start)."""
    try:
        return os.path.getsize(os.path.join(logdir, RECORDS_FILE))
    except OSError:
        return 0


def failure_reason(log_path, exit_code, start=0, logdir=None, records_start=0):
    """Why a trial's process failed: its failure record (`failure.json`, the message, its lines joined by "; "),
    else (a process that died before it could write one) the run's `stopped` record, else its log's last
    `Error:` line, else the last line it wrote, else the exit code.

    The driver removes the failure record before each attempt; only what was written after byte `start`
    of the log (`records_start` of metrics.jsonl) counts: both are appended to by each attempt.
    """
    if exit_code is not None and exit_code < 0:
        return exit_description(exit_code)
    failure = read_failure(logdir) if logdir else None
    if failure is not None:
        return "; ".join(line.strip() for line in failure["message"].splitlines() if line.strip())
    stopped = stop_record(logdir, "stopped", records_start) if logdir else None
    if stopped is not None:
        return f"stopped at step {stopped.get('step')}: {stopped['stopped']}"
    lines = _log_tail(log_path, start)
    errors = [line for line in lines if line.startswith("Error:")]
    if errors:
        return errors[-1].removeprefix("Error:").strip()
    if lines:
        return lines[-1]
    return exit_description(exit_code)


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
