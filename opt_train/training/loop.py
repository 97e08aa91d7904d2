"""The training loop: runs updates, evaluates, checkpoints, reports, and stops visibly."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import numpy as np

from opt_train.atomic import read_json
from opt_train.training.errors import Interrupted, TrainingFailed
from opt_train.training.interrupt import StopRequests

# How often (in updates) the loop reads the pipeline's stop flag. Reading it is a
# host sync; a skipped update changes no weight, so looking every few is enough.
STOP_CHECK_EVERY = 10
# Stats that are bookkeeping, not figures worth a TensorBoard curve.
_FLAGS = ("update", "applied")


def train(config, *, resume=True, benchmark=False, backend=None):
    """Trains the run `config` describes; returns the final metrics it writes to logdir."""
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    if benchmark:
        # As OpenSeq2Seq's --benchmark: time training alone, from a fresh start, with no
        # checkpoints, evaluations or summaries inside the timed updates.
        config = dataclasses.replace(
            config, save_checkpoint_steps=None, eval_steps=None, save_summaries_steps=None
        )
        resume = False
    backend = backend or get_backend(config.use_horovod)
    run = build_run(config, backend)
    with StopRequests() as stop_requests:
        session = Session(run, benchmark=benchmark, stop_requests=stop_requests)
        try:
            session.start(resume)
            session.loop()
            return session.finish()
        finally:
            session.close()


class Session:
    """One run's mutable state (iterator, step counter, outputs) and the phases that drive it.

    `train()` calls `start`, `loop`, `finish`, `close`. The benchmark harness drives
    the same object in pieces (`loop(until=...)`), so what it times is this loop.
    """

    def __init__(self, run, benchmark=False, stream=None, stop_requests=None):
        from opt_train.training.checkpoints import Checkpoints
        from opt_train.training.evaluation import Evaluator
        from opt_train.training.progress import Progress
        from opt_train.training.reporting import Reporter

        self.run = run
        self.config = config = run.config
        self.chief = run.backend.is_chief
        self.iterator = None
        items = {
            "model": run.model,
            # A Keras 3 model does not track its layers' seed generators (dropout's RNG
            # state); listing every variable makes a resumed run draw the same masks.
            "model_variables": list(run.model.variables),
            **run.train_op.checkpoint_items(),
        }
        self.checkpoints = Checkpoints(
            config.logdir,
            items,
            step=run.train_op.global_step,
            max_to_keep=config.num_checkpoints,
            writer=self.chief,
        )
        self.reporter = Reporter(config.logdir, enabled=self.chief)
        self.progress = Progress(run.max_steps, enabled=self.chief, stream=stream)
        # A source without an eval split (TFRecord without eval_files) is not evaluated.
        evaluates = self.chief and run.data.eval is not None
        self.evaluator = Evaluator(run.model, run.data, config.jit_compile) if evaluates else None
        self.benchmark = _Benchmark(run) if benchmark else None
        self.stop_requests = stop_requests
        self.step = 0
        self.eval_results = {}
        self.last_figures = {}
        # The print_loss_steps interval so far: (mean loss, micro-batches) pairs, its start.
        self._interval_losses = []
        self._interval_start = None
        self._interval_first = 0

    # -- phases ------------------------------------------------------------
    def start(self, resume):
        config = self.config
        if self.chief:
            os.makedirs(config.logdir, exist_ok=True)
            config.dump(os.path.join(config.logdir, "config.yaml"))
        restored = self.checkpoints.restore() if resume else None
        # Every rank starts from rank 0's weights and optimizer state, fresh or resumed.
        self.run.backend.broadcast_variables(
            list(self.run.model.variables) + list(self.run.train_op.state_variables())
        )
        self.step = int(self.run.train_op.global_step.numpy())
        # The train stream is a pure function of (seed, position) on every rank, so
        # skipping the batches already consumed resumes it exactly, for any number of
        # ranks, without checkpointing an iterator per rank.
        # A streamed source (TFRecord) starts at the epoch the position falls in instead
        # of reading every batch before it.
        self.iterator = iter(self.run.data.train_from(self.step * config.iter_size))
        if restored:
            self.progress.message(f"resumed from {restored} at step {self.step}")
        self.progress.message(
            f"training {config.model} on {config.data} with {config.optimizer}: "
            f"{self.run.max_steps} updates, global batch {self.run.global_batch}"
        )
        if self.step >= self.run.max_steps:
            self.progress.message(f"nothing to train: step {self.step} has reached max_steps")

    def loop(self, until=None):
        """Runs updates up to step `until` (default and at most `max_steps`); may be called again."""
        config = self.config
        end = self.run.max_steps if until is None else min(until, self.run.max_steps)
        if self._interval_start is None:
            self._interval_start, self._interval_first = time.perf_counter(), self.step
        while self.step < end:
            # Updates up to the next step where something happens run in one compiled
            # call; that step itself runs alone when it needs statistics or summaries.
            target = self._next_event_step(end)
            summarize, reporting = self._wants_summaries(target), self._reports(target)
            alone = summarize or reporting
            quiet = target - self.step - (1 if alone else 0)
            if quiet:
                micro_batches = quiet * config.iter_size
                self._interval_losses.append((self.run.train_op.run(self.iterator, micro_batches), micro_batches))
            result = self._update(summarize, reporting) if alone else None
            self.step = target
            if self.step % STOP_CHECK_EVERY == 0 or self.step == self.run.max_steps:
                self._stop_if_asked()
            if summarize:
                self.reporter.summaries(self.step, _without_flags(result))
            if reporting:
                self._report(result)
            paused = time.perf_counter()
            if config.eval_steps and self.step % config.eval_steps == 0:
                self._evaluate()
            if config.save_checkpoint_steps and self.step % config.save_checkpoint_steps == 0:
                self.checkpoints.save(self.step)
            # samples/s measures training: evaluation and saving time is left out.
            self._interval_start += time.perf_counter() - paused
            if self.benchmark:
                # After the step's host work, so the warm-up's first report is not timed.
                self.benchmark.tick(self.step)

    def _wants_summaries(self, step):
        every = self.config.save_summaries_steps
        return bool(every) and step % every == 0

    def _reports(self, step):
        if self.benchmark and step == self.benchmark.warmup:
            # The warm-up ends on a reported update, so the timed updates trace and compile nothing.
            return True
        return step % self.config.print_loss_steps == 0 or step == self.run.max_steps

    def _next_event_step(self, end):
        """The first step after this one at which the loop must look.

        That is a report, summaries, evaluation, a checkpoint, a stop check, the end
        of a benchmark's warm-up, or `end`.
        """
        config = self.config
        intervals = [
            STOP_CHECK_EVERY, config.print_loss_steps, config.save_summaries_steps,
            config.eval_steps, config.save_checkpoint_steps,
        ]
        candidates = [end]
        candidates += [(self.step // every + 1) * every for every in intervals if every]
        if self.benchmark and self.step < self.benchmark.warmup:
            candidates.append(self.benchmark.warmup)  # timing starts exactly there
        return min(candidates)

    def finish(self):
        config = self.config
        trained = "loss" in self.last_figures  # the last update is always reported
        if trained and not self.benchmark:
            self.checkpoints.save(self.step)
        if not config.eval_steps or self.step % config.eval_steps or not self.eval_results:
            self._evaluate()
        if trained:
            train_figures = {
                "train/loss": self.last_figures["loss"],
                "skipped_steps": self.last_figures.get("skipped_steps", 0),
            }
        else:
            # A run restarted after it ended trains nothing: its training figures stay those
            # of the run that trained, not a NaN loss over no updates.
            earlier = read_json(os.path.join(config.logdir, "final_metrics.json")) or {}
            train_figures = {key: earlier.get(key, float("nan")) for key in ("train/loss", "skipped_steps")}
        final = {
            "global_step": self.step,
            **train_figures,
            **{f"eval/{k}": v for k, v in self.eval_results.items()},
        }
        if self.benchmark:
            final.update(self.benchmark.figures())
            self.progress.message(self.benchmark.summary())
        if self.chief:
            from opt_train.training.reporting import write_final_metrics

            write_final_metrics(os.path.join(config.logdir, "final_metrics.json"), final)
            shown = ", ".join(f"{k} {v:.4g}" for k, v in self.eval_results.items())
            self.progress.message(f"done: step {self.step}; eval {shown}; logdir {config.logdir}")
        return final

    def close(self):
        self.progress.close()
        self.reporter.close()

    # -- pieces ------------------------------------------------------------
    def _update(self, summarize, reporting):
        """Runs the iter_size micro-batches of one update; returns the last result.

        Only the micro-batch that ends a reported update asks for the statistics.
        """
        iter_size = self.config.iter_size
        for index in range(iter_size):
            last = index == iter_size - 1
            result = self.run.train_op(
                next(self.iterator), summarize=summarize and last, statistics=reporting and last
            )
            self._interval_losses.append((result["loss"], 1))
        return result

    def _stop_if_asked(self):
        reason = self.run.train_op.stop_reason
        if reason:
            if self.chief:
                self.reporter.record({"step": self.step, "stopped": reason})
            raise TrainingFailed(f"stopped at step {self.step}: {reason}")
        signal_number = self._signal_received()
        if signal_number and self.step < self.run.max_steps:
            self._stop_for_signal(signal_number)

    def _signal_received(self):
        """The SIGINT/SIGTERM number received by any rank (0: none), the same on every rank."""
        number = self.stop_requests.signal_number if self.stop_requests else 0
        if self.run.backend.size > 1:
            # Ranks get the signal at different moments; stopping at different updates would
            # leave the others waiting in an all-reduce forever.
            number = self.run.backend.allreduce_scalar(number, op="max")
        return number

    def _stop_for_signal(self, signal_number):
        name = signal.Signals(signal_number).name
        if self.benchmark:
            saved = "no checkpoint (--benchmark)"
        else:
            self.checkpoints.save(self.step)
            saved = "checkpoint saved; run the same command to resume"
        # No rank exits (and has the launcher stop the others) before rank 0 has saved.
        self.run.backend.barrier()
        if self.chief:
            self.reporter.record({"step": self.step, "interrupted": name})
        raise Interrupted(f"interrupted by {name} at step {self.step}: {saved}", signal_number)

    def _report(self, result):
        losses, updates = self._interval_losses, self.step - self._interval_first
        elapsed = time.perf_counter() - self._interval_start
        figures = _scalars(result)
        # (mean loss, micro-batches) pairs: single micro-batches and compiled stretches.
        figures["loss"] = sum(float(loss) * count for loss, count in losses) / sum(c for _, c in losses)
        figures["samples_per_sec"] = updates * self.run.global_batch / max(elapsed, 1e-9)
        self.last_figures = figures
        self.progress.update(self.step, figures)
        self.reporter.record({"step": self.step, **figures})
        self.reporter.summaries(self.step, {"loss": figures["loss"], "samples_per_sec": figures["samples_per_sec"]})
        self._interval_losses, self._interval_start, self._interval_first = [], time.perf_counter(), self.step

    def _evaluate(self):
        if self.evaluator is None:
            return
        self.eval_results = self.evaluator()
        self.reporter.eval_summaries(self.step, self.eval_results)
        self.reporter.record({"step": self.step, **{f"eval/{k}": v for k, v in self.eval_results.items()}})
        shown = ", ".join(f"{k} {v:.4g}" for k, v in self.eval_results.items())
        self.progress.message(f"eval at step {self.step}: {shown}")


def _without_flags(result):
    return {name: value for name, value in result.items() if name not in _FLAGS}


def _scalars(result):
    """The pipeline's one-element stats as Python floats (per-variable tensors left out)."""
    figures = {}
    for name, value in _without_flags(result).items():
        value = np.asarray(value)
        if value.size == 1:
            figures[name] = float(value)
    return figures


