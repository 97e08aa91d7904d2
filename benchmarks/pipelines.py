"""The three ways of training one model measured side by side: opt-train's step, a hand-written loop, `fit`.

Each pipeline owns its own model and optimizer (same architecture, seed, data and
optimizer class) and offers `measure(warmup, steps) -> seconds`: it runs `warmup`
untimed updates, then times `steps` updates and returns the wall time of those.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import time

import keras
import tensorflow as tf


class BatchSource:
    """Batches for the pipelines: a fixed list of pre-fetched tensors cycled, or the live tf.data iterator.

    Feeding every pipeline the same in-memory tensors keeps the input pipeline out
    of the comparison; `live=True` measures with the real `tf.data` iterator instead.
    """

    def __init__(self, dataset, count, live=False):
        self.dataset = dataset
        self.live = live
        self.batches = [] if live else [tuple(part for part in batch) for batch in dataset.take(count)]

    def iterator(self):
        """An endless iterator of `(features, labels)` batches."""
        return iter(self.dataset) if self.live else itertools.cycle(self.batches)

    def as_dataset(self):
        """The same batches as a `tf.data.Dataset` of batches, for `Model.fit`."""
        if self.live:
            return self.dataset
        features = tf.stack([x for x, _ in self.batches])
        labels = tf.stack([y for _, y in self.batches])
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat()


def _timed(run_updates, warmup, steps):
    run_updates(warmup)
    start = time.perf_counter()
    run_updates(steps)
    return time.perf_counter() - start


# max_steps for the harness's runs: they are stopped by the harness, never by the loop.
_UNBOUNDED_STEPS = 10**9


class OptTrainPipeline:
    """(a) What `opt-train train` runs: the training loop's own `Session`, driven a stretch at a time.

    Everything the loop does per update is in the timed window: compiled stretches
    of quiet updates, the reported and summarized updates run alone, summaries
    written through its `Reporter`, progress lines, the stop flag read every
    `STOP_CHECK_EVERY` updates. Only the input differs when `source` is pre-fetched:
    the same batches as the other pipelines, as a `tf.data` stream.
    """

    name = "opt_train"

    def __init__(self, config, source):
        from opt_train.distributed import get_backend
        from opt_train.training.builder import build_run
        from opt_train.training.loop import Session

        config = dataclasses.replace(config, max_steps=_UNBOUNDED_STEPS)
        run = build_run(config, get_backend())
        run.data = run.data._replace(train=source.as_dataset())
        self.session = Session(run, stream=io.StringIO())
        self.session.start(resume=False)
        self.samples_per_update = config.batch_size_per_gpu * config.iter_size
        # Every compiled variant (stretch, reported step, summary step) is traced before any timing.
        self._updates(max(filter(None, (config.print_loss_steps, config.save_summaries_steps, 1))))

    def _updates(self, count):
        self.session.loop(until=self.session.step + count)

    def measure(self, warmup, steps):
        return _timed(self._updates, warmup, steps)

    def close(self):
        self.session.close()


def _optimizer(config):
    from opt_train.optimizers import registry

    return registry.get(config.optimizer, **dict(config.optimizer_params))


def _model_and_task(config):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    run = build_run(config, get_backend(), with_train_op=False)
    return run.model, run.data.task


class TapeLoopPipeline:
    """(b) The minimal hand-written loop: one `tf.function` with `GradientTape` and `optimizer.apply`."""

    name = "tape_loop"

    def __init__(self, config, source, jit_compile=False):
        self.model, task = _model_and_task(config)
        self.optimizer = _optimizer(config)
        self.batches = source.iterator()
        self.samples_per_update = config.batch_size_per_gpu
        model, optimizer = self.model, self.optimizer

        def train_step(features, labels):
            with tf.GradientTape() as tape:
                loss = task.loss(labels, model(features, training=True))
                if model.losses:
                    loss += tf.add_n(model.losses)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        self.step = tf.function(train_step, jit_compile=jit_compile)

    def _updates(self, count):
        loss = None
        for _ in range(count):
            loss = self.step(*next(self.batches))
        if loss is not None:
            float(loss)

    def measure(self, warmup, steps):
        return _timed(self._updates, warmup, steps)

    def close(self):
        pass


class _StepClock(keras.callbacks.Callback):
    """Records when the warm-up batches end and when the last batch ends, inside one `fit` call."""

    def __init__(self, warmup):
        super().__init__()
        self.warmup = warmup
        self.start = None
        self.end = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if batch == self.warmup - 1:
            self.start = now
        self.end = now


class KerasFitPipeline:
    """(c) `model.compile(optimizer, loss=task.loss)` and `fit(steps_per_epoch=N)` on the same batches.

    Timed from the end of the warm-up batches to the end of the last batch of one
    `fit` call, so fit's per-call set-up is not counted against it.
    """

    name = "keras_fit"

    def __init__(self, config, source, jit_compile=False):
        self.model, task = _model_and_task(config)
        self.model.compile(optimizer=_optimizer(config), loss=task.loss, jit_compile=jit_compile)
        self.dataset = source.as_dataset()
        self.samples_per_update = config.batch_size_per_gpu

    def measure(self, warmup, steps):
        warmup = max(1, warmup)
        clock = _StepClock(warmup)
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[clock],
                       shuffle=False)
        return clock.end - clock.start

    def close(self):
        pass
