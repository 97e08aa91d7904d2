"""How a sweep's trial ended, recorded and told to its study: the record read from its folder (ok, pruned, or failed and why), trial.json, results.jsonl, its HParams session, the study's state.

TF-free, the HParams session included (written with TensorBoard's protos alone).
"""

from __future__ import annotations

import math
import os

from opt_train.atomic import write_json
from opt_train.sweep import hparams
from opt_train.sweep import study as studies
from opt_train.sweep.results import append_result, jsonable, make_record
from opt_train.sweep.status import (
    FAILED,
    LOG_FILE,
    OK,
    PRUNED,
    STATUS_FILE,
    failure_reason,
    final_metrics,
    is_number,
    stop_record,
)
from opt_train.trial import PRUNED_EXIT_CODE


def outcome_record(plan, trial, exit_code, wall_time, log_start, records_start):
    """The record of `trial`, ended with `exit_code`: ok with its final metrics, pruned, or failed with the reason.

    `log_start` and `records_start`: the sizes of its log and metrics.jsonl when this attempt started.
    """
    logdir = plan.logdir(trial)
    metrics = final_metrics(logdir)
    if exit_code == 0 and metrics is not None:
        return make_record(trial, logdir, OK, exit_code=0, wall_time=wall_time, metrics=metrics)
    if exit_code == PRUNED_EXIT_CODE and stop_record(logdir, "pruned", records_start):
        return pruned_record(plan, trial, logdir, wall_time, records_start)
    reason = failure_reason(os.path.join(logdir, LOG_FILE), exit_code, log_start, logdir, records_start)
    if exit_code == 0:
        reason = f"exited without writing final_metrics.json ({reason})"
    return make_record(trial, logdir, FAILED, reason=reason, exit_code=exit_code, wall_time=wall_time)


def pruned_record(plan, trial, logdir, wall_time, records_start):
    """A pruned trial's record: the step it reached and its metric there (from its own metrics.jsonl)."""
    step = stop_record(logdir, "pruned", records_start)["step"]
    metrics = {"global_step": step}
    evaluated = stop_record(logdir, plan.spec.metric, records_start)
    if evaluated is not None and evaluated.get("step") == step:
        metrics[plan.spec.metric] = evaluated[plan.spec.metric]
    return make_record(trial, logdir, PRUNED, reason=f"stopped at step {step}", exit_code=PRUNED_EXIT_CODE,
                       wall_time=wall_time, metrics=metrics)


def finish_trial(plan, study, number, record):
    """Stores `record` (trial.json, results.jsonl, HParams, the study) and tells the study the trial's state."""
    state = studies.optuna_module().trial.TrialState
    write_json(os.path.join(record["logdir"], STATUS_FILE), record)
    append_result(plan.out, record)
    hparams.write_session(record["logdir"], record)
    study._storage.set_trial_user_attr(trial_id(study, number), studies.RECORD, jsonable(record))
    value = record["metrics"].get(plan.spec.metric)
    if record["status"] == OK and is_number(value) and math.isfinite(value):
        study.tell(number, float(value))
    elif record["status"] == PRUNED:
        study.tell(number, state=state.PRUNED)
    else:
        study.tell(number, state=state.FAIL)


def trial_id(study, number):
    """The storage's id of the study's trial `number`."""
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def describe(record, metric):
    """How the trial ended, for its line: `ok in 3.2s: eval/loss 0.41`, `failed: ...`, `pruned: ...`."""
    seconds = f" in {record['wall_time']:.1f}s" if record.get("wall_time") is not None else ""
    if record["status"] == FAILED:
        return f"failed{seconds}: {record['reason']}"
    if record["status"] == PRUNED:
        return f"pruned{seconds}: {record['reason']}"
    value = record["metrics"].get(metric)
    shown = f": {metric} {value:.4g}" if isinstance(value, (int, float)) else ""
    return f"ok{seconds}{shown}"
