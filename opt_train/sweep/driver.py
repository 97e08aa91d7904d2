"""Runs a sweep: plans and checks every trial up front, skips finished ones, runs the rest P at a time, records each.

TF-free except the HParams summaries, which import TensorFlow only once a trial has
a result to write.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import signal


from opt_train.atomic import write_json
from opt_train.config import ConfigError, load_config
from opt_train.sweep import hparams
from opt_train.sweep.plan import SweepPlan, plan_trials, reuse_folders
from opt_train.sweep.results import append_result, format_table, make_record, summary_line
from opt_train.sweep.runner import Job, run_jobs, thread_environment
from opt_train.sweep.spec import build_spec
from opt_train.sweep.status import (
    FAILED,
    LOG_FILE,
    OK,
    PENDING,
    STATUS_FILE,
    failure_reason,
    final_metrics,
    trial_state,
)

# Exit codes of a trial that was stopped (Ctrl-C, a scheduler's SIGTERM) rather than failed:
# it stays unfinished, so the next run of the sweep resumes it.
INTERRUPTED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)


class TrialConfigError(ConfigError):
    """Trials whose config does not load; each problem is shown with the trial and its overrides."""

    def __init__(self, problems):
        super().__init__([issue for _, issue in problems])
        self.args = ("\n".join(f"{label}: {issue.format()}" for label, issue in problems),)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What a sweep run left: every trial's record (plan order), the table and its summary line."""

    rows: list
    table: str
    summary: str

    @property
    def all_failed(self):
        return bool(self.rows) and all(row["status"] == FAILED for row in self.rows)


def default_out(config):
    """`<logdir>-sweep` next to the base config's logdir."""
    return os.path.normpath(config.logdir) + "-sweep"


def plan_sweep(configs, overrides, base_config, options, out=None):
    """The checked `SweepPlan` for config files `configs` + `overrides` (loaded as `base_config`) and `options`.

    Raises `ConfigError` for a bad sweep block or bad options, `TrialConfigError` when
    any trial's config does not load. Reads nothing but configs and DIR's folder names.
    """
    spec = build_spec(base_config.sweep, options, base_config.locate)
    out = str(out or default_out(base_config))
    plan = SweepPlan(
        trials=reuse_folders(plan_trials(spec, base_seed=base_config.random_seed), out),
        spec=spec,
        configs=tuple(str(path) for path in configs),
        base_overrides=tuple(overrides),
        out=out,
    )
    plan.resolved.update(load_trial_configs(plan))
    return plan


def load_trial_configs(plan):
    """Every trial's validated `TrainConfig` by trial name; raises `TrialConfigError` naming each bad trial.

    A problem shared by several trials is reported once, with the first of them.
    """
    loaded, problems, seen = {}, [], set()
    for trial in plan.trials:
        try:
            loaded[trial.name] = load_config(list(plan.configs), plan.trial_overrides(trial))
        except ConfigError as error:
            for issue in error.issues:
                if issue.format() not in seen:
                    seen.add(issue.format())
                    problems.append((f"{trial.name} ({trial.describe()})", issue))
    if problems:
        raise TrialConfigError(problems)
    return loaded


def swept_columns(plan):
    """The keys that differ between trials, `random_seed` last when repeats set it."""
    keys = plan.spec.swept_keys
    if plan.spec.repeats > 1 and "random_seed" not in keys:
        keys = [*keys, "random_seed"]
    return keys


def current_rows(plan):
    """Every trial's record as the disk has it now (pending trials get a record without metrics)."""
    rows = []
    for trial in plan.trials:
        logdir = plan.logdir(trial)
        status, record = trial_state(logdir)
        if record is None:
            rows.append(make_record(trial, logdir, PENDING))
        else:
            fresh = make_record(trial, logdir, status)
            fresh.update({key: record.get(key) for key in ("reason", "exit_code", "wall_time", "metrics")})
            rows.append(fresh)
    return rows


def dry_run_lines(plan):
    """One line per trial: name, state on disk (what a run would do), overrides."""
    lines = []
    for trial in plan.trials:
        status, _ = trial_state(plan.logdir(trial))
        action = {OK: "done", FAILED: "failed", PENDING: "to run"}[status]
        lines.append(f"{trial.name}  {action:<7} {trial.describe()}")
    return lines


