"""Waits, before TensorFlow connects, until every worker of a `TF_CONFIG` / SLURM cluster is up: for a bounded time, and stoppable.

Why not leave it to TensorFlow: `MultiWorkerMirroredStrategy` waits for its peers
inside one C++ call (the coordination service's registration, in
`context.ensure_initialized`) that holds the interpreter's lock for up to an hour,
and TensorFlow's own SIGTERM handler (its preemption notifier) is installed just
before: a worker whose peer never came up (a Kubernetes pod left Pending) printed
nothing, took no SIGTERM and no Ctrl-C, and only SIGKILL ended it.

So each worker meets the others here first, in Python, with its own deadline (the
config's `startup_timeout_secs`) and its own SIGINT / SIGTERM handlers. Worker 0
listens on its own `TF_CONFIG` port (the one address every worker can reach; it is
closed again before TensorFlow's server takes it); every other worker connects to it,
says which worker it is, and waits for `go`, sent once all are there. Past the
deadline each worker ends with one line naming the workers it never heard from
(worker 0 tells the others which ones it is still waiting for). TF-free.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import signal
import socket
import threading
import time

from opt_train.errors import Interrupted, TrainingFailed

# A worker that waits longer than this for its peers says so once (a start-up that waits on
# no one says nothing).
WAIT_NOTE_SECONDS = 2.0
RETRY_SECONDS = 0.25
# After `go`, how long worker 0 lets the others hang up first (so their side of the
# connection, not its TF_CONFIG port, holds the closed connection's TIME_WAIT).
HANG_UP_SECONDS = 5.0
_HELLO = "opt-train-startup"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def wait_for_workers(cluster, timeout, key="startup_timeout_secs", say=None):
    """Returns once every worker of `cluster` (an `opt_train.distributed.cluster.Cluster`) is up.

    Raises `TrainingFailed` (one line naming the workers never heard from) after
    `timeout` seconds, and `Interrupted` (exit 130 / 143) on SIGINT / SIGTERM.
    `say(line)` hears the one line said when the wait is longer than a moment
    (default: printed to stdout).
    """
    if cluster.num_workers <= 1:
        return
    say = say or _print
    with stop_on_signals(f"worker {cluster.task_index}"):
        meeting = _Leader(cluster) if cluster.task_index == 0 else _Follower(cluster)
        meeting.run(time.monotonic() + timeout, timeout, key, say)


def _print(line):
    print(line, flush=True)


@contextlib.contextmanager
def stop_on_signals(name):
    """SIGINT / SIGTERM raise `Interrupted` while the workers meet (main thread only; elsewhere as they were).

    `name`: this process in the line (`worker 0`, `rank 1`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    who, noun = name, name.split()[0]

    def stop(number, frame):
        del frame
        raise Interrupted(f"{who}: interrupted by {signal.Signals(number).name} while waiting for the other "
                          f"{noun}s to start: nothing trained, nothing saved", number)

    # A signal ignored (a job started with nohup, or in a script's background) stays ignored.
    previous = {number: signal.signal(number, stop) for number in _SIGNALS
                if signal.getsignal(number) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _workers_text(cluster, numbers):
    numbers = sorted(numbers)
    noun = "worker" if len(numbers) == 1 else "workers"
    names = ", ".join(str(n) for n in numbers)
    addresses = ", ".join(cluster.workers[n] for n in numbers)
    return f"{noun} {names} ({addresses})"


def _split_address(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class _Lines:
    """Whole lines read from a socket as they come (non-blocking reads)."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.closed = False

    def read(self):
        """The complete lines received so far; sets `closed` at end of stream."""
        try:
            data = self.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return []
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > 4096:  # not one of ours: no line of ours is that long
            self.closed = True
        return [line.decode("ascii", errors="replace").strip() for line in lines]


class _Leader:
    """Worker 0: listens on its TF_CONFIG port until every other worker said hello, then sends `go`."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.peers = {}  # worker number -> _Lines
        self.connections = set()  # every accepted connection still open
        self.heard = set()  # every worker that said hello, even if it left again
        self.selector = selectors.DefaultSelector()

    def _listen(self):
        _, port = _split_address(self.cluster.address)
        try:
            server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, reuse_port=False)
        except (OSError, ValueError):
            try:
                server = socket.create_server(("", port))
            except OSError as error:
                reason = "in use by another process" if error.errno == errno.EADDRINUSE else error.strerror
                raise TrainingFailed(
                    f"worker 0 of {self.cluster.num_workers}: cannot listen on its TF_CONFIG port {port} "
                    f"({reason}); the other workers cannot reach it") from None
        server.setblocking(False)
        return server

    def missing(self):
        return [n for n in range(1, self.cluster.num_workers) if n not in self.peers]

    def run(self, deadline, timeout, key, say):
        server = self._listen()
        self.selector.register(server, selectors.EVENT_READ, None)
        noted = False
        started = time.monotonic()
        try:
            while self.missing():
                now = time.monotonic()
                if now >= deadline:
                    self._give_up(timeout, key)
                if not noted and now - started >= WAIT_NOTE_SECONDS:
                    noted = True
                    say(f"worker 0 of {self.cluster.num_workers}: waiting for "
                        f"{_workers_text(self.cluster, self.missing())} to start, at most {timeout:g} s ({key})")
                before = self.missing()
                for selected, _ in self.selector.select(timeout=min(RETRY_SECONDS * 4, deadline - now)):
                    if selected.data is None:
                        self._accept(server)
                    else:
                        self._read(selected.data)
                if self.missing() != before:
                    self._send_all("waiting " + " ".join(map(str, self.missing())))
            self._send_all("go")
            self._let_them_hang_up()
        finally:
            for lines in list(self.connections):
                self._drop(lines)
            self.selector.close()
            server.close()

    def _give_up(self, timeout, key):
        """Tells the workers still here whom it waited for, and raises its own line."""
        never = [n for n in self.missing() if n not in self.heard]
        self._send_all(f"missing {' '.join(map(str, never or self.missing()))} {timeout:g}")
        count = self.cluster.num_workers
        if never:
            raise TrainingFailed(f"worker 0 of {count}: never heard from {_workers_text(self.cluster, never)} within "
                                 f"{timeout:g} s ({key}); nothing was trained")
        # Each came, but not all stayed until the last was there (a worker gave up at its own deadline).
        raise TrainingFailed(f"worker 0 of {count}: {_workers_text(self.cluster, self.missing())} came but left "
                             f"before all were up, within {timeout:g} s ({key}); nothing was trained")

    def _accept(self, server):
        try:
            sock, _ = server.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(False)
        lines = _Lines(sock)
        lines.worker = None
        self.connections.add(lines)
        self.selector.register(sock, selectors.EVENT_READ, lines)

    def _drop(self, lines):
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(lines.sock)
        lines.sock.close()
        self.connections.discard(lines)
        if lines.worker is not None and self.peers.get(lines.worker) is lines:
            del self.peers[lines.worker]

    def _read(self, lines):
        for line in lines.read():
            words = line.split()
            if len(words) == 4 and words[0] == _HELLO and words[1] == "hello" \
                    and words[2].isdigit() and words[3].isdigit():
                number, count = int(words[2]), int(words[3])
                if count != self.cluster.num_workers or not 0 < number < count:
                    _send(lines, f"refused {self.cluster.num_workers}")
                    lines.closed = True
                    break
                old = self.peers.get(number)
                if old is not None and old is not lines:
                    self._drop(old)  # it connected again: the new connection is the live one
                lines.worker = number
                self.peers[number] = lines
                self.heard.add(number)
                _send(lines, "waiting " + " ".join(map(str, self.missing())))
            else:
                lines.closed = True  # not a worker of ours
                break
        if lines.closed:
            self._drop(lines)

    def _send_all(self, text):
        for lines in list(self.peers.values()):
            _send(lines, text)

    def _let_them_hang_up(self):
        end = time.monotonic() + HANG_UP_SECONDS
        while self.peers and time.monotonic() < end:
            for selected, _ in self.selector.select(timeout=RETRY_SECONDS):
                if selected.data is not None:
                    selected.data.read()
                    if selected.data.closed:
                        self._drop(selected.data)


def _send(lines, text):
    try:
        lines.sock.setblocking(True)
        lines.sock.settimeout(2.0)
        lines.sock.sendall(text.encode("ascii") + b"\n")
    except OSError:
        lines.closed = True
    finally:
        with contextlib.suppress(OSError):
            lines.sock.setblocking(False)


class _Follower:
    """Every worker but 0: connects to worker 0, says which it is, and waits for `go`."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.waiting_for = None  # what worker 0 said it still waits for

    def run(self, deadline, timeout, key, say):
        me, count = self.cluster.task_index, self.cluster.num_workers
        leader = self.cluster.workers[0]
        host, port = _split_address(leader)
        noted = False
        started = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            if not noted and now - started >= WAIT_NOTE_SECONDS:
                noted = True
                whom = (_workers_text(self.cluster, self.waiting_for) + " (worker 0 waits for them)"
                        if self.waiting_for else _workers_text(self.cluster, [0]))
                say(f"worker {me} of {count}: waiting for {whom} to start, at most {timeout:g} s ({key})")
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - now)))
            except OSError:
                time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
                continue
            with sock:
                if self._meet(sock, deadline, me, count, timeout, key):
                    return
            time.sleep(min(RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
        if self.waiting_for:
            raise TrainingFailed(
                f"worker {me} of {count}: never heard from {_workers_text(self.cluster, self.waiting_for)} "
                f"within {timeout:g} s ({key}; worker 0 was waiting for {'it' if len(self.waiting_for) == 1 else 'them'} "
                "too); nothing was trained")
        raise TrainingFailed(
            f"worker {me} of {count}: never heard from {_workers_text(self.cluster, [0])} within {timeout:g} s "
            f"({key}); nothing was trained")

    def _meet(self, sock, deadline, me, count, timeout, key):
        """True on `go`; False when the connection ended first (worker 0 may come again)."""
        try:
            sock.sendall(f"{_HELLO} hello {me} {count}\n".encode("ascii"))
        except OSError:
            return False
        sock.setblocking(False)
        lines = _Lines(sock)
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_READ)
            while time.monotonic() < deadline and not lines.closed:
                if not selector.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                    continue
                for line in lines.read():
                    words = line.split()
                    if words == ["go"]:
                        return True
                    if words[:1] == ["waiting"] and all(w.isdigit() for w in words[1:]):
                        self.waiting_for = [int(w) for w in words[1:] if int(w) != me] or None
                    elif words[:1] == ["missing"] and len(words) >= 2:
                        numbers = [int(w) for w in words[1:-1] if w.isdigit()]
                        waited = words[-1]
                        raise TrainingFailed(
                            f"worker {me} of {count}: never heard from {_workers_text(self.cluster, numbers)}: "
                            f"worker 0 waited {waited} s ({key}); nothing was trained")
                    elif words[:1] == ["refused"]:
                        raise TrainingFailed(
                            f"worker {me} of {count}: worker 0's TF_CONFIG names {' '.join(words[1:])} workers, "
                            f"this worker's {count}: the workers were started for different jobs")
                    else:
                        return False  # not worker 0 of ours on that port
        return False