class _Benchmark:
    """OpenSeq2Seq's --benchmark: time per update after the warm-up updates, summed over ranks."""

    def __init__(self, run):
        self.run = run
        self.warmup = min(10, max(1, run.max_steps // 5))
        self.start_time = None
        self.start_step = None
        self.end_time = None
        self.end_step = None

    def tick(self, step):
        if self.start_time is None and step >= self.warmup:
            self.start_time, self.start_step = time.perf_counter(), step
        elif self.start_time is not None:
            self.end_time, self.end_step = time.perf_counter(), step

    def figures(self):
        if self.end_step is None:
            return {}
        updates = self.end_step - self.start_step
        seconds = (self.end_time - self.start_time) / updates
        per_rank = self.run.config.batch_size_per_gpu * self.run.config.iter_size / seconds
        return {
            "benchmark/time_per_step": seconds,
            "benchmark/samples_per_sec": self.run.backend.allreduce_scalar(per_rank, op="sum"),
            "benchmark/updates_timed": updates,
        }

    def summary(self):
        figures = self.figures()
        if not figures:
            return "benchmark: too few updates to time after warm-up"
        return (
            f"benchmark: {figures['benchmark/time_per_step'] * 1000:.2f} ms/step, "
            f"{figures['benchmark/samples_per_sec']:.0f} samples/s over "
            f"{figures['benchmark/updates_timed']} updates (after {self.warmup} warm-up updates)"
        )