class _Recorder:
    """Turns finished processes into records: trial.json, a results.jsonl line, an HParams session."""

    def __init__(self, plan, report):
        self.plan = plan
        self.report = report
        self.by_name = {trial.name: trial for trial in plan.trials}
        self.total = len(plan.trials)
        self.recorded = 0

    def label(self, trial):
        return f"[{trial.ordinal}/{self.total}] {trial.name}"

    def started(self, job):
        trial = self.by_name[job.name]
        self.report(f"{self.label(trial)} started: {trial.describe()}")

    def finished(self, outcome):
        trial = self.by_name[outcome.job.name]
        logdir = self.plan.logdir(trial)
        if outcome.exit_code in INTERRUPTED_CODES:
            self.report(f"{self.label(trial)} interrupted; it resumes on the next run")
            return
        metrics = final_metrics(logdir)
        if outcome.exit_code == 0 and metrics is not None:
            record = make_record(trial, logdir, OK, exit_code=0, wall_time=outcome.wall_time, metrics=metrics)
        else:
            reason = failure_reason(outcome.job.log_path, outcome.exit_code, outcome.log_start)
            if outcome.exit_code == 0:
                reason = f"exited without writing final_metrics.json ({reason})"
            record = make_record(
                trial, logdir, FAILED, reason=reason, exit_code=outcome.exit_code, wall_time=outcome.wall_time
            )
        self.store(record)
        self.report(f"{self.label(trial)} {self.describe(record)}")

    def adopt(self, trial, record):
        """A trial that finished outside the sweep (e.g. from --print-commands): recorded like one run here."""
        stored = make_record(trial, self.plan.logdir(trial), OK, metrics=record.get("metrics"))
        self.store(stored)

    def store(self, record):
        write_json(os.path.join(record["logdir"], STATUS_FILE), record)
        append_result(self.plan.out, record)
        hparams.write_session(record["logdir"], record)
        self.recorded += 1

    def describe(self, record):
        seconds = f" in {record['wall_time']:.1f}s" if record.get("wall_time") is not None else ""
        if record["status"] == FAILED:
            return f"failed{seconds}: {record['reason']}"
        value = record["metrics"].get(self.plan.spec.metric)
        shown = f": {self.plan.spec.metric} {value:.4g}" if isinstance(value, (int, float)) else ""
        return f"ok{seconds}{shown}"


def _write_resolved_config(config, logdir):
    """The trial's resolved config in its logdir before it starts, so even a trial that crashes early has one."""
    os.makedirs(logdir, exist_ok=True)
    config.dump(os.path.join(logdir, "config.yaml"))


def _to_run(plan, recorder, retry_failed):
    """The trials that need a process; adopts trials finished elsewhere on the way."""
    chosen, skipped = [], {OK: 0, FAILED: 0}
    for trial in plan.trials:
        status, record = trial_state(plan.logdir(trial))
        if status == PENDING or (status == FAILED and retry_failed):
            chosen.append(trial)
            continue
        skipped[status] += 1
        if status == OK and not os.path.exists(os.path.join(plan.logdir(trial), STATUS_FILE)):
            recorder.adopt(trial, record)
    return chosen, skipped


def run_sweep(plan, parallel=1, *, retry_failed=False, report=None):
    """Runs every unfinished trial of `plan`, `parallel` at a time; returns the `SweepResult`.

    Every trial's config is checked before any starts (`plan_sweep` did it; else here,
    raising `TrialConfigError`).
    Finished trials are skipped (failed ones too unless `retry_failed`); unfinished
    ones resume from their checkpoints. `report(text)` receives progress lines.
    """
    report = report or (lambda text: None)
    configs = plan.resolved or load_trial_configs(plan)
    recorder = _Recorder(plan, report)
    chosen, skipped = _to_run(plan, recorder, retry_failed)
    if skipped[OK] or skipped[FAILED]:
        count = skipped[OK] + skipped[FAILED]
        report(f"skipping {count} finished trials ({skipped[OK]} ok, {skipped[FAILED]} failed)")
    environment = thread_environment(parallel)
    jobs = []
    for trial in chosen:
        logdir = plan.logdir(trial)
        _write_resolved_config(configs[trial.name], logdir)
        jobs.append(Job(trial.name, tuple(plan.command(trial)), os.path.join(logdir, LOG_FILE), environment))
    run_jobs(jobs, parallel, on_start=recorder.started, on_finish=recorder.finished)
    rows = current_rows(plan)
    if recorder.recorded or not glob.glob(os.path.join(plan.out, "events.out.tfevents.*")):
        hparams.write_experiment(plan.out, swept_columns(plan), rows, plan.spec.metric, plan.spec.random)
    return SweepResult(
        rows=rows,
        table=format_table(rows, swept_columns(plan), plan.spec.metric, plan.spec.mode),
        summary=summary_line(rows, plan.spec.metric, plan.spec.mode, plan.out),
    )
