"""The contract between a sweep and each trial process it starts (TF-free, Optuna imported only to build a pruner).

Both ends read this module and nothing of each other: the sweep (`opt_train/sweep`)
describes the trial in `OPT_TRAIN_SWEEP_TRIAL` and reads the failure record; the
trainer (`opt_train/training/pruning.py`, `opt-train train`) reads the description,
builds the same pruner, exits `PRUNED_EXIT_CODE` when pruned and, when it fails,
writes `failure.json` in its logdir (under `--np`, the launcher writes its verdict last):

    {"exit_code": 1, "error": "TrainingFailed", "key": null, "code": null,
     "message": "stopped at step 10: 3 consecutive non-finite steps"}

`key` is the full dotted config key the failure names (`data_params.batch_size`)
and `code` its stable code (`out_of_range`) when the failure is a config problem.
"""

from __future__ import annotations

import json
import os

from opt_train.atomic import read_json, write_json
from opt_train.errors import PRUNED_EXIT_CODE

__all__ = [
    "ENVIRONMENT_VARIABLE", "FAILURE_FILE", "PRUNED_EXIT_CODE", "PRUNERS", "clear_failure", "describe",
    "description", "make_pruner", "read_failure", "write_failure", "write_launch_failure",
]

ENVIRONMENT_VARIABLE = "OPT_TRAIN_SWEEP_TRIAL"
FAILURE_FILE = "failure.json"
# The keys of a failure record, in the order they are written.
FAILURE_KEYS = ("exit_code", "error", "key", "code", "message")
# Each pruner name the sweep offers: its Optuna class, and the keyword arguments that class
# takes from `pruner: {name: {...}}`.
PRUNERS = {
    "none": ("NopPruner", ()),
    "median": ("MedianPruner", ("n_startup_trials", "n_warmup_steps", "interval_steps", "n_min_trials")),
    "asha": ("SuccessiveHalvingPruner",
             ("min_resource", "reduction_factor", "min_early_stopping_rate", "bootstrap_count")),
    "hyperband": ("HyperbandPruner", ("min_resource", "max_resource", "reduction_factor", "bootstrap_count")),
}


def describe(storage, study, trial_id, metric, pruner="none", pruner_params=None):
    """`{ENVIRONMENT_VARIABLE: text}`: what the trial process needs to report to its study."""
    return {ENVIRONMENT_VARIABLE: json.dumps({
        "storage": storage, "study": study, "trial_id": trial_id, "metric": metric,
        "pruner": pruner, "pruner_params": pruner_params or {},
    })}


def description(environ=None):
    """The trial description the environment holds (the keyword arguments of `describe`), or None outside a sweep."""
    text = (os.environ if environ is None else environ).get(ENVIRONMENT_VARIABLE)
    return json.loads(text) if text else None


def make_pruner(name, params=None):
    """Optuna's pruner for the sweep's pruner `name` (none, median, asha, hyperband) with its keyword `params`."""
    import optuna

    return getattr(optuna.pruners, PRUNERS[name][0])(**(params or {}))


def write_failure(logdir, exit_code, error, message, key=None, code=None):
    """Writes the failure record of the run in `logdir` (atomically; the last failure wins)."""
    record = {"exit_code": int(exit_code), "error": error, "key": key, "code": code, "message": str(message)}
    os.makedirs(logdir, exist_ok=True)
    write_json(os.path.join(logdir, FAILURE_FILE), record)


def write_launch_failure(logdir, exit_code, message):
    """Writes the launcher's verdict on a failed `--np` job, which names the rank that failed, as its failure record.

    Every rank writes its own failure into the one logdir and the last write wins, so a
    rank that only lost its peer may write after the rank that failed. The launcher writes
    once every rank has ended. The record its verdict quotes (the failed rank's) lends it
    its error, key and code.
    """
    earlier = read_failure(logdir)
    if earlier is not None and earlier["message"] and earlier["message"] in message:
        error, key, code = earlier["error"], earlier["key"], earlier["code"]
    else:
        error, key, code = "WorkerFailed", None, None
    write_failure(logdir, exit_code, error, message, key=key, code=code)


def read_failure(logdir):
    """The failure record in `logdir` as a dict with `FAILURE_KEYS`, or None when the run wrote none."""
    record = read_json(os.path.join(logdir, FAILURE_FILE))
    if not isinstance(record, dict) or not isinstance(record.get("message"), str):
        return None
    return {key: record.get(key) for key in FAILURE_KEYS}


def clear_failure(logdir):
    """Removes an earlier attempt's failure record before the run starts again."""
    try:
        os.remove(os.path.join(logdir, FAILURE_FILE))
    except FileNotFoundError:
        pass
