"""Ctrl-C and a scheduler's SIGTERM during training become a request to stop at the next update boundary.

The loop looks at the request where the model is between updates, saves a checkpoint
there and ends with exit code 128 + the signal number, so re-running the same command
resumes exactly. A second signal is not caught: it ends the run at once, as usual.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequests:
    """Records the first SIGINT/SIGTERM while active (`with StopRequests() as requests:`).

    `signal_number` is 0 until a signal arrives. Outside the main thread, where Python
    cannot install handlers, it records nothing and the signals act as they would.
    """

    def __init__(self):
        self.signal_number = 0
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._record) for number in SIGNALS}
        return self

    def __exit__(self, *exc_info):
        self._restore()

    def _record(self, number, frame):
        del frame
        self.signal_number = number
        # The next signal takes its usual course: a user pressing Ctrl-C twice means now.
        self._restore()

    def _restore(self):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}
