"""`profile_steps: [start, end]` (`train --profile START:END`): a TensorBoard profile of those updates.

TensorFlow's profiler (`tf.profiler.experimental.start/stop`) traces every op the
process runs between the two calls; the trace lands in `logdir/plugins/profile/<time>/`
where TensorBoard's Profile tab (the `tensorboard-plugin-profile` package, extra
`profile`) reads it. The loop stops its compiled stretches at `start - 1` and `end`
(`boundaries`), so the trace holds exactly updates `start`..`end`, host work of those
steps included; each of those updates runs as a call of its own (`alone`: not inside the
multi-update loop of `TrainOp.run`, whose iterations the profiler would take for the steps),
inside a step marker (`marker`), so the Profile tab's Overview page finds the steps. Only
the chief profiles.
"""

from __future__ import annotations

import contextlib
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
        """The steps after `step` at which the loop must pause for the profiler.

        Inside the range, every step: each profiled update runs in a call of its own, so
        that a step marker can frame it.
        """
        if self.steps is None or self.done:
            return []
        start, end = self.steps
        if start - 1 <= step < end:
            return [step + 1]
        return [s for s in (start - 1, end) if s > step]

    def alone(self, step):
        """Whether update `step` runs as a call of its own (`TrainOp.update`): the profiled ones, and
        the one before them, so that the update call is traced before the trace starts."""
        if self.steps is None or self.done:
            return False
        start, end = self.steps
        return start - 1 <= step <= end

    def marker(self, step):
        """The context of update `step` while the trace runs: TensorFlow's step marker, else nothing.

        The Profile tab's Overview page (and its step-time graph, the input-pipeline
        analysis) divides the trace into steps at the root `TraceMe` events that carry a
        `step_num` (`tf.profiler.experimental.Trace(name, step_num=..., _r=1)`, as Keras's
        `fit` writes them); a trace without them opens on "No step marker observed".
        """
        if not self.running:
            return contextlib.nullcontext()
        import tensorflow as tf

        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

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
