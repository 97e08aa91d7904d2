"""A small process pool: runs trial commands P at a time, each writing to its own log, and stops them all on interrupt.

TF-free: the pool only starts and watches processes.
"""

from __future__ import annotations

import dataclasses
import os
import select
import shlex
import signal
import subprocess
import threading
import time

from opt_train.errors import ParamError, signal_exit_code

# Seconds between looks at the running processes when none of them ends sooner (a process's
# end wakes the pool at once where the platform has pidfds: Linux >= 5.3).
POLL_SECONDS = 0.2
# Seconds a stopped trial gets to exit after SIGTERM before it is killed.
STOP_GRACE_SECONDS = 10
_END = object()
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class Job:
    """One process to run: a name, its argv, where its output goes, extra environment."""

    name: str
    argv: tuple
    log_path: str
    env: dict = dataclasses.field(default_factory=dict)
    # File descriptors the process inherits (the trial's folder lock, held while it runs).
    pass_fds: tuple = ()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job's process ended: exit code, seconds it ran, and where its output of this run starts in the log."""

    job: Job
    exit_code: int
    wall_time: float
    log_start: int


def available_cores():
    """CPU cores this process may use (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def thread_environment(parallel, cores=None, environ=None):
    """Thread-count variables so `parallel` trials share the cores instead of each taking all of them.

    A variable the user already set is left alone.
    """
    environ = os.environ if environ is None else environ
    threads = str(max(1, (cores or available_cores()) // parallel))
    return {name: threads for name in THREAD_VARIABLES if name not in environ}


class _Running:
    """A started job: its process, open log file and start time."""

    def __init__(self, job):
        os.makedirs(os.path.dirname(job.log_path) or ".", exist_ok=True)
        self.job = job
        self.log = open(job.log_path, "ab")
        self.log.write(f"$ {shlex.join(job.argv)}\n".encode("utf-8"))
        self.log.flush()
        self.log_start = self.log.tell()
        # Unbuffered, so the log ends with the child's last words even when it is killed.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **job.env}
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            list(job.argv), stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            pass_fds=job.pass_fds,
        )

    def poll(self):
        """The `Outcome` once the process has exited, else None."""
        code = self.process.poll()
        if code is None:
            return None
        self.log.close()
        return Outcome(self.job, code, time.monotonic() - self.started, self.log_start)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()

    def reap(self):
        try:
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def run_jobs(jobs, parallel, on_start=None, on_finish=None):
    """Runs `jobs` at most `parallel` at a time, in order; calls `on_start(job)` and `on_finish(outcome)`.

    `jobs` may be a generator: it is asked for the next job only when a slot is free,
    and may yield None for "nothing to start yet, ask again shortly".

    Returns the outcomes in the order the jobs finished. On any exception (Ctrl-C
    included) every running process is terminated, waited for, and the exception
    goes on.
    """
    if parallel < 1:
        raise ParamError.said("parallel", "out_of_range", f"`parallel` must be >= 1. Received: parallel={parallel}", parallel)
    source = iter(jobs)
    exhausted = False
    running = []
    outcomes = []
    previous_handler = _raise_on_sigterm()
    try:
        while not exhausted or running:
            idle = False
            while not exhausted and len(running) < parallel:
                job = next(source, _END)
                if job is _END:
                    exhausted = True
                    break
                if job is None:
                    idle = True
                    break
                running.append(_Running(job))
                if on_start:
                    on_start(job)
            for entry in list(running):
                outcome = entry.poll()
                if outcome is None:
                    continue
                running.remove(entry)
                outcomes.append(outcome)
                if on_finish:
                    on_finish(outcome)
            if running or idle:
                _wait_for_an_end(running, POLL_SECONDS)
    except BaseException:
        for entry in running:
            entry.stop()
        for entry in running:
            entry.reap()
        raise
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    return outcomes


class LocalLauncher:
    """Runs a sweep's trials as processes of this machine (`run_jobs`), sharing its cores.

    The sweep driver's launcher interface (`sweep/slurm.py`'s `SlurmLauncher` is the other one):
    `run(jobs, parallel, on_start, on_finish, on_submit)`, `alive(frozen_trial)` (whether a trial
    runs elsewhere, so a re-run must not start it: never here, where the trial folder's lock says
    so) and `shares_cores` (whether the trials divide this machine's cores between them).
    """

    shares_cores = True

    @staticmethod
    def alive(frozen_trial):
        del frozen_trial
        return False

    @staticmethod
    def run(jobs, parallel, on_start=None, on_finish=None, on_submit=None):
        del on_submit  # a process of this machine is started, not submitted
        return run_jobs(jobs, parallel, on_start=on_start, on_finish=on_finish)


def _wait_for_an_end(running, seconds):
    """Sleeps `seconds`, or less: until one of the `running` processes has ended.

    A trial of a second used to cost up to POLL_SECONDS more before its slot was
    given to the next one; a sweep of short trials (or a test of the sweep) paid that
    for every trial. Where pidfds are missing, it is a plain sleep.
    """
    descriptors = []
    try:
        for entry in running:
            descriptors.append(os.pidfd_open(entry.process.pid))
        if descriptors:
            select.select(descriptors, [], [], seconds)
        else:
            time.sleep(seconds)
    except ProcessLookupError:
        pass  # one was reaped already: the next look finds it ended
    except (AttributeError, OSError):  # no pidfd_open here
        time.sleep(seconds)
    finally:
        for descriptor in descriptors:
            os.close(descriptor)


def _raise_on_sigterm():
    """Makes SIGTERM (a scheduler stopping the sweep) an exception, so the trials are stopped too.

    Returns the handler it replaced, or None off the main thread, where Python allows none.
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise SystemExit(signal_exit_code(signum))

    return signal.signal(signal.SIGTERM, handler)
