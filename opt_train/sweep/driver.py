"""Runs a sweep as a worker of its Optuna study: checks every trial's config, takes queued trials one by one, runs
each as an `opt-train train` process (P at a time), tells the study how it ended and records it.

TF-free, the HParams summaries included (written with TensorBoard's protos alone).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import math
import os
import re
import signal
import socket
import threading
import time
import types

from opt_train.atomic import write_json
from opt_train.config import ConfigError, ConfigIssue, load_config
# The defaults of `--heartbeat-secs` / `sweep.heartbeat_secs` and `--max-trial-retries`: a trial whose worker sent
# no heartbeat for twice the seconds is queued again, at most that many times.
from opt_train.config.sweep_block import HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES
from opt_train.errors import INTERRUPTED_EXIT_CODES
from opt_train.sweep import devices, hparams
from opt_train.sweep import study as studies
from opt_train.sweep.plan import TRIAL_FOLDER, SweepPlan, Trial, check_points, config_digest, plan_queue
from opt_train.sweep.results import append_result, finite_json, format_table, make_record, summary_line
from opt_train.sweep.runner import Job, LocalLauncher, thread_environment
from opt_train.sweep.spec import build_spec, metric_problem
from opt_train.sweep.status import (
    FAILED,
    LOG_FILE,
    OK,
    PENDING,
    PRUNED,
    RUNNING,
    STALE,
    STATUS_FILE,
    failure_reason,
    final_metrics,
    is_number,
    records_size,
    stop_record,
)
from opt_train.trial import PRUNED_EXIT_CODE, clear_failure, describe, make_pruner

# Exit codes of a trial that was stopped (Ctrl-C, a scheduler's SIGTERM) rather than failed:
# it stays RUNNING in the study, so the next run of the sweep resumes it.
INTERRUPTED_CODES = (*INTERRUPTED_EXIT_CODES, -signal.SIGINT, -signal.SIGTERM)
LOCK_FILE = ".trial.lock"
# Trial user attribute: "host:pid" of the driver that started the trial's process.
DRIVER = "driver"
# Seconds between looks for trials left running by a worker that died on this machine.
ORPHAN_POLL_SECONDS = 2.0


class TrialConfigError(ConfigError):
    """Trials whose config does not load; each problem is shown with the trial and its overrides."""

    def __init__(self, problems):
        super().__init__([issue for _, issue in problems])
        self.args = ("\n".join(f"{label}: {issue.format()}" for label, issue in problems),)


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


def swept_columns(plan):
    """The keys that differ between trials, `random_seed` last when repeats set it."""
    keys = plan.spec.swept_keys
    if plan.spec.repeats > 1 and "random_seed" not in keys:
        keys = [*keys, "random_seed"]
    return keys


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
    shown_out = out or _hide_password(storage)
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


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock(folder):
    """An open, exclusively locked `folder/.trial.lock` (fd), or None when another process holds it."""
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class _Worker:
    """Takes trials from the study, starts their processes, tells the study how they ended, records them."""

    def __init__(self, plan, study, report, environment, parallel=1, gpus=(), launcher=None):
        self.plan, self.study, self.report, self.environment = plan, study, report, environment
        self.parallel = parallel
        # Where trials run: this machine's processes, or a cluster's tasks (SLURM), whose queue says whether
        # a trial still runs there.
        self.launcher = launcher or LocalLauncher()
        # Each running trial's own block of GPUs (None: no GPUs, nothing set).
        self.gpu_pool = devices.GpuPool(gpus) if gpus else None
        self.gpus = {}  # job name -> its block
        # The study's trial ids this worker sends heartbeats for (read by the heartbeat thread too).
        self.beating = {}  # job name -> trial id
        self.beating_lock = threading.Lock()
        # Re-queued trials whose folder is still locked by the trainer the silent worker left: trial id -> trial.
        self.awaiting = {}
        # Trainers still running whose driver died here (kill -9): they count against --parallel.
        # Counted at the start (None: not yet) and again while any is left.
        self._orphans_running = None
        self.space = studies.search_space(plan.spec, plan.queue)
        self.decode = studies.decoder(plan.spec, plan.queue)
        self.running = {}  # job name -> (trial, lock fd, metrics.jsonl size at start)
        self.recorded = 0
        # Trials interrupted during this run: left for the next run, not resumed at once.
        self.interrupted = set()
        self.host = socket.gethostname()
        self._next_orphan_look = 0.0
        # Whether the last look found trials of this machine locked by another process (another
        # worker's, or a dead driver's trainers): only then is the next look worth a wait.
        self._others_running = False

    # -- handing out trials ------------------------------------------------
    def jobs(self):
        """Yields a Job whenever a slot is free and the study has a trial for this worker; None while it waits
        for trials that a dead worker on this machine left running."""
        while True:
            if self._orphans_running and time.monotonic() >= self._next_orphan_look or self._orphans_running is None:
                self._orphans_running = self.count_running_orphans()
                self._next_orphan_look = time.monotonic() + ORPHAN_POLL_SECONDS
            if self._orphans_running and len(self.running) + self._orphans_running >= self.parallel:
                # A dead driver's trainers still hold the cores: wait for them, then adopt them.
                yield None
                continue
            if self.gpu_pool is not None and self.gpu_pool.available() < self.plan.gpus_per_trial:
                yield None  # a slot is free, but not the GPUs of a trial
                continue
            if self.awaiting and time.monotonic() >= self._next_orphan_look:
                self._next_orphan_look = time.monotonic() + ORPHAN_POLL_SECONDS
                for optuna_trial in list(self.awaiting.values()):
                    job = self.start(optuna_trial)
                    if job is not None:
                        yield job
                continue
            trial_id = studies.claim_waiting(self.study, self.plan.base_digest)
            if trial_id is not None:
                job = self.start(studies.trial_for(self.study, self.plan.spec, self.plan.queue, trial_id))
                if job is not None:
                    yield job
                continue
            # Nothing to claim: with none of its own trials running and nobody else's seen last
            # time, the worker looks at once (so a sweep ends when its last trial does, not at
            # the next look); otherwise every ORPHAN_POLL_SECONDS.
            if time.monotonic() < self._next_orphan_look and (self.running or self._others_running):
                yield None
                continue
            self._next_orphan_look = time.monotonic() + ORPHAN_POLL_SECONDS
            orphan, waiting = self.find_orphan()
            self._others_running = waiting and not self.running
            if orphan is not None:
                trial = studies.trial_for(self.study, self.plan.spec, self.plan.queue, orphan[0]._trial_id)
                job = self.start(trial, lock=orphan[1])
                if job is not None:
                    yield job
                continue
            if not waiting and not self.awaiting:
                return
            yield None

    def find_orphan(self):
        """`((frozen trial, lock fd) or None, whether some local trial is still locked by another process)`.

        A RUNNING trial whose folder is here and whose lock is free was left by a worker
        that died (kill -9, a crashed machine); its children, which hold the lock too, have ended.
        """
        waiting = False
        for frozen in studies.running_trials(self.study, self.plan.base_digest):
            folder = frozen.user_attrs.get(studies.FOLDER)
            if not folder or folder in self.running or folder in self.interrupted:
                if folder in self.interrupted:
                    continue
                waiting = waiting or bool(folder)
                continue
            path = os.path.join(self.plan.out, folder)
            if not os.path.isdir(path):
                continue  # another machine's trial
            if self.launcher.alive(frozen):
                waiting = True  # its task still runs on the cluster: adopted once it ends
                continue
            fd = _lock(path)
            if fd is None:
                waiting = True
                continue
            if self.study._storage.get_trial(frozen._trial_id).state != frozen.state:
                # Its worker told the study and let the lock go between our two looks: not an orphan.
                os.close(fd)
                continue
            return (frozen, fd), True
        return None, waiting

    def count_running_orphans(self):
        """How many trials of this machine still train although the driver that started them is gone."""
        count = 0
        for frozen in studies.running_trials(self.study, self.plan.base_digest):
            folder = frozen.user_attrs.get(studies.FOLDER)
            host, _, pid = str(frozen.user_attrs.get(DRIVER, "")).rpartition(":")
            if not folder or folder in self.running or host != self.host or not pid.isdigit():
                continue
            if int(pid) == os.getpid() or _alive(int(pid)):
                continue  # this worker's own, or another live worker's on this machine
            path = os.path.join(self.plan.out, folder)
            fd = _lock(path) if os.path.isdir(path) else -1
            if fd is None:
                count += 1  # its trainer holds the folder's lock: still running
            elif fd >= 0:
                os.close(fd)
        return count

    def start(self, optuna_trial, lock=None):
        """The Job for `optuna_trial` (values proposed, folder locked, config written), or None when it needed no
        process (its config failed, or its run had already finished)."""
        attrs = optuna_trial.user_attrs
        values = studies.suggest(optuna_trial, self.space, self.decode)
        folder = attrs.get(studies.FOLDER)
        try:
            trial, config = load_trial(self.plan, values, optuna_trial.number, folder)
        except ConfigError as error:
            trial = Trial(optuna_trial.number, values, folder=folder or f"trial-{optuna_trial.number:03d}-config")
            self.finish_trial(optuna_trial.number, make_record(trial, self.plan.logdir(trial), FAILED, reason=str(error)))
            return None
        trial = dataclasses.replace(trial, repeat=attrs.get(studies.REPEAT, 0))
        if folder is None:
            adopted = self.finished_elsewhere(trial)
            if adopted is not None:
                trial = dataclasses.replace(trial, folder=adopted)
        logdir = self.plan.logdir(trial)
        self.beat(trial.name, optuna_trial._trial_id)
        if lock is None:
            lock = _lock(logdir)
            if lock is None and studies.STALE_RETRIES in attrs:
                # The silent worker's trainer still trains in the folder: its end (or its checkpoint) is awaited.
                self.awaiting[optuna_trial._trial_id] = optuna_trial
                return None
            if lock is None:  # cannot happen for a fresh folder; be safe and give it back
                self.unbeat(trial.name)
                self.study.tell(optuna_trial.number, state=studies.optuna_module().trial.TrialState.FAIL)
                return None
        self.awaiting.pop(optuna_trial._trial_id, None)
        # Which driver runs it now: a re-run tells a dead driver's trainers from a live worker's.
        optuna_trial.set_user_attr(DRIVER, f"{self.host}:{os.getpid()}")
        if folder is None:
            optuna_trial.set_user_attr(studies.FOLDER, trial.name)
            optuna_trial.set_user_attr("digest", trial.digest)
            optuna_trial.set_user_attr("host", self.host)
            optuna_trial.set_user_attr("overrides", _jsonable(trial.values))
        metrics = final_metrics(logdir)
        if metrics is not None and os.path.exists(os.path.join(logdir, "config.yaml")):
            # Finished outside the sweep (--print-commands) or while its worker was dying.
            self.running[trial.name] = (trial, lock, 0)
            self.record_outcome(trial, 0, None, 0, 0)
            return None
        # The resolved config is in the folder before the process starts, so even a trial that crashes early has one.
        config.dump(os.path.join(logdir, "config.yaml"))
        # An earlier attempt's failure record would be read as this attempt's.
        clear_failure(logdir)
        env = {**self.environment, **describe(
            studies.storage_url(self.plan.spec, self.plan.out), studies.study_name(self.plan.spec, self.plan.out),
            optuna_trial._trial_id, self.plan.spec.metric, self.plan.spec.pruner, self.plan.spec.pruner_params)}
        self.running[trial.name] = (trial, lock, records_size(logdir))
        if self.gpu_pool is not None:
            from opt_train.config.loader import replicas_per_worker

            self.gpus[trial.name] = self.gpu_pool.take(replicas_per_worker(config) * self.plan.np)
            env.update(devices.environment(self.gpus[trial.name]))
        return Job(trial.name, tuple(self.plan.command(trial)), os.path.join(logdir, LOG_FILE), env, (lock,))

    def finished_elsewhere(self, trial):
        """A folder in DIR for the same config whose run finished and that no trial of the study owns, or None."""
        try:
            names = sorted(os.listdir(self.plan.out))
        except OSError:
            return None
        owned = {t.user_attrs.get(studies.FOLDER) for t in self.study.get_trials(deepcopy=False)}
        for name in names:
            match = TRIAL_FOLDER.match(name)
            if match and match.group(1) == trial.digest and name not in owned:
                if final_metrics(os.path.join(self.plan.out, name)) is not None:
                    return name
        return None

    # -- results -----------------------------------------------------------
    def submitted(self, job, task):
        """Records on the study which cluster task runs the job's trial (a re-run asks the cluster about it)."""
        from opt_train.sweep.slurm import TASK

        trial = self.running[job.name][0]
        self.study._storage.set_trial_user_attr(self.trial_id(trial.number), TASK, task)

    def started(self, job):
        trial = self.running[job.name][0]
        self.report(f"[{trial.number}] {trial.name} started: {trial.describe()}")

    def finished(self, outcome):
        trial, _, records_start = self.running[outcome.job.name]
        if outcome.exit_code in INTERRUPTED_CODES:
            self.report(f"[{trial.number}] {trial.name} interrupted; it resumes on the next run")
            self.interrupted.add(trial.name)
            with self.beating_lock:
                trial_id = self.beating.get(trial.name)
            self.release(trial)
            if trial_id is not None:
                # Beating on while this worker runs: no other worker takes it before that next run.
                self.beat(trial.name, trial_id)
            return
        self.record_outcome(trial, outcome.exit_code, outcome.wall_time, outcome.log_start, records_start)

    def record_outcome(self, trial, exit_code, wall_time, log_start, records_start):
        logdir = self.plan.logdir(trial)
        metrics = final_metrics(logdir)
        if exit_code == 0 and metrics is not None:
            record = make_record(trial, logdir, OK, exit_code=0, wall_time=wall_time, metrics=metrics)
        elif exit_code == PRUNED_EXIT_CODE and stop_record(logdir, "pruned", records_start):
            record = self.pruned_record(trial, logdir, wall_time, records_start)
        else:
            reason = failure_reason(os.path.join(logdir, LOG_FILE), exit_code, log_start, logdir, records_start)
            if exit_code == 0:
                reason = f"exited without writing final_metrics.json ({reason})"
            record = make_record(trial, logdir, FAILED, reason=reason, exit_code=exit_code, wall_time=wall_time)
        if trial.name in self.gpus:
            record["gpus"] = list(self.gpus[trial.name])
        self.finish_trial(trial.number, record)
        self.release(trial)
        self.report(f"[{trial.number}] {trial.name} {self.describe(record)}")

    def pruned_record(self, trial, logdir, wall_time, records_start):
        """A pruned trial's record: the step it reached and its metric there (from its own metrics.jsonl)."""
        step = stop_record(logdir, "pruned", records_start)["step"]
        metrics = {"global_step": step}
        evaluated = stop_record(logdir, self.plan.spec.metric, records_start)
        if evaluated is not None and evaluated.get("step") == step:
            metrics[self.plan.spec.metric] = evaluated[self.plan.spec.metric]
        return make_record(trial, logdir, PRUNED, reason=f"stopped at step {step}", exit_code=PRUNED_EXIT_CODE,
                           wall_time=wall_time, metrics=metrics)

    def finish_trial(self, number, record):
        """Stores `record` (trial.json, results.jsonl, HParams, the study) and tells the study the trial's state."""
        state = studies.optuna_module().trial.TrialState
        write_json(os.path.join(record["logdir"], STATUS_FILE), record)
        append_result(self.plan.out, record)
        hparams.write_session(record["logdir"], record)
        trial_id = self.trial_id(number)
        self.study._storage.set_trial_user_attr(trial_id, studies.RECORD, _jsonable(record))
        value = record["metrics"].get(self.plan.spec.metric)
        if record["status"] == OK and is_number(value) and math.isfinite(value):
            self.study.tell(number, float(value))
        elif record["status"] == PRUNED:
            self.study.tell(number, state=state.PRUNED)
        else:
            self.study.tell(number, state=state.FAIL)
        self.recorded += 1

    def trial_id(self, number):
        """The storage's id of the study's trial `number`."""
        return self.study._storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number)

    def beat(self, name, trial_id):
        """Sends trial `trial_id`'s first heartbeat and keeps beating for it until it is released."""
        with self.beating_lock:
            self.beating[name] = trial_id
        self.study._storage.record_heartbeat(trial_id)

    def unbeat(self, name):
        with self.beating_lock:
            self.beating.pop(name, None)

    def beating_ids(self):
        with self.beating_lock:
            return list(self.beating.values())

    def release(self, trial):
        _, lock, _ = self.running.pop(trial.name)
        os.close(lock)
        self.unbeat(trial.name)
        block = self.gpus.pop(trial.name, None)
        if block:
            self.gpu_pool.give(block)

    def describe(self, record):
        seconds = f" in {record['wall_time']:.1f}s" if record.get("wall_time") is not None else ""
        if record["status"] == FAILED:
            return f"failed{seconds}: {record['reason']}"
        if record["status"] == PRUNED:
            return f"pruned{seconds}: {record['reason']}"
        value = record["metrics"].get(self.plan.spec.metric)
        shown = f": {self.plan.spec.metric} {value:.4g}" if isinstance(value, (int, float)) else ""
        return f"ok{seconds}{shown}"

    def close(self):
        for _, lock, _ in self.running.values():
            os.close(lock)
        self.running.clear()
        with self.beating_lock:
            self.beating.clear()


