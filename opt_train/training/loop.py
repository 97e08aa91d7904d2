"""The training loop: runs updates, evaluates, checkpoints, reports, and stops visibly."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import time

from opt_train.distributed.names import worker_noun
from opt_train.training.cadence import StopCadence
from opt_train.training.errors import TrainingFailed
from opt_train.training.interrupt import StopRequests
from opt_train.training.stops import DIVERGED, EARLY, POLICY, PRUNED, SIGNALLED, Stops


def train(config, *, resume=True, benchmark=False, backend=None, resume_changed=False, evaluate=True):
    """Trains the run `config` describes; returns the final metrics it writes to logdir.

    `resume`: continue the run in logdir when the config describes the same run
    (`resume_changed`: even if run-defining keys changed); False starts afresh, in a
    fresh folder beside logdir when logdir holds a run (see `training.logdir`).
    `evaluate=False` (`--mode train`) runs no evaluation, in the run or at its end.
    """
    from opt_train.training.builder import backend_for, build_run, dtype_policy_kept, graph_refusals
    from opt_train.training.launch import check_launch
    from opt_train.training.logdir import LogdirLock, prepare

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
        from opt_train.training.progress import worker_line

        # Every worker's own log (a pod's) starts by saying which worker it is.
        print(worker_line(worker_noun(config.distributed), backend, config.batch_size_per_gpu, config.iter_size), flush=True)
    config, resume, notes = prepare(config, backend, resume=resume, resume_changed=resume_changed)
    with LogdirLock(config.logdir, config) if backend.is_chief else contextlib.nullcontext(), dtype_policy_kept():
        run = build_run(config, backend)
        with StopRequests() as stop_requests:
            session = Session(run, benchmark=benchmark, stop_requests=stop_requests)
            if not evaluate:
                session.evaluator = None
            for note in [warning, *backend.notes, *notes, *run.notes]:
                if note:
                    session.outputs.message(note)
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
    """One run's mutable state (iterator, step counter) and the phases that drive it.

    `train()` calls `start`, `loop`, `finish`, `close`. The benchmark harness drives
    the same object in pieces (`loop(until=...)`), so what it times is this loop. What the
    run shows and writes is its `outputs` (training/outputs.py); why it ends early, its
    `stops` (training/stops.py).
    """

    def __init__(self, run, benchmark=False, stream=None, stop_requests=None):
        from opt_train.training.benchmark import Benchmark
        from opt_train.training.checkpoints import Checkpoints
        from opt_train.training.evaluation import Evaluator
        from opt_train.training.interval import ReportInterval
        from opt_train.training.outputs import Outputs
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
        self.outputs = Outputs(run, benchmark=benchmark, stream=stream)
        from opt_train.training.profiling import Profiler

        self.profiler = Profiler(config, self.outputs.message, enabled=self.chief and not benchmark)
        # A source without an eval split (TFRecord without eval_files) is not evaluated.
        evaluates = self.chief and run.data.eval is not None
        self.evaluator = Evaluator(run.model, run.data, config.jit_compile,
                                   optimizer=run.train_op.optimizer, backend=run.backend) if evaluates else None
        self.benchmark = Benchmark(run) if benchmark else None
        self.stops = Stops(run, self.controls, self.outputs, self._save, stop_requests, benchmark=benchmark)
        self.cadence = StopCadence(every_update=config.on_nonfinite == "stop", agree=self._least_across_workers)
        self.step = 0

    # -- phases ------------------------------------------------------------
    def start(self, resume):
        config = self.config
        say = self.outputs.message
        restored = self.checkpoints.restore() if resume else None
        for note in self.checkpoints.notes:
            say(note)
        if not restored and config.load_model:
            from opt_train.training.compat import warm_start_run

            warm_start_run(config, self.run, say)
        if not restored and config.init_from:  # a resumed run has its own weights: never again
            from opt_train.training import warm_start

            warm_start.warm_start_run(config, self.run, say)
        # Every rank starts from rank 0's weights and optimizer state, fresh or resumed.
        self.run.backend.broadcast_variables(
            list(self.run.model.variables) + list(self.run.train_op.state_variables())
        )
        loaded = restored or (config.init_from and "init_from") or (config.load_model and "load_model")
        if loaded:  # a fresh initialization is finite; what was read may not be (a checkpoint of a run that diverged)
            self.stops.refuse_nonfinite_start(loaded)
        self.step = int(self.run.train_op.global_step.numpy())
        self.interval.restored(self.run.train_op.data_position)
        self.outputs.started(self.step, resume, benchmark=bool(self.benchmark))
        self.stops.check(self.step, (EARLY,))  # early stopping ended this run before
        # The train stream is a pure function of (seed, position) on every rank, so
        # skipping the batches already consumed (skipped updates' too) resumes it exactly,
        # for any number of ranks, without checkpointing an iterator per rank.
        # A streamed source (TFRecord) starts at the epoch the position falls in instead
        # of reading every batch before it.
        self.iterator = iter(self.run.backend.distribute(
            self.run.data.train_from(self.interval.position), self.config.batch_size_per_gpu
        ))
        if restored:
            say(f"resumed from {restored} at step {self.step}")
        say(
            f"training {config.named('model')} on {config.named('data')} with {config.optimizer}: "
            f"{self.run.max_steps} updates, global batch {self.run.global_batch}"
        )
        if config.deterministic:
            say(f"deterministic: op determinism on, random_seed {config.random_seed}")
        if self.step >= self.run.max_steps:
            say(f"nothing to train: step {self.step} has reached max_steps")

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
                    train_op.run(self.iterator, quiet)
                    self._count_losses()
                if alone and int(train_op.global_step.numpy()) == target - 1:
                    result = train_op.update(self.iterator, summarize=summarize, statistics=reporting)
                    self._count_losses()
            # Skipped updates may not count: the step is what the train op says it is.
            self.step = int(train_op.global_step.numpy())
            self.profiler.at(self.step)
            if self.step < target:
                # Short of the target only when a stop policy fired, in the update that
                # would have been the next step (a skipped update moves no step).
                self.stops.check(self.step, (POLICY, SIGNALLED), at=self.step + 1)
                continue
            checks = self.step % self.cadence.every == 0 or self.step == self.run.max_steps
            # Nothing is reported, evaluated or saved from weights that are not finite.
            self.stops.check(self.step, (POLICY, DIVERGED) if checks else (DIVERGED,))
            if summarize:
                self.outputs.summaries(self.step, result, reported=reporting)
            if reporting:
                self._report(result)
            paused = time.perf_counter()
            if config.eval_steps and self.step % config.eval_steps == 0:
                self._evaluate()
                self.stops.check(self.step, (PRUNED,))
                self.controls.after_evaluation(self.outputs.eval_results, self.step,
                                               train_op.optimizer.iterations, self.outputs.message)
                if self.stops.check(self.step, (EARLY,)):
                    end = self.step  # early stopping ends the run here
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
                self.stops.check(self.step, (SIGNALLED,))
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

    def _count_losses(self):
        """Adds the losses of the micro-batches the train op's last call ran to the interval."""
        self.interval.count(self.run.train_op.last_loss_sum, self.run.train_op.data_position)

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

    def _report(self, result):
        loss, micro_batches, elapsed = self.interval.close(
            self.step % self.config.print_loss_steps == 0, self._mean_across_ranks
        )
        self.outputs.report(self.step, result, loss, micro_batches, elapsed)
        self.interval.restart()

    def _evaluate(self):
        if self.evaluator is not None:
            self.outputs.evaluated(self.step, self.evaluator(), self.evaluator.uses_ema)

    def finish(self):
        config = self.config
        trained = "loss" in self.outputs.last_figures  # the last update is always reported
        if trained and not self.benchmark:
            self._save()  # once: not again when the last update's checkpoint is already written
        # Two all-reduces: taken once, printed from the same numbers.
        benchmark_figures = self.benchmark.figures() if self.benchmark else {}
        # The run's last collective is behind it: the other ranks may end while the chief
        # evaluates and exports alone.
        self.run.backend.leave()
        if not config.eval_steps or self.step % config.eval_steps or not self.outputs.eval_results:
            self._evaluate()
        final = self.outputs.final_figures(self.step)
        if self.benchmark:
            final.update(benchmark_figures)
            self.outputs.message(self.benchmark.summary(benchmark_figures))
        if self.chief and config.export and not self.benchmark:
            from opt_train.training.export import export_at_end

            export_at_end(self.run, self.outputs.message)
        self.outputs.done(self.step, final)
        return final

    def close(self):
        self.end_input()  # a session driven in pieces (`loop(until=...)`) may not have
        self.profiler.close()
        self.outputs.close()
