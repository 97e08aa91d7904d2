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
from opt_train.errors import PRUNED_EXIT_CODE, ParamError
from opt_train.params import Param
from opt_train.registry import Row, Table

__all__ = [
    "ENVIRONMENT_VARIABLE", "FAILURE_FILE", "PRUNED_EXIT_CODE", "PRUNERS", "clear_failure", "describe",
    "description", "make_pruner", "read_failure", "write_failure", "write_launch_failure",
]

ENVIRONMENT_VARIABLE = "OPT_TRAIN_SWEEP_TRIAL"
FAILURE_FILE = "failure.json"
# The keys of a failure record, in the order they are written.
FAILURE_KEYS = ("exit_code", "error", "key", "code", "message")


def _count_or_auto(name, value):
    """A pruner's argument: an integer >= 0, or `auto` where Optuna takes it."""
    if value != "auto" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise ParamError(name, "wrong_type", "must be an integer >= 0", value)
    return value


def _pruner_arg(default, doc):
    return Param(default, _count_or_auto, doc)


# Each pruner the sweep offers (`pruner: NAME` or `{NAME: {argument: value}}`): its Optuna class
# and the keyword arguments that class takes, with Optuna's defaults.
PRUNERS = Table("pruner", [
    Row(name="none", summary="never prune: every trial runs to its end", code="optuna.pruners:NopPruner"),
    Row(name="median", summary="stop a trial whose best result so far is worse than the median of earlier "
        "trials' at the same step", code="optuna.pruners:MedianPruner", params={
            "n_startup_trials": _pruner_arg(5, "trials that finish before any is pruned"),
            "n_warmup_steps": _pruner_arg(0, "steps of each trial before it may be pruned"),
            "interval_steps": _pruner_arg(1, "steps between pruning checks"),
            "n_min_trials": _pruner_arg(1, "reports needed at a step before it is compared"),
        }),
    Row(name="asha", summary="asynchronous successive halving: keep the top 1/reduction_factor at each rung",
        code="optuna.pruners:SuccessiveHalvingPruner", params={
            "min_resource": _pruner_arg("auto", "steps before the first rung"),
            "reduction_factor": _pruner_arg(4, "the share kept at each rung is 1/reduction_factor"),
            "min_early_stopping_rate": _pruner_arg(0, "rungs skipped before pruning starts"),
            "bootstrap_count": _pruner_arg(0, "trials a rung needs before it prunes"),
        }),
    Row(name="hyperband", summary="Hyperband: several successive-halving brackets with different budgets",
        code="optuna.pruners:HyperbandPruner", params={
            "min_resource": _pruner_arg(1, "steps before the first rung"),
            "max_resource": _pruner_arg("auto", "steps of a whole trial"),
            "reduction_factor": _pruner_arg(3, "the share kept at each rung is 1/reduction_factor"),
            "bootstrap_count": _pruner_arg(0, "trials a rung needs before it prunes"),
        }),
], owner="{name} pruner")


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
    return PRUNERS.load(name)(**(params or {}))


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
