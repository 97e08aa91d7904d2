"""What a sweep's study holds, as `sweep` shows it: one row per trial (stale ones marked), the table, the best trial, the parameter importances.

TF-free; `--status` reads it without running anything.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types

from opt_train.sweep import hparams
from opt_train.sweep import study as studies
from opt_train.sweep.results import format_table, summary_line
from opt_train.sweep.status import FAILED, OK, PENDING, RUNNING, STALE, is_number


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep run left: every trial's record, the table, its summary line and the parameter importances."""

    rows: list
    table: str
    summary: str
    importances: dict = dataclasses.field(default_factory=dict)

    @property
    def all_failed(self):
        current = [row for row in self.rows if row["status"] != STALE]
        return bool(current) and all(row["status"] == FAILED for row in current)


def swept_columns(plan):
    """The keys that differ between trials, `random_seed` last when repeats set it."""
    keys = plan.spec.swept_keys
    if plan.spec.repeats > 1 and "random_seed" not in keys:
        keys = [*keys, "random_seed"]
    return keys


def recorded_status(out=None, storage=None, name=None):
    """`(SweepResult, best row or None, metric)` from the study alone (`sweep --status --out DIR`), or None.

    The trials of the base config the sweep last ran are current; older ones are stale.
    A study from before the sweep recorded its metric ranks by eval/loss, lower first.
    """
    study, current = studies.load_recorded(out, storage, name)
    if study is None:
        return None
    current = current or {}
    metric, mode = current.get("metric", "eval/loss"), current.get("mode", "min")
    shown_out = out or hide_password(storage)
    # study_rows reads only these of a plan.
    plan = types.SimpleNamespace(out=out or ".", base_digest=current.get("generation"))
    rows = study_rows(study, plan, any_generation=current.get("generation") is None)
    columns = current.get("columns") or sorted({key for row in rows for key in row.get("overrides") or {}})
    result = SweepResult(rows=rows, table=format_table(rows, columns, metric, mode),
                         summary=summary_line(rows, metric, mode, shown_out),
                         importances=studies.importances(study, current.get("generation")))
    return result, _best(rows, metric, mode), metric


def _best(rows, metric, mode):
    ranked = [row for row in rows if row["status"] == OK and is_number(row["metrics"].get(metric))]
    if not ranked:
        return None
    sign = -1 if mode == "max" else 1
    return min(ranked, key=lambda row: sign * row["metrics"][metric])


def study_rows(study, plan, any_generation=False):
    """One row per trial of the study: the sweep's record when it has one, else its state; stale ones marked
    (none with `any_generation`)."""
    trials = study.get_trials(deepcopy=False)
    retried = {trial.user_attrs.get(studies.RETRY_OF) for trial in trials}
    rows = []
    for trial in trials:
        if trial.number in retried:
            continue  # a later attempt of this trial is listed instead
        attrs = trial.user_attrs
        record = attrs.get(studies.RECORD)
        if record is not None:
            row = dict(record)
        else:
            state = {"RUNNING": RUNNING, "WAITING": PENDING}.get(trial.state.name, FAILED)
            folder = attrs.get(studies.FOLDER) or f"trial-{trial.number:03d}"
            row = {"trial": folder, "number": trial.number, "status": state, "reason": None, "exit_code": None,
                   "wall_time": None, "repeat": attrs.get(studies.REPEAT, 0),
                   "overrides": dict(attrs.get("overrides") or trial.params),
                   "logdir": os.path.join(plan.out, folder), "metrics": {}}
        row["digest"] = attrs.get("digest")
        if not any_generation and attrs.get(studies.GENERATION) != plan.base_digest:
            row.update(status=STALE, metrics={})
        rows.append(row)
    return rows


def collect(plan, study, write_experiment=False):
    """The `SweepResult` of the study as it stands (and the HParams experiment in DIR when asked)."""
    rows = study_rows(study, plan)
    current = [row for row in rows if row["status"] != STALE]
    if write_experiment and current:
        hparams.write_experiment(plan.out, swept_columns(plan), current, plan.spec.metric, plan.spec.random)
    return SweepResult(
        rows=rows,
        table=format_table(rows, swept_columns(plan), plan.spec.metric, plan.spec.mode),
        summary=summary_line(rows, plan.spec.metric, plan.spec.mode, plan.out),
        importances=studies.importances(study, plan.base_digest),
    )


def study_status(plan):
    """`(SweepResult, best row or None)` of the existing study, or None when it has no study yet."""
    study = studies.load(plan)
    if study is None:
        return None
    result = collect(plan, study)
    return result, _best(result.rows, plan.spec.metric, plan.spec.mode)


def hide_password(url):
    """`url` with its password shown as `***`."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
