"""Plans a sweep before anything runs: the checked `SweepPlan` (every trial's config loads), one trial's config, and the trials a fresh study would run (`--dry-run`).

TF-free; reads configs and the study, writes nothing.
"""

from __future__ import annotations

import dataclasses
import os

from opt_train.config import ConfigError, ConfigIssue, load_config
from opt_train.sweep import study as studies
from opt_train.sweep.collect import study_rows
from opt_train.sweep.plan import SweepPlan, Trial, check_points, config_digest, plan_queue
from opt_train.sweep.spec import build_spec, metric_problem
from opt_train.sweep.status import FAILED, OK, PRUNED, RUNNING, STALE


class TrialConfigError(ConfigError):
    """Trials whose config does not load; each problem is shown with the trial and its overrides."""

    def __init__(self, problems):
        super().__init__([issue for _, issue in problems])
        self.args = ("\n".join(f"{label}: {issue.format()}" for label, issue in problems),)


def default_out(config):
    """`<logdir>-sweep` next to the base config's logdir."""
    return os.path.normpath(config.logdir) + "-sweep"


def plan_sweep(configs, overrides, base_config, options, out=None, np=1):
    """The checked `SweepPlan` for config files `configs` + `overrides` (loaded as `base_config`) and `options`.

    Raises `ConfigError` for a bad sweep block or bad options, `TrialConfigError` when
    any trial's config does not load (every grid point; sampled ranges at their ends
    and each choice). Reads nothing but configs and writes nothing.
    """
    spec = build_spec(base_config.sweep, options, base_config.locate)
    problem = metric_problem(spec.metric, base_config)
    if problem:
        if options is not None and options.metric is not None:
            issue = ConfigIssue("--metric", 0, "", "unknown_name", problem, options.metric)
        else:
            issue = base_config.issue("sweep.metric", problem, "unknown_name", spec.metric)
        raise ConfigError([issue])
    out = str(out or default_out(base_config))
    plan = SweepPlan(
        spec=spec,
        configs=tuple(str(path) for path in configs),
        base_overrides=tuple(overrides),
        out=out,
        queue=plan_queue(spec, base_seed=base_config.random_seed),
        base_digest=config_digest(base_config),
        np=np,
    )
    return dataclasses.replace(plan, gpus_per_trial=check_trial_configs(plan) * np)


def load_trial(plan, point, number=0, folder=None):
    """`(trial, config)` for the swept `point`: the trial named by its config's digest, the config with its logdir."""
    provisional = Trial(number, tuple(point), folder=folder or "trial")
    config = load_config(list(plan.configs), plan.trial_overrides(provisional))
    trial = dataclasses.replace(provisional, digest=config_digest(config), folder=folder)
    return trial, dataclasses.replace(config, logdir=plan.logdir(trial))


def check_trial_configs(plan):
    """Loads the config of every point `check_points` gives; raises `TrialConfigError` naming each bad one.

    A problem shared by several points is reported once, with the first of them. Returns
    the most replicas a worker of any of them has (`num_gpus`, see `replicas_per_worker`).
    """
    from opt_train.config.loader import replicas_per_worker

    problems, seen, replicas = [], set(), 1
    for index, point in enumerate(check_points(plan.spec, plan.queue)):
        try:
            replicas = max(replicas, replicas_per_worker(load_trial(plan, point, index)[1]))
        except ConfigError as error:
            for issue in error.issues:
                if issue.format() not in seen:
                    seen.add(issue.format())
                    problems.append((f"trial-{index:03d} ({Trial(index, point).describe()})", issue))
    if problems:
        raise TrialConfigError(problems)
    return replicas


def preview_trials(plan):
    """The trials a fresh study would run, in order, with the values its sampler proposes (nothing is written)."""
    trials = []
    for number, (values, repeat) in enumerate(studies.preview(plan)):
        trial, _ = load_trial(plan, values, number)
        trials.append(dataclasses.replace(trial, repeat=repeat))
    return trials


def dry_run_lines(plan):
    """One line per trial a fresh study would run: name, what its study says of it, overrides."""
    study = studies.load(plan)
    known = {}
    if study is not None:
        for row in study_rows(study, plan):
            if row["status"] != STALE:
                known.setdefault(row.get("digest"), []).append(row["status"])
    lines = []
    for trial in preview_trials(plan):
        states = known.get(trial.digest) or []
        action = {OK: "done", FAILED: "failed", PRUNED: "pruned", RUNNING: "running"}.get(
            states.pop(0) if states else None, "to run")
        lines.append(f"{trial.name}  {action:<7} {trial.describe()}")
    return lines
