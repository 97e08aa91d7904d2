"""One worker process of a launched job: started in a session of its own that ends with the launcher, its output relayed line by line, its end timed, its state read from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time


def start_worker(number, argv, env, local, sinks, lock, prefix):
    """Starts worker `number` (`argv` with `env`; `local`: on this machine) and relays its output.

    `sinks`: the `(out, err)` its stdout and stderr lines go to, each line after `prefix`,
    written whole under `lock`.
    """
    # A session of its own: a Ctrl-C in the terminal reaches the launcher alone, which
    # passes it on once (twice would mean "stop now, without a checkpoint").
    process = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, preexec_fn=_end_with_launcher,
    )
    worker = WorkerProcess(number, process, local)
    for stream, sink in zip((process.stdout, process.stderr), sinks):
        pump = threading.Thread(target=_pump, args=(worker, stream, sink, stream is process.stderr, lock, prefix),
                                daemon=True)
        pump.start()
        worker.pumps.append(pump)
    return worker


class WorkerProcess:
    """One worker of a launched job: its process, whether it runs here, its last lines, when and how it ended."""

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
        # The moment it ended, to the millisecond: a peer that fails because this one is gone
        # ends a few milliseconds later, usually within one poll of the launcher's loop.
        self.end_watch = threading.Thread(target=self._stamp_end, daemon=True)
        self.end_watch.start()

    @property
    def code(self):
        return self.process.returncode

    def _stamp_end(self):
        try:
            # WNOWAIT: seen ended, left for Popen to reap (it keeps the exit code).
            os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOWAIT)
        except (ChildProcessError, AttributeError):  # reaped already; no waitid (not Linux)
            return
        self.ended_at = time.monotonic()


def _pump(worker, stream, sink, is_err, lock, prefix):
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if is_err and line.strip():
            worker.last_line = line.strip()
            if line.lower().startswith("error"):
                worker.last_error = line.strip()
        with lock:
            sink.write(f"{prefix}{line}\n")
            sink.flush()
    stream.close()


def process_state(pid):
    """The one-letter process state from /proc (T: stopped), or None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ")".
    return text[text.rfind(")") + 2:][:1] or None


def signal_group(rank, number):
    """Sends signal `number` to the worker's process group (nothing when it has ended)."""
    try:
        os.killpg(rank.process.pid, number)
    except OSError:  # ended meanwhile
        pass


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
