"""The training loop: runs updates, evaluates, checkpoints, reports, and stops visibly."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import time

import numpy as np

from opt_train.atomic import read_json
from opt_train.training.cadence import StopCadence
from opt_train.training.errors import Interrupted, Pruned, TrainingFailed
from opt_train.training.interrupt import StopRequests
from opt_train.training.pruning import trial_link

# Stats that are bookkeeping, not figures worth a TensorBoard curve.
_FLAGS = ("update", "applied")


def train(config, *, resume=True, benchmark=False, backend=None, resume_changed=False, evaluate=True):
    """Trains the run `config` describes; returns the final metrics it writes to logdir.

    `resume`: continue the run in logdir when the config describes the same run
    (`resume_changed`: even if run-defining keys changed); False starts afresh, in a
    fresh folder beside logdir when logdir holds a run (see `training.logdir`).
    `evaluate=False` (`--mode train`) runs no evaluation, in the run or at its end.
    """
    from opt_train.training.builder import backend_for, build_run, graph_refusals
    from opt_train.training.logdir import LogdirLock, check_launch, prepare

    warning = check_launch(config)
    if benchmark:
        # As OpenSeq2Seq's --benchmark: time training alone, from a fresh start, with no
        # checkpoints, evaluations or summaries inside the timed updates.
        config = dataclasses.replace(
            config, save_checkpoint_steps=None, eval_steps=None, save_summaries_steps=None
        )
        resume = False
    backend = backend or backend_for(config)
    if backend.num_workers > 1:
        from opt_train.distributed.launcher import NOUNS
        from opt_train.training.progress import worker_line

        # Every worker's own log (a pod's) starts by saying which worker it is.
        noun = NOUNS.get(config.distributed, "worker")
        print(worker_line(noun, backend, config.batch_size_per_gpu, config.iter_size), flush=True)
    config, resume, notes = prepare(config, backend, resume=resume, resume_changed=resume_changed)
    with LogdirLock(config.logdir, config) if backend.is_chief else contextlib.nullcontext():
        run = build_run(config, backend)
        with StopRequests() as stop_requests:
            session = Session(run, benchmark=benchmark, stop_requests=stop_requests)
            if not evaluate:
                session.evaluator = None
            for note in [warning, *backend.notes, *notes, *run.notes]:
                if note:
                    session.progress.message(note)
            try:
                with graph_refusals(config):  # the user's model or loss, traced at the first step
                    session.start(resume)
                    try:
                        session.loop()
                    finally:
                        session.end_input()
                    return session.finish()
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    raise TrainingFailed(f"disk full writing in {config.logdir}: {error}") from None
                raise
            except Exception as error:
                # Under Horovod: a collective failed because another rank died or hung.
                lost = backend.lost_peer(error)
                if lost:
                    raise TrainingFailed(lost) from None
                raise
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
        from opt_train.training.interval import ReportInterval
        from opt_train.training.progress import Progress
        from opt_train.training.reporting import Reporter
        from opt_train.training.warm_start import PATHS_ITEM, path_table

        import tensorflow as tf

        self.run = run
        self.config = config = run.config
        self.chief = run.backend.is_chief
        self.iterator = None
        self.interval = ReportInterval(tf)
        items = {
            "model": run.model,
            # A Keras 3 model does not track its layers' seed generators (dropout's RNG
            # state); listing every variable makes a resumed run draw the same masks.
            "model_variables": list(run.model.variables),
            # Their Keras paths, so another run's `init_from` knows each by name (training/warm_start.py).
            PATHS_ITEM: path_table(run.model),
            **run.train_op.checkpoint_items(),
            "report_interval": self.interval.variable,
        }
        from opt_train.training.controls import Controls

        # After each evaluation: lr_control, early_stopping, restore_best_checkpoint (training/controls.py).
        self.controls = Controls(run)
        items.update(self.controls.checkpoint_items())
        self.checkpoints = Checkpoints(
            config.logdir,
            items,
            step=run.train_op.global_step,
            max_to_keep=config.num_checkpoints,
            writer=self.chief,
            # MultiWorkerMirroredStrategy: every worker takes part in a save, the chief's is kept.
            collective=run.backend.collective_saves,
            together=run.backend.saves_together,
            # Checkpoints saved before the data position was one restore with the old counting's.
            optional={"micro_batches": run.train_op.fill_data_position, PATHS_ITEM: lambda: None},
            refused_hint="Use --no-resume to start afresh in a new folder",
        )
        self.controls.attach(self.checkpoints.checkpoint, self.chief)
        self.progress = Progress(run.max_steps, enabled=self.chief, stream=stream)
        from opt_train.tracking import start_tracker

        self.tracker = start_tracker(config, self.progress.message, enabled=self.chief and not benchmark)
        self.reporter = Reporter(config.logdir, enabled=self.chief, tracker=self.tracker)
        from opt_train.training.profiling import Profiler

        self.profiler = Profiler(config, self.progress.message, enabled=self.chief and not benchmark)
        # A source without an eval split (TFRecord without eval_files) is not evaluated.
        evaluates = self.chief and run.data.eval is not None
        self.evaluator = Evaluator(run.model, run.data, config.jit_compile,
                                   optimizer=run.train_op.optimizer, backend=run.backend) if evaluates else None
        self.benchmark = _Benchmark(run) if benchmark else None
        self.stop_requests = stop_requests
        self.cadence = StopCadence(every_update=config.on_nonfinite == "stop", agree=self._least_across_workers)
        # Set when a sweep with a pruner runs this trial (opt_train/training/pruning.py, opt_train/trial.py).
        self.trial_link = trial_link()
        self.step = 0
        self.eval_results = {}
        self.last_figures = {}

    # -- phases ------------------------------------------------------------
    def start(self, resume):
        config = self.config
        restored = self.checkpoints.restore() if resume else None
        for note in self.checkpoints.notes:
            self.progress.message(note)
        if not restored and config.load_model:
            from opt_train.training.compat import warm_start_run

            warm_start_run(config, self.run, self.progress.message)
        if not restored and config.init_from:  # a resumed run has its own weights: never again
            from opt_train.training import warm_start

            warm_start.warm_start_run(config, self.run, self.progress.message)
        # Every rank starts from rank 0's weights and optimizer state, fresh or resumed.
        self.run.backend.broadcast_variables(
            list(self.run.model.variables) + list(self.run.train_op.state_variables())
        )
        self.step = int(self.run.train_op.global_step.numpy())
        self.interval.restored(self.run.train_op.data_position)
        if self.chief:
            # Only now that the checkpoint restored whole: config.yaml says what trained the logdir.
            os.makedirs(config.logdir, exist_ok=True)
            config.dump(os.path.join(config.logdir, "config.yaml"))
            from opt_train.data import card  # label vocabulary and input statistics (data.json)

            card.write(config.logdir, self.run.data.task)
            for line in card.describe(self.run.data.task):
                self.progress.message(line)
            if not self.benchmark:
                from opt_train.board import write_run_hparams

                write_run_hparams(config)  # HParams tab: every run, not only a sweep's trials
            if resume:
                # A killed run's records after the restored step are done again: drop them.
                for note in self.reporter.resume(self.step):
                    self.progress.message(f"note: {note}")
        if self.controls.stopped():
            self.run.max_steps = self.step  # early stopping ended this run before
        # The train stream is a pure function of (seed, position) on every rank, so
        # skipping the batches already consumed (skipped updates' too) resumes it exactly,
        # for any number of ranks, without checkpointing an iterator per rank.
        # A streamed source (TFRecord) starts at the epoch the position falls in instead
        # of reading every batch before it.
        self.iterator = iter(self.run.backend.distribute(
            self.run.data.train_from(self.interval.position), self.config.batch_size_per_gpu
        ))
        if restored:
            self.progress.message(f"resumed from {restored} at step {self.step}")
        self.progress.message(
            f"training {config.named('model')} on {config.named('data')} with {config.optimizer}: "
            f"{self.run.max_steps} updates, global batch {self.run.global_batch}"
        )
        if config.deterministic:
            self.progress.message(f"deterministic: op determinism on, random_seed {config.random_seed}")
        if self.step >= self.run.max_steps:
            self.progress.message(f"nothing to train: step {self.step} has reached max_steps")

    def end_input(self):
        """Drops the training iterator right after its last batch, while deleting it is instant.

        tf.data's autotuning thread sleeps longer and longer (up to a minute) while its
        iterator idles, and deleting the iterator waits that sleep out with the interpreter
        held (TF 2.21: an iterator idle for 15 s took 37 s to delete). Dropped after the
        final evaluation and export, or whenever a caller of `train()` lets go of it, it
        could stop the whole process for a minute; dropped here it takes milliseconds.
        """
        self.iterator = None

    def loop(self, until=None):
        """Runs updates up to step `until` (default and at most `max_steps`); may be called again."""
        config = self.config
        train_op = self.run.train_op
        end = self.run.max_steps if until is None else min(until, self.run.max_steps)
        self.interval.open()
        self.profiler.at(self.step)
        while self.step < end:
            # Updates up to the next step where something happens run in one compiled
            # call; that step itself runs alone when it needs statistics or summaries.
            target = self._next_event_step(end)
            summarize, reporting = self._wants_summaries(target), self._reports(target)
            # A profiled update runs as one update call: a trace holding `run`'s while loop is divided
            # at the loop's iterations rather than at the step markers (the Overview page found no step).
            alone = summarize or reporting or self.profiler.alone(target)
            quiet = target - self.step - (1 if alone else 0)
            result = None
            with self.profiler.marker(target):  # inside a profiled range, target is the next step
                if quiet:
                    self._count_losses(train_op.run(self.iterator, quiet))
                if alone and int(train_op.global_step.numpy()) == target - 1:
                    result = train_op.update(self.iterator, summarize=summarize, statistics=reporting)
                    self._count_losses(result["loss"])
            # Skipped updates may not count: the step is what the train op says it is.
            self.step = int(train_op.global_step.numpy())
            self.profiler.at(self.step)
            if self.step < target:
                # Short of the target only when a stop policy fired, in the update that
                # would have been the next step (a skipped update moves no step).
                self._stop_if_asked(at=self.step + 1)
                continue
            checks = self.step % self.cadence.every == 0 or self.step == self.run.max_steps
            if checks:
                self._stop_if_policy()
            if summarize:
                # On a reported step `loss` is the interval's mean, written by _report: one point per step.
                drop = ("loss",) if reporting else ()
                self.reporter.summaries(self.step, {k: v for k, v in _without_flags(result).items() if k not in drop})
            if reporting:
                self._report(result)
            paused = time.perf_counter()
            if config.eval_steps and self.step % config.eval_steps == 0:
                self._evaluate()
                self._stop_if_pruned()
                if self.controls.after_evaluation(self.eval_results, self.step,
                                                  self.run.train_op.optimizer.iterations, self.progress.message):
                    self.run.max_steps = end = self.step  # early stopping ends the run here
            if config.save_checkpoint_steps and self.step % config.save_checkpoint_steps == 0:
                self._save()
            # samples/s measures training: evaluation and saving time is left out.
            paused = time.perf_counter() - paused
            self.interval.paused(paused)
            self.cadence.paused(paused)
            if self.benchmark:
                # After the step's host work, so the warm-up's first report is not timed.
                self.benchmark.tick(self.step, self.interval.position)
            if checks:
                # A signal stops the run only after this step's report, evaluation and
                # checkpoint: a resumed run starts after them, so none is lost or merged
                # into the next interval.
                self._stop_if_signalled()
                self.cadence.looked(self.step)

    def _least_across_workers(self, every):
        """The least of every worker's proposed stop-check interval (they must look at the same steps)."""
        if self.run.backend.num_workers > 1:
            return self.run.backend.allreduce_scalar(every, op="min")
        return every

    def _save(self):
        """A checkpoint at this step, carrying the report interval's loss so far (all ranks call it)."""
        self.interval.carry(self._mean_across_ranks)
        self.checkpoints.save(self.step)

    def _mean_across_ranks(self, value):
        if self.run.backend.size > 1:
            return self.run.backend.allreduce_scalar(value, op="mean")
        return value

    def _count_losses(self, mean_loss):
        """Adds the mean loss of the micro-batches run since the last count to the interval."""
        self.interval.count(mean_loss, self.run.train_op.data_position)

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
            self.cadence.every, config.print_loss_steps, config.save_summaries_steps,
            config.eval_steps, config.save_checkpoint_steps,
        ]
        candidates = [end, *self.profiler.boundaries(self.step)]
        candidates += [(self.step // every + 1) * every for every in intervals if every]
        if self.benchmark and self.step < self.benchmark.warmup:
            candidates.append(self.benchmark.warmup)  # timing starts exactly there
        return min(candidates)

    def finish(self):
        config = self.config
        trained = "loss" in self.last_figures  # the last update is always reported
        if trained and not self.benchmark:
            self._save()  # once: not again when the last update's checkpoint is already written
        # Two all-reduces: taken once, printed from the same numbers.
        benchmark_figures = self.benchmark.figures() if self.benchmark else {}
        # The run's last collective is behind it: the other ranks may end while the chief
        # evaluates and exports alone.
        self.run.backend.leave()
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
            train_figures = self._earlier_train_figures()
        final = {
            "global_step": self.step,
            **train_figures,
            **{f"eval/{k}": v for k, v in self.eval_results.items()},
        }
        if self.benchmark:
            final.update(benchmark_figures)
            self.progress.message(self.benchmark.summary(benchmark_figures))
        if self.chief and config.export and not self.benchmark:
            from opt_train.training.export import export_at_end

            export_at_end(self.run, self.progress.message)
        if self.chief:
            from opt_train.training.reporting import write_final_metrics

            write_final_metrics(os.path.join(config.logdir, "final_metrics.json"), final)
            self.tracker.finish(final)
            shown = ", ".join(f"{k} {v:.4g}" for k, v in self.eval_results.items())
            evaluated = f"eval {shown}; " if shown else ""  # --mode train evaluates nothing
            self.progress.message(f"done: step {self.step}; {evaluated}logdir {config.logdir}")
        else:
            self.progress.message(f"done: step {self.step} ({self._worker_name()}); {self._noun()} 0 reports the "
                                  f"figures in logdir {config.logdir}", every_worker=True)
        return final

    def _noun(self):
        """What this backend calls a worker (`worker`, `rank`)."""
        from opt_train.distributed.launcher import NOUNS

        return NOUNS.get(self.config.distributed, "worker")

    def _worker_name(self):
        return f"{self._noun()} {self.run.backend.worker_index} of {self.run.backend.num_workers}"

    def _earlier_train_figures(self):
        """What the run that trained to this step reported: final_metrics.json, else its metrics.jsonl.

        A figure known nowhere is left out, never written as NaN.
        """
        earlier = read_json(os.path.join(self.config.logdir, "final_metrics.json")) or {}
        record = self.reporter.last_record("loss", self.step) if self.chief else None
        figures = {}
        for key, record_key in (("train/loss", "loss"), ("skipped_steps", "skipped_steps")):
            if key in earlier and earlier[key] not in ("nan", None):
                figures[key] = earlier[key]
            elif record and record_key in record:
                figures[key] = record[record_key]
        return figures

    def close(self):
        self.end_input()  # a session driven in pieces (`loop(until=...)`) may not have
        self.profiler.close()
        self.tracker.close()
        self.progress.close()
        self.reporter.close()

    # -- pieces ------------------------------------------------------------
    def _stop_if_asked(self, at=None):
        """Raises when a stop policy fired (`at`: the step to name) or a signal came."""
        self._stop_if_policy(at)
        self._stop_if_signalled()

    def _stop_if_policy(self, at=None):
        """Raises when a stop policy fired (`at`: the step to name)."""
        reason = self.run.train_op.stop_reason
        if reason:
            at = self.step if at is None else at
            if self.chief:
                self.reporter.record({"step": at, "stopped": reason})
            raise TrainingFailed(f"stopped at step {at}: {reason}")

    def _stop_if_signalled(self):
        """Raises Interrupted (after saving) when any rank received SIGINT/SIGTERM."""
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
            self._save()
            saved = "checkpoint saved; run the same command to resume"
        # No rank exits (and has the launcher stop the others) before rank 0 has saved.
        self.run.backend.leave()
        if self.chief:
            self.reporter.record({"step": self.step, "interrupted": name})
        who = "" if self.chief else f"{self._worker_name()}: "
        raise Interrupted(f"{who}interrupted by {name} at step {self.step}: {saved}", signal_number)

    def _stop_if_pruned(self):
        """Asks the sweep's pruner after an evaluation; a pruned trial saves a checkpoint here and stops."""
        if self.trial_link is None or self.step >= self.run.max_steps:
            return
        figures = {f"eval/{k}": v for k, v in self.eval_results.items()}
        figures["train/loss"] = self.last_figures.get("loss")
        pruned = int(self.chief and self.trial_link.should_stop(self.step, figures))
        if self.run.backend.size > 1:
            pruned = self.run.backend.allreduce_scalar(pruned, op="max")  # only rank 0 evaluates
        if not pruned:
            return
        self._save()
        self.run.backend.leave()
        if self.chief:
            self.reporter.record({"step": self.step, "pruned": self.trial_link.metric})
        raise Pruned(f"pruned at step {self.step}: {self.trial_link.metric} is behind the other trials")

    def _report(self, result):
        figures = _scalars(result)
        loss, micro_batches, elapsed = self.interval.close(
            self.step % self.config.print_loss_steps == 0, self._mean_across_ranks
        )
        figures["loss"] = loss
        # Samples read, skipped updates' included: what the hardware processed.
        samples = micro_batches * self.config.batch_size_per_gpu * self.run.backend.size
        figures["samples_per_sec"] = samples / max(elapsed, 1e-9)
        self.last_figures = figures
        self.progress.update(self.step, figures)
        self.reporter.record({"step": self.step, **figures})
        self.reporter.summaries(self.step, {"loss": figures["loss"], "samples_per_sec": figures["samples_per_sec"]})
        self.interval.restart()

    def _evaluate(self):
        from opt_train.training.evaluation import weights_note

        if self.evaluator is None:
            return
        self.eval_results = self.evaluator()
        self.reporter.eval_summaries(self.step, self.eval_results)
        self.reporter.record({"step": self.step, **{f"eval/{k}": v for k, v in self.eval_results.items()}})
        shown = ", ".join(f"{k} {v:.4g}" for k, v in self.eval_results.items())
        self.progress.message(f"eval at step {self.step}{weights_note(self.evaluator.uses_ema)}: {shown}")


def _without_flags(result):
    return {name: value for name, value in result.items() if name not in _FLAGS}


def _scalars(result):
    """The pipeline's one-element stats as Python floats (per-variable tensors left out)."""
    figures = {}
    for name, value in _without_flags(result).items():
        value = np.asarray(value)
        if value.size == 1:
            # .item(): a one-element variable (a 1-unit layer's bias) is shape (1,), not a scalar.
            figures[name] = float(value.item())
    return figures


class _Benchmark:
    """OpenSeq2Seq's --benchmark: time per update after the warm-up updates, summed over ranks."""

    def __init__(self, run):
        self.run = run
        # OpenSeq2Seq's bench_start when the config gives it.
        bench_start = getattr(run.config, "bench_start", None)
        self.warmup = bench_start if bench_start is not None else min(10, max(1, run.max_steps // 5))
        self.start_time = None
        self.start_step = None
        self.start_position = None
        self.end_time = None
        self.end_step = None
        self.end_position = None

    def tick(self, step, position):
        """At an update boundary: `step` counted updates, `position` micro-batches consumed."""
        if self.start_time is None and step >= self.warmup:
            self.start_time, self.start_step, self.start_position = time.perf_counter(), step, position
        elif self.start_time is not None:
            self.end_time, self.end_step, self.end_position = time.perf_counter(), step, position

    def figures(self):
        if self.end_step is None:
            return {}
        updates = self.end_step - self.start_step
        elapsed = self.end_time - self.start_time
        # Samples read in the timed stretch (skipped updates' included), this process's replicas.
        samples = ((self.end_position - self.start_position) * self.run.config.batch_size_per_gpu
                   * self.run.backend.replicas_per_worker)
        return {
            "benchmark/time_per_step": elapsed / updates,
            "benchmark/samples_per_sec": self.run.backend.allreduce_scalar(samples / elapsed, op="sum"),
            "benchmark/updates_timed": updates,
            # Samples the timed updates took, all ranks together: what samples_per_sec divides.
            "benchmark/samples_timed": self.run.backend.allreduce_scalar(samples, op="sum"),
        }

    def summary(self, figures):
        """The benchmark's line from `figures()`."""
        if not figures:
            return "benchmark: too few updates to time after warm-up"
        return (
            f"benchmark: {figures['benchmark/time_per_step'] * 1000:.2f} ms/step, "
            f"{figures['benchmark/samples_per_sec']:.0f} samples/s over "
            f"{figures['benchmark/updates_timed']} updates (after {self.warmup} warm-up updates)"
        )
