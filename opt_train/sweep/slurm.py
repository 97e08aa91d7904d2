"""Runs sweep trials as the tasks of SLURM array jobs: submits them with sbatch, watches squeue, reports their ends.

TF-free. The launcher has the local pool's contract (`run(jobs, parallel, on_start,
on_finish)`), so the sweep driver hands out, records and resumes trials alike under both.
Every trial the driver has ready goes into one `sbatch --array=0-(N-1)%P` job whose task
`i` runs trial `i`'s command in its logdir (the folder `--out`, on a filesystem the nodes
share); a task's end is read from the trial's own files (`final_metrics.json`, the
`interrupted` / `pruned` records of `metrics.jsonl`, `failure.json`), as a re-run of the
sweep reads them: no accounting database is needed. A task that ended with none of them
(cancelled before it trained, its node lost) counts as interrupted: the trial stays
RUNNING in the study and the next run of the sweep resubmits it, to resume from its
checkpoint. The trainer is the task's own process (`exec`), so SLURM's SIGTERM on
`scancel`, `scontrol requeue` or a time limit reaches it once and it checkpoints at one
update; GPUs are what SLURM gives the task (`--sbatch-args "--gres=gpu:2"`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time

from opt_train.errors import FAILED_EXIT_CODE, PRUNED_EXIT_CODE, signal_exit_code
from opt_train.sweep.runner import Outcome
from opt_train.sweep.status import final_metrics, records_size, stop_record
from opt_train.trial import read_failure

# Trial user attribute: "JOBID_TASK" of the SLURM array task that runs the trial.
TASK = "slurm_task"
TASKS_FOLDER = "slurm"
POLL_SECONDS = 2.0
COMMAND_SECONDS = 60
_END = object()
# A task gone from the queue with no record of how it ended: resumed by the next run, as an interrupted trial.
LOST_EXIT_CODE = signal_exit_code(signal.SIGTERM)


class SlurmError(RuntimeError):
    """A SLURM command failed: its words, on one line."""


def missing_commands():
    """The SLURM commands the launcher needs that are not on PATH."""
    return [name for name in ("sbatch", "squeue", "scancel") if shutil.which(name) is None]


def _command(argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"{argv[0]}: {error}") from None
    if done.returncode != 0:
        words = " ".join((done.stderr or done.stdout).split()) or f"exit code {done.returncode}"
        raise SlurmError(f"{shlex.join(argv[:2])} ...: {words}")
    return done.stdout


def queued_tasks(job_ids):
    """`{"JOBID_TASK", ...}` of the given array jobs still pending or running (one task per line: `squeue -r`)."""
    if not job_ids:
        return set()
    out = _command(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sorted(job_ids))])
    return set(out.split())


def task_alive(task):
    """Whether the array task `"JOBID_TASK"` is still pending or running."""
    job_id = task.partition("_")[0]
    try:
        return task in queued_tasks({job_id})
    except SlurmError as error:
        # squeue refuses a job id it has forgotten: that task is not running.
        if "Invalid job id" in str(error):
            return False
        raise


def array_script(jobs, cwd):
    """The batch script of one array job: task `i` runs `jobs[i]` in `cwd`, its output appended to the job's log."""
    lines = ["#!/bin/bash", "# Written by `opt-train sweep --launcher slurm`: array task i runs trial i.",
             'case "$SLURM_ARRAY_TASK_ID" in']
    for index, job in enumerate(jobs):
        settings = [f"{name}={value}" for name, value in {"PYTHONUNBUFFERED": "1", **job.env}.items()]
        command = shlex.join(["env", *settings, *job.argv])
        lines.append(f"{index}) cd {shlex.quote(cwd)} && exec {command} >> {shlex.quote(job.log_path)} 2>&1 ;;")
    lines += ["esac", 'echo "no trial for array task $SLURM_ARRAY_TASK_ID" >&2', "exit 2", ""]
    return "\n".join(lines)


