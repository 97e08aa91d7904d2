"""How often the loop looks for a stop (a signal, a stop policy): every few updates, less often on fast models.

Each look ends a compiled stretch of updates (`TrainOp.run`), and a stretch costs a
few milliseconds to enter and leave: on the default MLP (0.6 ms an update) looking
every 10 updates made an update take 1.2 ms, every 100 0.76 ms. Looking every 10
updates is what a slow model needs, so that Ctrl-C is answered within seconds.

So the loop looks every `STOP_CHECK_EVERY` updates at first; after each look, it
picks the largest of 10, 100, ... `STOP_CHECK_MOST` updates that the last stretch's
pace fits into `STOP_CHECK_SECONDS` (a signal is answered within about that long).
Workers of a job must look at the same steps (a look is a collective), so they take
the shortest interval any of them picked (`agree`, one more collective a look; with
2 workers of the default MLP, looking every 10 updates took 4.1-5.1 ms an update,
every 100 2.9 ms). `on_nonfinite: stop` looks at every update, before a non-finite
update's step is saved.
"""

from __future__ import annotations

import time

STOP_CHECK_EVERY = 10
STOP_CHECK_SECONDS = 1.0
STOP_CHECK_MOST = 1000


class StopCadence:
    """`every`: updates between looks; `looked(step)` after each look, `paused(seconds)` for time that was not training.

    Args:
        every_update: look at every update (`on_nonfinite: stop`).
        agree: with several workers, a collective that turns this worker's interval into
            the one all use (the least); called by every worker at the same looks.
    """

    def __init__(self, every_update=False, agree=None, clock=time.perf_counter):
        self.every = 1 if every_update else STOP_CHECK_EVERY
        self._adapts = not every_update
        self._agree = agree
        self._clock = clock
        self._last = None  # (time, step) of the last look
        self._paused = 0.0

    def paused(self, seconds):
        """Time since the last look spent on evaluation, checkpoints and reports: not the pace of training."""
        self._paused += seconds

    def looked(self, step):
        """Records a look at `step`; sets the next interval from the pace since the last."""
        now = self._clock()
        # The same verdict on every worker: they look at the same steps.
        if self._adapts and self._last is not None and step > self._last[1]:
            pace = max(now - self._last[0] - self._paused, 0.0) / (step - self._last[1])
            every = STOP_CHECK_EVERY
            while every * 10 <= STOP_CHECK_MOST and every * 10 * pace <= STOP_CHECK_SECONDS:
                every *= 10
            self.every = self._agree(every) if self._agree else every
        self._last, self._paused = (now, step), 0.0
