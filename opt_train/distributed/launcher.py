"""`opt-train train --np N`: starts N workers of one command (Horovod ranks or tf.distribute workers), watches them, and reports the first that fails.

Why not `horovod.run(func)`: it pickles a function into `horovod.runner.run_task`, so
a rank's own exit code (130/143 after an interrupt, 2 for a bad config) is lost, and
like `horovodrun` it names the first rank to *exit* — the healthy one, when another
hangs — and ends with a traceback. Here the workers are our own child processes, so
this module knows their pids, their exit statuses and whether one is stopped.

One supervision path for both backends; what differs is each worker's environment,
made by a *plan* (`plan.ranks`: `(host, is_local, environment)` per worker;
`plan.remote_argv(host, shell_command)`, over ssh with the launcher's `Ssh` port and key,
opt_train/distributed/hosts.py; `plan.stop()`):
- `horovod`: the environment `horovodrun --gloo` gives each rank, around a Gloo
  rendezvous server (`opt_train.distributed.horovod.Rendezvous`);
- `tf`: a `TF_CONFIG` per worker (`TFConfigPlan`, opt_train/distributed/tf_config_plan.py):
  a free port for each local worker, port 8888 + its index on the host for a remote one,
  worker 0 the chief.
Every worker also gets `OPT_TRAIN_LAUNCHED=1`: the launcher printed the config's notes
once already.

The job's outcome, in order of blame:
- a local worker stopped (SIGSTOP, state T) for `rank_timeout` seconds is the failed
  one, even if the others ended first on their collective timeout while it hung;
- else a worker killed by a signal it did not handle (SIGKILL, a crash);
- else the first worker seen to exit non-zero, one whose error line says it lost a peer
  (`names.is_lost_peer_line`) last: two ends within one scheduling slice have no order the
  launcher can see, and the worker that noticed the failure may be seen to end first.
Interrupts are not failures: a signal to the launcher is passed once to every worker
(each stops at the same update, worker 0 checkpoints) and the launcher exits with the
workers' 130/143. TF-free: imports Horovod's runner only for `horovod`, inside `run`.

With `max_restarts` K (torchrun's `--max-restarts`), a failed job (a worker failed, was
killed or hung) is relaunched whole, up to K times: every worker of it has ended by then,
the new plan gives fresh ports (a new `TF_CONFIG`, a new Gloo rendezvous), and each
worker, told the attempt in `OPT_TRAIN_RESTART_COUNT`, resumes from the run's newest
checkpoint as any re-run of the command does. An interrupt, or a worker's exit 2 (a
config it refuses: the same again next time), ends the job as without restarts.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from opt_train.distributed.hosts import Ssh
from opt_train.distributed.names import NOUNS, is_lost_peer_line
from opt_train.distributed.tf_config_plan import TFConfigPlan
from opt_train.distributed.worker_process import process_state, signal_group, start_worker
from opt_train.errors import (
    DONE_EXIT_CODE, FAILED_EXIT_CODE, INTERRUPTED_EXIT_CODES, PRUNED_EXIT_CODE, USAGE_EXIT_CODE, ParamError,
    signal_exit_code,
)

POLL_SECONDS = 0.1
# After the failed rank ended, the others get this long to end on their own (a
# collective with a dead peer fails at once) before SIGTERM, then SIGKILL.
GRACE_SECONDS = 5.0
# Ranks that end with these stopped on purpose, all at the same update (an interrupt, or
# 3: a sweep's pruner stopped the trial): not failures, passed on as they are.
INTERRUPT_CODES = (PRUNED_EXIT_CODE, *INTERRUPTED_EXIT_CODES)
# Set in every worker's environment: the launcher has shown the config's notes.
LAUNCHED_VARIABLE = "OPT_TRAIN_LAUNCHED"
# Set in every worker's environment: how many times the launcher has relaunched the job (0 at first).
RESTART_VARIABLE = "OPT_TRAIN_RESTART_COUNT"


def exit_description(exit_code):
    """`exit code 3`, or `killed by SIGKILL` for a process ended by a signal (a Popen returncode)."""
    if exit_code is not None and exit_code < 0:
        try:
            return f"killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"killed by signal {-exit_code}"
    return f"exit code {exit_code}"


def exit_code(code):
    """The launcher's own exit code for a rank's returncode: 2, 3, 130, 143 passed on, anything else 1."""
    if code in (DONE_EXIT_CODE, USAGE_EXIT_CODE, *INTERRUPT_CODES):
        return code
    return FAILED_EXIT_CODE


class Launcher:
    """Runs `command` as `num_proc` workers on `hosts` (`host:slots,...`; default `localhost:N`).

    `backend`: `horovod` (Horovod ranks) or `tf` (tf.distribute workers, one
    `TF_CONFIG` each). `run()` returns `(exit code, message)`: the message is the one
    line naming the failed worker, or None. `out` / `err` receive the workers' output:
    worker 0's as it is, the others' prefixed with `[rank N]` / `[worker N]`.
    """

    def __init__(self, command, num_proc, hosts=None, rank_timeout=60.0, out=None, err=None, env=None,
                 backend="horovod", ssh=None, max_restarts=0):
        if backend not in NOUNS:
            raise ParamError.said("backend", "unknown_name",
                                  f"`backend` must be one of {sorted(NOUNS)}. Received: backend={backend!r}", backend)
        self.backend = backend
        self.noun = NOUNS[backend]
        self.command = list(command)
        self.num_proc = num_proc
        self.hosts = hosts or f"localhost:{num_proc}"
        self.rank_timeout = rank_timeout
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.env = dict(os.environ if env is None else env)
        self.ssh = ssh or Ssh()
        self.max_restarts = max_restarts
        self.restarts = 0
        self.ranks = []
        self._signal = 0
        self._lock = threading.Lock()

    # -- starting -------------------------------------------------------------
    def _spawn(self, number, host, local, rank_env, plan):
        rank_env = {**rank_env, LAUNCHED_VARIABLE: "1", RESTART_VARIABLE: str(self.restarts)}
        env = {**self.env, **rank_env, "PYTHONUNBUFFERED": "1"}
        if local:
            argv = self.command
        else:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**rank_env, "PYTHONUNBUFFERED": "1"}.items())
            remote = f"cd {shlex.quote(os.getcwd())} > /dev/null 2>&1 ; env {exports} {shlex.join(self.command)}"
            argv = plan.remote_argv(host, remote)
        prefix = "" if number == 0 else f"[{self.noun} {number}] "
        return start_worker(number, argv, env, local, (self.out, self.err), self._lock, prefix)

    # -- running ----------------------------------------------------------------
    def _plan(self):
        if self.backend == "horovod":
            from opt_train.distributed.horovod import Rendezvous

            return Rendezvous(self.hosts, self.num_proc, ssh=self.ssh)
        return TFConfigPlan(self.hosts, self.num_proc, ssh=self.ssh)

    def run(self):
        previous = {number: signal.signal(number, self._record) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            while True:
                code, message = self._attempt()
                if message is None or self._signal or code == USAGE_EXIT_CODE or self.restarts >= self.max_restarts:
                    if message is not None and self.restarts:
                        message += f" (the job was restarted {self.restarts} times; --max-restarts {self.max_restarts})"
                    return code, message
                self.restarts += 1
                with self._lock:
                    self.err.write(f"restart {self.restarts} of {self.max_restarts}: {message}; every {self.noun} "
                                   "was stopped, the job starts again from the newest checkpoint\n")
                    self.err.flush()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _attempt(self):
        """Starts and watches the job once; `(exit code, message)` as `run`'s."""
        plan = None
        try:
            plan = self._plan()
            if self._signal:  # it came before any worker started
                return signal_exit_code(self._signal), None
            self.ranks = [self._spawn(i, host, local, env, plan)
                          for i, (host, local, env) in enumerate(plan.ranks)]
            if self._signal:  # it came while the ranks were being started
                self._send_all(self._signal)
            return self._watch()
        finally:
            self._kill_all(signal.SIGKILL)
            if plan is not None:
                plan.stop()

    def _record(self, number, frame):
        del frame
        if self._signal:
            # A second Ctrl-C: the ranks' second signal ends them at once, as without a launcher.
            self._send_all(number)
            return
        self._signal = number
        self._send_all(number)

    def _send_all(self, number):
        for rank in self.ranks:
            if rank.code is None:
                rank.signalled = True  # its death by this signal is ours, not its failure
                signal_group(rank, number)

    def _kill_all(self, number):
        self._send_all(number)
        for rank in self.ranks:
            try:
                rank.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def _watch(self):
        failed_at = None
        terminated = False
        while True:
            now = time.monotonic()
            for rank in self.ranks:
                if rank.code is None and rank.process.poll() is not None:
                    rank.end_watch.join(timeout=1.0)
                    rank.ended_at = rank.ended_at or now
                state = process_state(rank.process.pid) if rank.code is None and rank.local else None
                if state is not None and state != "Z":  # Z: ended, not yet reaped
                    if state in ("T", "t"):
                        rank.stopped_since = rank.stopped_since or now
                        if now - rank.stopped_since >= self.rank_timeout:
                            rank.hung = True
                    else:
                        rank.stopped_since = None
            culprit = self._culprit()
            for rank in self.ranks:
                if rank.hung and rank.code is None:
                    # A stopped process takes no SIGTERM; its peers wait on it.
                    signal_group(rank, signal.SIGKILL)
            if culprit is not None and failed_at is None:
                failed_at = now
            running = [rank for rank in self.ranks if rank.code is None]
            if not running:
                break
            if failed_at is not None and now - failed_at > GRACE_SECONDS:
                if not terminated:
                    self._send_all(signal.SIGTERM)
                    terminated = True
                elif now - failed_at > 2 * GRACE_SECONDS:
                    self._send_all(signal.SIGKILL)
            time.sleep(POLL_SECONDS)
        for rank in self.ranks:
            rank.process.wait()
            for pump in rank.pumps:
                # The ranks' last lines, the error line among them; bounded, as a process the
                # rank left behind (ssh's) may hold its pipe open.
                pump.join(timeout=5)
        return self._outcome()

    def _culprit(self):
        """The rank to blame so far, or None while nothing failed (interrupts are not failures)."""
        others_failed = any(rank.code not in (None, 0) for rank in self.ranks)
        for rank in self.ranks:
            # Stopped while the others gave up on it (Gloo's timeout): the stopped one is to blame.
            if rank.stopped_since is not None and rank.code is None and others_failed:
                rank.hung = True
        hung = [rank for rank in self.ranks if rank.hung]
        if hung:
            return hung[0]
        ended = [rank for rank in self.ranks if rank.code not in (None, 0)]
        signalled = [rank for rank in ended if rank.code < 0 and not rank.signalled]
        if signalled:
            return min(signalled, key=lambda rank: rank.ended_at)
        failures = [rank for rank in ended if rank.code not in INTERRUPT_CODES]
        if failures:
            return min(failures, key=lambda rank: (is_lost_peer_line(rank.last_error), rank.ended_at, rank.number))
        return None

    def _outcome(self):
        codes = [rank.code for rank in self.ranks]
        hung = [rank for rank in self.ranks if rank.hung]
        if hung:
            rank = hung[0]
            return FAILED_EXIT_CODE, (f"{self.noun} {rank.number} hung: stopped, not answering the other "
                                      f"{self.noun}s (rank_timeout_secs: {self.rank_timeout:g} s); the job was ended")
        if self._signal and all(code in (*INTERRUPT_CODES, 0, -self._signal) for code in codes):
            return signal_exit_code(self._signal), None
        if all(code == DONE_EXIT_CODE for code in codes):
            return DONE_EXIT_CODE, None
        culprit = self._culprit()
        if culprit is None:  # every rank stopped on an interrupt
            return max(codes), None
        code = exit_code(culprit.code)
        if culprit.code == USAGE_EXIT_CODE and all(c == USAGE_EXIT_CODE for c in codes):
            return USAGE_EXIT_CODE, None  # every rank said why already (a config the ranks refused)
        said = culprit.last_error or culprit.last_line
        detail = f": {said}" if said and culprit.code >= 0 else ""
        return code, f"{self.noun} {culprit.number} failed ({exit_description(culprit.code)}){detail}"


def launch(command, num_proc, hosts=None, rank_timeout=60.0, env=None, backend="horovod", ssh=None, max_restarts=0):
    """Runs `command` as `num_proc` workers of `backend` (horovod, tf), relaunched up to `max_restarts` times after a
    failure; returns (exit code, one-line message or None)."""
    return Launcher(command, num_proc, hosts=hosts, rank_timeout=rank_timeout, env=env, backend=backend,
                    ssh=ssh, max_restarts=max_restarts).run()
