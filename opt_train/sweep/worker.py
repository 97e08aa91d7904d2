"""A sweep worker: takes queued trials from the study one by one, runs each as an `opt-train train` job, and records how it ended.

It also adopts what a worker that died on this machine left: a trial still locked by a
running trainer is awaited (it counts against `--parallel`), a trial whose lock is free is
run again (it resumes from its checkpoint), and a folder of the same config that finished
outside the study is taken as the trial's result. TF-free.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import socket
import time

from opt_train.config import ConfigError
from opt_train.errors import INTERRUPTED_EXIT_CODES
from opt_train.scratch import alive
from opt_train.sweep import devices, outcomes
from opt_train.sweep import study as studies
from opt_train.sweep.heartbeat import DRIVER
from opt_train.sweep.plan import TRIAL_FOLDER, Trial
from opt_train.sweep.planning import load_trial
from opt_train.sweep.results import jsonable, make_record
from opt_train.sweep.runner import Job, LocalLauncher
from opt_train.sweep.status import FAILED, LOG_FILE, final_metrics, records_size
from opt_train.trial import clear_failure, describe

# Exit codes of a trial that was stopped (Ctrl-C, a scheduler's SIGTERM) rather than failed:
# it stays RUNNING in the study, so the next run of the sweep resumes it.
INTERRUPTED_CODES = (*INTERRUPTED_EXIT_CODES, -signal.SIGINT, -signal.SIGTERM)
LOCK_FILE = ".trial.lock"
# Seconds between looks for trials left running by a worker that died on this machine.
ORPHAN_POLL_SECONDS = 2.0


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


class TrialWorker:
    """Takes trials from the study, starts their processes, tells the study how they ended, records them.

    `heartbeats`: the `Heartbeats` this worker beats for its trials with.
    """

    def __init__(self, plan, study, report, environment, heartbeats, parallel=1, gpus=(), launcher=None):
        self.plan, self.study, self.report, self.environment = plan, study, report, environment
        self.heartbeats = heartbeats
        self.parallel = parallel
        # Where trials run: this machine's processes, or a cluster's tasks (SLURM), whose queue says whether
        # a trial still runs there.
        self.launcher = launcher or LocalLauncher()
        # Each running trial's own block of GPUs (None: no GPUs, nothing set).
        self.gpu_pool = devices.GpuPool(gpus) if gpus else None
        self.gpus = {}  # job name -> its block
        # Re-queued trials whose folder is still locked by the trainer the silent worker left: trial id -> trial.
        self.awaiting = {}
        # Trainers still running whose driver died here (kill -9), by the GPU block each was given: they
        # count against --parallel and hold their GPUs. Looked for at the start (None: not yet) and again
        # while any is left.
        self._orphans = None
        self.space = studies.search_space(plan.spec, plan.queue)
        self.decode = studies.decoder(plan.spec, plan.queue)
        self.running = {}  # job name -> (trial, lock fd, metrics.jsonl size at start)
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
            if self._orphans and time.monotonic() >= self._next_orphan_look or self._orphans is None:
                self._orphans = self.running_orphans()
                self._next_orphan_look = time.monotonic() + ORPHAN_POLL_SECONDS
            if self._orphans and len(self.running) + len(self._orphans) >= self.parallel:
                # A dead driver's trainers still hold the cores: wait for them, then adopt them.
                yield None
                continue
            if self.gpu_pool is not None and \
                    self.gpu_pool.available(self._orphan_gpus()) < self.plan.gpus_per_trial:
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

    def running_orphans(self):
        """The GPU blocks (`()` for none) of the trials of this machine that still train although the driver
        that started them is gone: one entry per trial."""
        blocks = []
        for frozen in studies.running_trials(self.study, self.plan.base_digest):
            folder = frozen.user_attrs.get(studies.FOLDER)
            host, _, pid = str(frozen.user_attrs.get(DRIVER, "")).rpartition(":")
            if not folder or folder in self.running or host != self.host or not pid.isdigit():
                continue
            if int(pid) == os.getpid() or alive(int(pid)):
                continue  # this worker's own, or another live worker's on this machine
            path = os.path.join(self.plan.out, folder)
            fd = _lock(path) if os.path.isdir(path) else -1
            if fd is None:  # its trainer holds the folder's lock: still running
                blocks.append(tuple(frozen.user_attrs.get(devices.GPUS_ATTR, ())))
            elif fd >= 0:
                os.close(fd)
        return blocks

    def _orphan_gpus(self):
        return {gpu for block in self._orphans or () for gpu in block}

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
            record = make_record(trial, self.plan.logdir(trial), FAILED, reason=str(error))
            outcomes.finish_trial(self.plan, self.study, optuna_trial.number, record)
            return None
        trial = dataclasses.replace(trial, repeat=attrs.get(studies.REPEAT, 0))
        if folder is None:
            adopted = self.finished_elsewhere(trial)
            if adopted is not None:
                trial = dataclasses.replace(trial, folder=adopted)
        logdir = self.plan.logdir(trial)
        self.heartbeats.beat(trial.name, optuna_trial._trial_id)
        if lock is None:
            lock = _lock(logdir)
            if lock is None and studies.STALE_RETRIES in attrs:
                # The silent worker's trainer still trains in the folder: its end (or its checkpoint) is awaited.
                self.awaiting[optuna_trial._trial_id] = optuna_trial
                return None
            if lock is None:  # cannot happen for a fresh folder; be safe and give it back
                self.heartbeats.unbeat(trial.name)
                self.study.tell(optuna_trial.number, state=studies.optuna_module().trial.TrialState.FAIL)
                return None
        self.awaiting.pop(optuna_trial._trial_id, None)
        # Which driver runs it now: a re-run tells a dead driver's trainers from a live worker's.
        optuna_trial.set_user_attr(DRIVER, f"{self.host}:{os.getpid()}")
        if folder is None:
            optuna_trial.set_user_attr(studies.FOLDER, trial.name)
            optuna_trial.set_user_attr("digest", trial.digest)
            optuna_trial.set_user_attr("host", self.host)
            optuna_trial.set_user_attr("overrides", jsonable(trial.values))
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

            self.gpus[trial.name] = self.gpu_pool.take(replicas_per_worker(config) * self.plan.np,
                                                       self._orphan_gpus())
            env.update(devices.environment(self.gpus[trial.name]))
        optuna_trial.set_user_attr(devices.GPUS_ATTR, list(self.gpus.get(trial.name) or ()))
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
        self.study._storage.set_trial_user_attr(outcomes.trial_id(self.study, trial.number), TASK, task)

    def started(self, job):
        trial = self.running[job.name][0]
        self.report(f"[{trial.number}] {trial.name} started: {trial.describe()}")

    def finished(self, outcome):
        trial, _, records_start = self.running[outcome.job.name]
        if outcome.exit_code in INTERRUPTED_CODES:
            self.report(f"[{trial.number}] {trial.name} interrupted; it resumes on the next run")
            self.interrupted.add(trial.name)
            beaten = self.heartbeats.trial_id(trial.name)
            self.release(trial)
            if beaten is not None:
                # Beating on while this worker runs: no other worker takes it before that next run.
                self.heartbeats.beat(trial.name, beaten)
            return
        self.record_outcome(trial, outcome.exit_code, outcome.wall_time, outcome.log_start, records_start)

    def record_outcome(self, trial, exit_code, wall_time, log_start, records_start):
        record = outcomes.outcome_record(self.plan, trial, exit_code, wall_time, log_start, records_start)
        if trial.name in self.gpus:
            record["gpus"] = list(self.gpus[trial.name])
        outcomes.finish_trial(self.plan, self.study, trial.number, record)
        self.release(trial)
        self.report(f"[{trial.number}] {trial.name} {outcomes.describe(record, self.plan.spec.metric)}")

    def release(self, trial):
        _, lock, _ = self.running.pop(trial.name)
        os.close(lock)
        self.heartbeats.unbeat(trial.name)
        block = self.gpus.pop(trial.name, None)
        if block:
            self.gpu_pool.give(block)

    def close(self):
        for _, lock, _ in self.running.values():
            os.close(lock)
        self.running.clear()
        self.heartbeats.clear()
