"""A sweep worker's heartbeats: the trials it beats for, the thread that beats, and what becomes of a trial whose worker fell silent.

A trial whose worker sent no Optuna heartbeat for twice `--heartbeat-secs` is queued
again with its folder (a worker sharing the sweep folder resumes it from its checkpoint),
at most `--max-trial-retries` times; then it is recorded as failed, with the reason.
"""

from __future__ import annotations

import os
import threading

from opt_train.atomic import write_json
# The defaults of `--heartbeat-secs` / `sweep.heartbeat_secs` and `--max-trial-retries`: a trial whose worker sent
# no heartbeat for twice the seconds is queued again, at most that many times.
from opt_train.config.sweep_block import HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES
from opt_train.sweep import study as studies
from opt_train.sweep.plan import Trial
from opt_train.sweep.results import append_result, jsonable, make_record
from opt_train.sweep.status import FAILED, STATUS_FILE

# Trial user attribute: "host:pid" of the driver that started the trial's process.
DRIVER = "driver"


class Heartbeats:
    """The study's trial ids this worker beats for (by job name), and the thread that sends their heartbeats.

    `start(seconds)` starts a thread that sends them every `seconds` and, each time, fails and
    re-queues the study's trials whose worker fell silent (`studies.fail_stale`), even while
    every slot here is busy; `stop()` ends it.
    """

    def __init__(self, study):
        self.study = study
        self._ids = {}  # job name -> trial id (read by the thread too)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = None

    def beat(self, name, trial_id):
        """Sends trial `trial_id`'s first heartbeat and keeps beating for it until `unbeat(name)`."""
        with self._lock:
            self._ids[name] = trial_id
        self.study._storage.record_heartbeat(trial_id)

    def unbeat(self, name):
        with self._lock:
            self._ids.pop(name, None)

    def trial_id(self, name):
        """The trial id beaten for under job `name`, or None."""
        with self._lock:
            return self._ids.get(name)

    def ids(self):
        with self._lock:
            return list(self._ids.values())

    def clear(self):
        with self._lock:
            self._ids.clear()

    def start(self, seconds):
        self._thread = threading.Thread(target=self._run, args=(seconds,), name="sweep-heartbeat", daemon=True)
        self._thread.start()

    def _run(self, seconds):
        import sqlalchemy.exc

        storage = self.study._storage
        while not self._stopped.wait(seconds):
            try:
                for trial_id in self.ids():
                    storage.record_heartbeat(trial_id)
                studies.fail_stale(self.study)
            except sqlalchemy.exc.SQLAlchemyError:
                pass  # the database did not answer this time; the next beat tries again, well within the grace

    def stop(self):
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()


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
        studies.requeue_stale(study, frozen, retries, drop=(DRIVER,), record=jsonable(record))
        report(f"[{frozen.number}] {folder} failed: {reason}")

    return requeue
