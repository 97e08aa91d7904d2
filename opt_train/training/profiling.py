"""`profile_steps: [start, end]` (`train --profile START:END`): a TensorBoard profile of those updates.

TensorFlow's profiler (`tf.profiler.experimental.start/stop`) traces every op the
process runs between the two calls; the trace lands in `logdir/plugins/profile/<time>/`
where TensorBoard's Profile tab (the `tensorboard-plugin-profile` package, extra
`profile`) reads it. The loop stops its compiled stretches at `start - 1` and `end`
(`boundaries`), so the trace holds exactly updates `start`..`end`, host work of those
steps included. Only the chief profiles.
"""

from __future__ import annotations

import os


class Profiler:
    """Starts the trace before update `start` and stops it after update `end`."""

    def __init__(self, config, say, enabled=True):
        self.steps = tuple(config.profile_steps) if enabled and config.profile_steps else None
        self.logdir = config.logdir
        self.say = say
        self.running = False
        self.done = False

    @property
    def directory(self):
        return os.path.join(self.logdir, "plugins", "profile")

    def boundaries(self, step):
        """The steps after `step` at which the loop must pause for the profiler."""
        if self.steps is None or self.done:
            return []
        start, end = self.steps
        return [s for s in (start - 1, end) if s > step]

    def at(self, step):
        """Called with `step` updates done: starts or stops the trace as the range says."""
        if self.steps is None or self.done:
            return
        start, end = self.steps
        if not self.running and start - 1 <= step < end:
            import tensorflow as tf

            tf.profiler.experimental.start(self.logdir)
            self.running = True
            self.say(f"profiling updates {step + 1}-{end} into {self.directory}")
        elif self.running and step >= end:
            self._stop()
            self.say(f"profile written to {self.directory}: tensorboard --logdir {self.logdir} (Profile tab)")
        elif not self.running and step >= end:
            self.done = True  # a run resumed past the range: nothing left to profile

    def _stop(self):
        import tensorflow as tf

        tf.profiler.experimental.stop()
        self.running, self.done = False, True

    def close(self):
        """A run that ends inside the range (stopped, interrupted) still leaves the trace so far."""
        if self.running:
            self._stop()
