"""A TCP forwarder whose answers lag: the window in which a process that exits takes its last answers with it.

`SlowLink(port, delay)` listens on a free port of its own and forwards each connection
to `port`. What the connecting side sends goes through at once; what the listening
side answers arrives `delay` seconds late, in order. When the listening side's end
closes, the connecting side's connection is reset at once and the answers still
under way are lost: as if they had still been in the closing process, the way a
gRPC answer is when its process exits right after handing it over. A worker whose
TF_CONFIG names a peer at the link's port reaches that peer through it, while the
peer listens on its own port.
"""

from __future__ import annotations

import collections
import socket
import struct
import threading
import time


class SlowLink:
    def __init__(self, port, delay):
        self.target = ("127.0.0.1", port)
        self.delay = delay
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self._closed.set()
        self._server.close()

    def _accept(self):
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the peer is gone
                _reset(client)
                continue
            threading.Thread(target=_copy, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_copy_late, args=(upstream, client, self.delay), daemon=True).start()


def _copy(source, sink):
    """Copies `source` to `sink` as it comes; at its end, ends `sink`'s sending side."""
    while True:
        try:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
        except OSError:
            break
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _copy_late(source, sink, delay):
    """Copies `source` to `sink`, each chunk `delay` s after it was read; at `source`'s end,
    resets `sink` at once, dropping what is still pending."""
    pending, ready = collections.deque(), threading.Condition()
    ended = threading.Event()

    def send():
        while not ended.is_set():
            with ready:
                if not pending:
                    ready.wait(0.05)
                    continue
                due, chunk = pending[0]
                if due > time.monotonic():
                    ready.wait(due - time.monotonic())
                    continue
                pending.popleft()
            try:
                sink.sendall(chunk)
            except OSError:
                return

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while True:
        try:
            chunk = source.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            break
        with ready:
            pending.append((time.monotonic() + delay, chunk))
            ready.notify()
    ended.set()
    sender.join()
    _reset(sink)
    source.close()


def _reset(connection):
    """Closes with a reset (RST), not an orderly end: the other side reads an error."""
    try:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    connection.close()