def exit_code_of(logdir, records_start):
    """How a trial's task ended, as the exit code its process would have given, read from the trial's own files."""
    if final_metrics(logdir) is not None:
        return 0
    if stop_record(logdir, "pruned", records_start) is not None:
        return PRUNED_EXIT_CODE
    interrupted = stop_record(logdir, "interrupted", records_start)
    if interrupted is not None:
        return signal_exit_code(getattr(signal, str(interrupted["interrupted"]), signal.SIGTERM))
    if read_failure(logdir) is not None:
        return FAILED_EXIT_CODE
    return LOST_EXIT_CODE


class SlurmLauncher:
    """Submits the driver's trials as SLURM array tasks (`sbatch_args` added to every `sbatch`); the interface of
    `runner.LocalLauncher`."""

    shares_cores = False  # a task has the cores SLURM gave it

    def __init__(self, out, sbatch_args=(), name="opt-train-sweep"):
        self.out, self.sbatch_args, self.name = out, tuple(sbatch_args), name

    @staticmethod
    def alive(frozen_trial):
        """Whether the trial's array task (a user attribute) is still queued or running on the cluster."""
        task = frozen_trial.user_attrs.get(TASK)
        return bool(task) and task_alive(task)

    def submit(self, jobs, parallel):
        """Submits `jobs` as one array job, at most `parallel` tasks at once; returns its job id."""
        folder = os.path.join(self.out, TASKS_FOLDER)
        os.makedirs(folder, exist_ok=True)
        number = sum(1 for name in os.listdir(folder) if name.endswith(".sh"))
        script = os.path.join(folder, f"array-{number:03d}.sh")
        with open(script, "w") as handle:
            handle.write(array_script(jobs, os.getcwd()))
        argv = ["sbatch", "--parsable", f"--array=0-{len(jobs) - 1}%{parallel}", f"--job-name={self.name}",
                f"--output={os.path.join(folder, '%A_%a.out')}", *self.sbatch_args, script]
        return _command(argv).strip().split(";")[0]

    def run(self, jobs, parallel, on_start=None, on_finish=None, on_submit=None):
        """Runs `jobs` (a generator that may yield None for "ask again shortly") as array tasks; calls
        `on_submit(job, "JOBID_TASK")`, `on_start(job)` and `on_finish(outcome)`; returns the outcomes.

        On any exception (Ctrl-C included) the tasks still queued or running are cancelled
        (SIGTERM: each trial checkpoints) and the exception goes on.
        """
        source, exhausted = iter(jobs), False
        waiting = {}  # "JOBID_TASK" -> (job, submitted at, log start, metrics.jsonl size at start)
        outcomes = []
        try:
            while not exhausted or waiting:
                batch = []
                while not exhausted:
                    job = next(source, _END)
                    if job is _END:
                        exhausted = True
                    elif job is not None:
                        batch.append(job)
                        continue
                    break
                if batch:
                    starts = [self._log_start(job) for job in batch]
                    job_id = self.submit(batch, parallel)
                    for index, (job, log_start) in enumerate(zip(batch, starts)):
                        task = f"{job_id}_{index}"
                        logdir = os.path.dirname(job.log_path)
                        waiting[task] = (job, time.monotonic(), log_start, records_size(logdir))
                        if on_submit:
                            on_submit(job, task)
                        if on_start:
                            on_start(job)
                if waiting:
                    queued = queued_tasks({task.partition("_")[0] for task in waiting})
                    for task in [task for task in waiting if task not in queued]:
                        job, submitted, log_start, records_start = waiting.pop(task)
                        code = exit_code_of(os.path.dirname(job.log_path), records_start)
                        outcome = Outcome(job, code, time.monotonic() - submitted, log_start)
                        outcomes.append(outcome)
                        if on_finish:
                            on_finish(outcome)
                if waiting or not exhausted:
                    time.sleep(POLL_SECONDS)
        except BaseException:
            if waiting:
                subprocess.run(["scancel", *sorted({task.partition("_")[0] for task in waiting})],
                               capture_output=True, timeout=COMMAND_SECONDS)
            raise
        return outcomes

    @staticmethod
    def _log_start(job):
        """Writes the command line into the trial's log, as the local pool does; returns where the task's output starts."""
        os.makedirs(os.path.dirname(job.log_path) or ".", exist_ok=True)
        with open(job.log_path, "ab") as log:
            log.write(f"$ {shlex.join(job.argv)}\n".encode("utf-8"))
            return log.tell()
