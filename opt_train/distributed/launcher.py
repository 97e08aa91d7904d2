"""`opt-train train --np N`: starts N Horovod ranks of one command, watches them, and reports the first that fails.

Why not `horovod.run(func)`: it pickles a function into `horovod.runner.run_task`, so
a rank's own exit code (130/143 after an interrupt, 2 for a bad config) is lost, and
like `horovodrun` it names the first rank to *exit* — the healthy one, when another
hangs — and ends with a traceback. Here the ranks are our own child processes,
started with the environment `horovodrun --gloo` would give them (the Gloo
rendezvous comes from Horovod: `opt_train.distributed.horovod.Rendezvous`), so this
module knows their pids, their exit statuses and whether one is stopped.

The job's outcome, in order of blame:
- a local rank stopped (SIGSTOP, state T) for `rank_timeout` seconds is the failed
  rank, even if the others ended first on Gloo's timeout while it hung;
- else a rank killed by a signal it did not handle (SIGKILL, a crash);
- else the first rank seen to exit non-zero.
Interrupts are not failures: a signal to the launcher is passed once to every rank
(each stops at the same update, rank 0 checkpoints) and the launcher exits with the
ranks' 130/143. TF-free: imports Horovod's runner only, inside `launch`.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
import time

POLL_SECONDS = 0.1
# After the failed rank ended, the others get this long to end on their own (a
# collective with a dead peer fails at once) before SIGTERM, then SIGKILL.
GRACE_SECONDS = 5.0
# Ranks that end with these stopped on purpose, all at the same update (an interrupt, or
# 3: a sweep's pruner stopped the trial): not failures, passed on as they are.
INTERRUPT_CODES = (3, 128 + signal.SIGINT, 128 + signal.SIGTERM)


class _Rank:
    def __init__(self, number, process, local):
        self.number = number
        self.process = process
        self.local = local
        self.last_line = ""
        self.last_error = ""
        self.stopped_since = None
        self.hung = False
        self.signalled = False
        self.pumps = []
        self.ended_at = None

    @property
    def code(self):
        return self.process.returncode


def _state(pid):
    """The one-letter process state from /proc (T: stopped), or None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ")".
    return text[text.rfind(")") + 2:][:1] or None


def _end_with_launcher():
    """In a new rank, before exec: SIGTERM when the launcher dies (killed too hard to pass a signal on).

    In a session of its own, a rank gets no hang-up from the terminal; without this it
    would train on, alone, after `kill -9` of the launcher (a sweep's timeout does that).
    Linux only (prctl PR_SET_PDEATHSIG); elsewhere nothing changes.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal_group(rank, number):
    try:
        os.killpg(rank.process.pid, number)
    except OSError:  # ended meanwhile
        pass


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
    if code in (0, 2, *INTERRUPT_CODES):
        return code
    return 1


class Launcher:
    """Runs `command` as `num_proc` ranks on `hosts` (`host:slots,...`; default `localhost:N`).

    `run()` returns `(exit code, message)`: the message is the one line naming the
    failed rank, or None. `out` / `err` receive the ranks' output: rank 0's as it is,
    the others' prefixed with `[rank N]`.
    """

    def __init__(self, command, num_proc, hosts=None, rank_timeout=60.0, out=None, err=None, env=None):
        self.command = list(command)
        self.num_proc = num_proc
        self.hosts = hosts or f"localhost:{num_proc}"
        self.rank_timeout = rank_timeout
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.env = dict(os.environ if env is None else env)
        self.ranks = []
        self._signal = 0
        self._lock = threading.Lock()

    # -- starting -------------------------------------------------------------
    def _spawn(self, number, host, local, rank_env, rendezvous):
        env = {**self.env, **rank_env, "PYTHONUNBUFFERED": "1"}
        if local:
            argv = self.command
        else:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in {**rank_env, "PYTHONUNBUFFERED": "1"}.items())
            remote = f"cd {shlex.quote(os.getcwd())} > /dev/null 2>&1 ; env {exports} {shlex.join(self.command)}"
            argv = rendezvous.remote_argv(host, remote)
        # A session of its own: a Ctrl-C in the terminal reaches the launcher alone, which
        # passes it on once (twice would mean "stop now, without a checkpoint").
        process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, preexec_fn=_end_with_launcher,
        )
        rank = _Rank(number, process, local)
        for stream, sink in ((process.stdout, self.out), (process.stderr, self.err)):
            pump = threading.Thread(target=self._pump, args=(rank, stream, sink, stream is process.stderr),
                                    daemon=True)
            pump.start()
            rank.pumps.append(pump)
        return rank

    def _pump(self, rank, stream, sink, is_err):
        prefix = "" if rank.number == 0 else f"[rank {rank.number}] "
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if is_err and line.strip():
                rank.last_line = line.strip()
                if line.lower().startswith("error"):
                    rank.last_error = line.strip()
            with self._lock:
                sink.write(f"{prefix}{line}\n")
                sink.flush()
        stream.close()

    # -- running ----------------------------------------------------------------
    def run(self):
        from opt_train.distributed.horovod import Rendezvous

        previous = {number: signal.signal(number, self._record) for number in (signal.SIGINT, signal.SIGTERM)}
        rendezvous = None
        try:
            rendezvous = Rendezvous(self.hosts, self.num_proc)
            if self._signal:  # it came before any rank started
                return 128 + self._signal, None
            self.ranks = [self._spawn(i, host, local, env, rendezvous)
                          for i, (host, local, env) in enumerate(rendezvous.ranks)]
            if self._signal:  # it came while the ranks were being started
                self._send_all(self._signal)
            return self._watch()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            self._kill_all(signal.SIGKILL)
            if rendezvous is not None:
                rendezvous.stop()

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
                _signal_group(rank, number)

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
                    rank.ended_at = now
                state = _state(rank.process.pid) if rank.code is None and rank.local else None
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
                    _signal_group(rank, signal.SIGKILL)
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
            return min(failures, key=lambda rank: (rank.ended_at, rank.number))
        return None

    def _outcome(self):
        codes = [rank.code for rank in self.ranks]
        hung = [rank for rank in self.ranks if rank.hung]
        if hung:
            rank = hung[0]
            return 1, (f"rank {rank.number} hung: stopped, not answering the other ranks "
                       f"(rank_timeout_secs: {self.rank_timeout:g} s); the job was ended")
        if self._signal and all(code in (*INTERRUPT_CODES, 0, -self._signal) for code in codes):
            return 128 + self._signal, None
        if all(code == 0 for code in codes):
            return 0, None
        culprit = self._culprit()
        if culprit is None:  # every rank stopped on an interrupt
            return max(codes), None
        code = exit_code(culprit.code)
        if culprit.code == 2 and all(c == 2 for c in codes):
            return 2, None  # every rank said why already (a config the ranks refused)
        said = culprit.last_error or culprit.last_line
        detail = f": {said}" if said and culprit.code >= 0 else ""
        return code, f"rank {culprit.number} failed ({exit_description(culprit.code)}){detail}"


def launch(command, num_proc, hosts=None, rank_timeout=60.0, env=None):
    """Runs `command` as `num_proc` Horovod ranks; returns (exit code, one-line message or None)."""
    return Launcher(command, num_proc, hosts=hosts, rank_timeout=rank_timeout, env=env).run()
