"""Runs a sweep as a worker of its Optuna study: takes queued trials one by one, runs each as an `opt-train train`
process (P at a time), tells the study how it ended and records it.

The parts: planning.py checks every trial's config before this runs; worker.py hands out
the trials and records them (outcomes.py); heartbeat.py keeps the study told that they
run; collect.py makes the table of what the study holds. TF-free, the HParams summaries
included (written with TensorBoard's protos alone).
"""

from __future__ import annotations

from opt_train.sweep import devices
from opt_train.sweep import study as studies
from opt_train.sweep.collect import collect, hide_password
from opt_train.sweep.heartbeat import HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES, Heartbeats, stale_trial_callback
from opt_train.sweep.runner import LocalLauncher, thread_environment
from opt_train.sweep.worker import TrialWorker
from opt_train.trial import make_pruner


def run_sweep(plan, parallel=1, *, retry_failed=False, report=None, gpus=((), None),
              heartbeat_secs=HEARTBEAT_SECONDS, max_trial_retries=MAX_TRIAL_RETRIES, launcher=None):
    """Runs this worker's share of the study of `plan`, `parallel` trials at a time; returns the `SweepResult`.

    Trials the study has finished (ok, failed, pruned) are not run again (failed ones
    are when `retry_failed`); trials left running by a worker that died on this machine
    resume from their checkpoints. `report(text)` receives progress lines. `gpus`:
    `(names, where they came from)` as `devices.find_gpus` gives them; each running trial
    gets `plan.gpus_per_trial` of its own, and `parallel` larger than they allow is a
    `ConfigError` at --parallel. While a trial runs, this worker sends its heartbeat every
    `heartbeat_secs`; a trial of any worker silent for twice that is queued again, resumed
    from its checkpoint by a worker sharing the sweep folder, up to `max_trial_retries` times.
    `launcher`: where trials run, `runner.LocalLauncher` (None: this machine's processes) or a
    `slurm.SlurmLauncher` (SLURM array tasks, whose GPUs SLURM gives: `gpus` is then empty).
    """
    devices.check_parallel(parallel, plan.gpus_per_trial, *gpus)
    report = report or (lambda text: None)
    callback = stale_trial_callback(plan, heartbeat_secs, max_trial_retries, report)
    study, queued = studies.open_study(plan, make_pruner(plan.spec.pruner, plan.spec.pruner_params),
                                       heartbeat=(heartbeat_secs, callback))
    studies.fail_stale(study)  # a worker that died while this one was away: its trials are queued first
    if retry_failed:
        queued += studies.requeue_failed(study, plan)
    name, url = studies.study_name(plan.spec, plan.out), studies.storage_url(plan.spec, plan.out)
    report(f"study {name} in {hide_password(url)}: {queued} trials queued by this worker")
    from opt_train.config import load_config
    from opt_train.tracking import StudyRun

    # tracking: {mlflow: ...}: the study is one MLflow run, each trial a child of it.
    parent = StudyRun(load_config(list(plan.configs), list(plan.base_overrides)), name, plan.out, report)
    launcher = launcher or LocalLauncher()
    threads = thread_environment(parallel * plan.np) if launcher.shares_cores else {}
    heartbeats = Heartbeats(study)
    worker = TrialWorker(plan, study, report, {**threads, **parent.environment}, heartbeats, parallel=parallel,
                         gpus=gpus[0], launcher=launcher)
    heartbeats.start(heartbeat_secs)
    try:
        launcher.run(worker.jobs(), parallel, on_start=worker.started, on_finish=worker.finished,
                     on_submit=worker.submitted)
    finally:
        heartbeats.stop()
        worker.close()
        parent.close()
    return collect(plan, study, write_experiment=True)