class _Heartbeat:
    """A thread that sends the heartbeats of the worker's trials every `seconds` and, each time, fails and re-queues
    the study's trials whose worker fell silent (`studies.fail_stale`), even while every slot here is busy."""

    def __init__(self, worker, seconds):
        self.worker, self.seconds = worker, seconds
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sweep-heartbeat", daemon=True)
        self.thread.start()

    def _run(self):
        import sqlalchemy.exc

        storage = self.worker.study._storage
        while not self.stopped.wait(self.seconds):
            try:
                for trial_id in self.worker.beating_ids():
                    storage.record_heartbeat(trial_id)
                studies.fail_stale(self.worker.study)
            except sqlalchemy.exc.SQLAlchemyError:
                pass  # the database did not answer this time; the next beat tries again, well within the grace

    def stop(self):
        self.stopped.set()
        self.thread.join()


def stale_trial_callback(plan, seconds, max_retries, report):
    """Optuna's `heartbeat_stale_trial_callback` for the sweep: a trial of this base config whose worker sent no
    heartbeat for `2 x seconds` is queued again with its folder (a worker resumes it from its checkpoint), at most
    `max_retries` times; then it is recorded as failed, with the reason."""

    def requeue(study, frozen):
        attrs = frozen.user_attrs
        if attrs.get(studies.GENERATION) != plan.base_digest:
            return
        retries = attrs.get(studies.STALE_RETRIES, 0)
        folder = attrs.get(studies.FOLDER) or f"trial-{frozen.number:03d}"
        silent = f"its worker ({attrs.get(DRIVER, 'unknown')}) sent no heartbeat for {2 * seconds} s"
        if retries < max_retries:
            studies.requeue_stale(study, frozen, retries + 1, drop=(DRIVER,))
            report(f"[{frozen.number}] {folder} {silent}: queued again ({retries + 1} of --max-trial-retries "
                   f"{max_retries}); it resumes from its checkpoint")
            return
        point = tuple((attrs.get("overrides") or frozen.params).items())
        trial = Trial(frozen.number, point, attrs.get("digest", "00000000"), attrs.get(studies.REPEAT, 0), folder)
        reason = f"{silent}, after {retries} retries (--max-trial-retries {max_retries})"
        record = make_record(trial, plan.logdir(trial), FAILED, reason=reason)
        if os.path.isdir(record["logdir"]):
            write_json(os.path.join(record["logdir"], STATUS_FILE), record)
        append_result(plan.out, record)
        studies.requeue_stale(study, frozen, retries, drop=(DRIVER,), record=_jsonable(record))
        report(f"[{frozen.number}] {folder} failed: {reason}")

    return requeue


def _jsonable(value):
    """`value` with non-finite floats as text, as results.jsonl keeps them (the study stores strict JSON)."""
    return json.loads(json.dumps(finite_json(value), default=str))


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
    report(f"study {name} in {_hide_password(url)}: {queued} trials queued by this worker")
    from opt_train.config import load_config
    from opt_train.tracking import StudyRun

    # tracking: {mlflow: ...}: the study is one MLflow run, each trial a child of it.
    parent = StudyRun(load_config(list(plan.configs), list(plan.base_overrides)), name, plan.out, report)
    launcher = launcher or LocalLauncher()
    threads = thread_environment(parallel * plan.np) if launcher.shares_cores else {}
    worker = _Worker(plan, study, report, {**threads, **parent.environment}, parallel=parallel, gpus=gpus[0],
                     launcher=launcher)
    heartbeat = _Heartbeat(worker, heartbeat_secs)
    try:
        launcher.run(worker.jobs(), parallel, on_start=worker.started, on_finish=worker.finished,
                     on_submit=worker.submitted)
    finally:
        heartbeat.stop()
        worker.close()
        parent.close()
    return collect(plan, study, write_experiment=True)


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


def _hide_password(url):
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
