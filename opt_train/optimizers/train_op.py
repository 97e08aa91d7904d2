"""`TrainOp`: runs whole updates of a built gradient pipeline, on one process's replicas, and holds the run's counters.

`optimize_loss` (opt_train/optimizers/pipeline.py) builds one. Its parts, one job each:
`UpdateStep` (update_step.py) is one micro-batch's update and what it asks the pipeline
for; `CompiledSteps` (compiled_steps.py) the compiled kinds of step; `StepFigures`
(step_figures.py) what a step reports. Counting:

- `global_step` counts the updates that count toward `max_steps`: applied ones only
  (`count_skipped_updates=False`, OpenSeq2Seq's counting), or applied and skipped ones
  (`True`); it never moves on a micro-batch that ends no update.
- the optimizer's `iterations`, which drives the learning-rate policy, counts
  *applied* updates only: a skipped step moves no weight, slot or lr position.
- `micro_batches` counts every micro-batch run, skipped updates included: the data
  position a resumed run starts its stream at.
- `last_loss_sum` is the float64 sum of the losses of the micro-batches the last `update`
  or `run` call ran. Float64 carries 29 bits more than float32, so float32 losses add up
  without rounding while the largest is under 2^29 / (their count) times the smallest: the
  sums of a run's calls are then the same however the calls split its steps, and a resumed
  run's report interval adds up to an uninterrupted run's (a float32 mean per call did
  not: each split rounded differently).
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.compiled_steps import CompiledSteps
from opt_train.optimizers.step_figures import StepFigures
from opt_train.optimizers.update_step import UpdateStep


class TrainOp(tf.Module):
    """Runs whole updates: `update(iterator)` one, `run(iterator, updates)` many in one compiled call.

    Callers count updates and never micro-batches: how many an update takes is the
    accumulate stage's. `train_op(batch)` runs a single micro-batch, for callers
    that feed batches themselves. See `optimize_loss` for the returned entries.
    """

    # No default for count_skipped_updates: its default is `optimize_loss`'s (the config key's).
    def __init__(self, loss, optimizer, pipeline, backend, var_list, *, count_skipped_updates,
                 freeze_variables_regex=None, summaries=(), jit_compile=False):
        super().__init__(name="train_op")
        self.backend = backend
        self.count_skipped_updates = bool(count_skipped_updates)
        with backend.counter_scope():  # on a mesh: replicated DVariables
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # Every micro-batch run, skipped updates included: where the data stream stands.
            self.micro_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_batches")
        self.update_step = UpdateStep(loss, optimizer, pipeline, backend, var_list,
                                      freeze_variables_regex=freeze_variables_regex, jit_compile=jit_compile)
        self.figures = StepFigures(summaries, backend, self.update_step)
        self._steps = CompiledSteps(backend, jit_compile, self._update_core, self._step)
        self._strategy = backend.strategy
        # A DTensor mesh: batches are laid out on it before the compiled step (`backend.place_batch`).
        self._mesh = backend.mesh
        self.last_loss_sum = None
        self._nonfinite = None  # `nonfinite_variables`' check (`nonfinite_check`), made at its first call

    @property
    def optimizer(self):
        return self.update_step.optimizer

    @property
    def variables_to_train(self):
        """The variables updated (after `build()`): the trainable ones `freeze_variables_regex` leaves."""
        return self.update_step.variables_to_train

    @property
    def frozen_variables(self):
        """The trainable variables `freeze_variables_regex` holds still (after `build()`)."""
        return self.update_step.frozen_variables

    def build(self, batch=None):
        """Creates every variable (optimizer slots, the pipeline's state), so a checkpoint can restore first."""
        self.update_step.build(batch)
        return self

    # -- the step --------------------------------------------------------------
    def _update_core(self, batch):
        """One micro-batch's update (`update_step`), counted.

        Returns `(loss, grads, learning_rate, update, applied, stages)`, the stages' reports
        without `update` and `apply`.
        """
        loss, grads, learning_rate, update, applied, stages = self.update_step(batch)
        # OpenSeq2Seq counts only applied updates: under automatic loss scaling its
        # MixedPrecisionOptimizerWrapper.apply_gradients (open_seq2seq/optimizers/mp_wrapper.py,
        # NVIDIA/OpenSeq2Seq@0f6258e) runs `tf.cond(should_skip_update, tf.no_op, apply_ops_wrapper)`,
        # and only apply_ops_wrapper passes `global_step` on to the inner optimizer's apply_gradients.
        counted = update if self.count_skipped_updates else applied
        self.global_step.assign_add(tf.cast(counted, tf.int64))
        self.micro_batches.assign_add(1)
        return loss, grads, learning_rate, update, applied, stages

    def _step(self, batch, summarize, statistics, shared):
        loss, grads, learning_rate, update, applied, stages = self._steps.core(shared)(batch)
        if not (statistics or summarize):
            # Steps nobody reports on return the loss alone: fewer outputs, less per-step cost.
            return {"loss": loss}
        return self.figures(loss, grads, learning_rate, update, applied, stages, self.global_step, summarize)

    def _check_iterator(self, iterator):
        if self._mesh is not None:
            return  # the mesh backend's iterator lays each batch out eagerly (`backend.distribute`)
        if not isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            # A Python iterator would be read once, while tracing: every step would see one batch.
            raise ParamError.said(
                "iterator", "wrong_type",
                "`iterator` must be a tf.data iterator (`iter(dataset)`). "
                f"Received: iterator of type {type(iterator).__name__}",
            )

    def update(self, iterator, summarize=False, statistics=True):
        """Runs one update (the micro-batches left in it, from `iterator`); returns its statistics.

        Only the micro-batch that ends the update asks for statistics or summaries.
        When skipped updates do not count, attempts repeat until one counts or a
        stop policy fires. `loss` is the mean over every micro-batch run.
        """
        self._check_iterator(iterator)
        self.build()
        accumulation = self.update_step.accumulation
        start = None if self.count_skipped_updates else int(self.global_step.numpy())
        losses = []
        while True:
            left_in_update = 1 if accumulation is None else accumulation.micro_batches_left()
            for left in range(left_in_update, 0, -1):
                last = left == 1
                kind = (bool(summarize and last), bool(statistics and last))
                result = self._steps.call(kind, self._steps.step(*kind), next(iterator))
                losses.append(result["loss"])
            # Reading the step is a host sync, paid only on the updates someone reports on.
            if start is None or int(self.global_step.numpy()) > start or self.stop_reason is not None:
                break
        result = dict(result)
        result["loss"] = losses[0] if len(losses) == 1 else tf.add_n(losses) / float(len(losses))
        self.last_loss_sum = tf.add_n([tf.cast(loss, tf.float64) for loss in losses])
        return result

    def run(self, iterator, updates):
        """Runs `updates` counted updates from `iterator` in one compiled call; returns the mean loss.

        The losses' float64 sum is `last_loss_sum`.

        For stretches nobody reports on: one call instead of one per micro-batch
        saves the per-call cost that dominates small models (Keras's
        `steps_per_execution`). The updates are the same, in the same order.
        When skipped updates do not count, the call runs until `global_step` has
        moved by `updates`, or a stop policy fires. Under XLA the loop and the
        iterator stay in the TensorFlow graph (XLA cannot hold an iterator) and
        each step is one XLA-compiled call.
        """
        self._check_iterator(iterator)
        self.build()
        if self._mesh is not None:
            total, count = self._run_placed(iterator, updates)
        else:
            total, count = self._steps.run(self._run_many)(iterator, tf.constant(updates, tf.int64))
        self.last_loss_sum = total
        return tf.cast(total / tf.cast(tf.maximum(count, 1), tf.float64), tf.float32)

    def _run_many(self, iterator, updates):
        # A nested tf.function is inlined, unless it is XLA-compiled: then it is one cluster.
        step = self._steps.step(False, False)
        # Micro-batch after micro-batch until global_step reaches the target: it moves only
        # where an update ends (has_updated), so this runs whole updates. A skipped update
        # moves it only when skipped updates count; otherwise the loop also ends where a stop
        # policy fires. Every rank takes the same turns: the finite verdict is collective.
        target = self.global_step.read_value() + updates

        def going(total, count):
            more = self.global_step < target
            return more if self.count_skipped_updates else tf.logical_and(more, tf.logical_not(self.update_step.stopping()))

        return tf.while_loop(
            going, lambda total, count: (total + tf.cast(step(next(iterator))["loss"], tf.float64), count + 1),
            (tf.constant(0.0, tf.float64), tf.constant(0, tf.int64)),
        )

    def _run_placed(self, iterator, updates):
        """`_run_many` on a mesh: the same turns, each micro-batch laid out eagerly before its step."""
        step = self._steps.step(False, False)
        target = int(self.global_step.numpy()) + updates
        total, count = 0.0, 0
        while int(self.global_step.numpy()) < target:
            if not self.count_skipped_updates and self.stop_reason is not None:
                break
            total += float(self._steps.call((False, False), step, next(iterator))["loss"])
            count += 1
        return tf.constant(total, tf.float64), tf.constant(count, tf.int64)

    def __call__(self, batch, summarize=False, statistics=True):
        """Runs one micro-batch; `statistics=False` returns only `loss` (unless summarizing)."""
        if self._strategy is not None:
            raise ParamError.said(
                "batch", "conflict",
                "Under tf.distribute the train op reads its batches itself: call "
                "`update(iterator)` with `iter(backend.distribute(dataset))`. Received: a batch",
            )
        if self._mesh is not None:
            batch = self.backend.place_batch(batch)
        self.build(batch)
        kind = (bool(summarize), bool(statistics))
        return self._steps.call(kind, self._steps.step(*kind), batch)

    @property
    def data_position(self):
        """Micro-batches consumed so far (skipped updates included): where a resumed stream starts."""
        return int(self.micro_batches.numpy())

    def fill_data_position(self):
        """For a checkpoint saved before `micro_batches` existed, when every update counted."""
        self.micro_batches.assign(self.global_step * self.micro_batches_per_update)

    @property
    def micro_batches_per_update(self):
        """`iter_size`, as the accumulate stage's state holds it (after `build()`); 1 without one."""
        accumulation = self.update_step.accumulation
        return 1 if accumulation is None else accumulation.per_update

    @property
    def loss_scaler(self):
        """The pipeline's loss scaler, as the unscale stage's state holds it (after `build()`); None without one."""
        scale = self.update_step.scale
        return None if scale is None else scale.loss_scaler

    # -- state -------------------------------------------------------------------
    def checkpoint_items(self):
        """What a `tf.train.Checkpoint` must hold besides the model to resume mid-run."""
        self.build()
        return {
            "global_step": self.global_step,
            "micro_batches": self.micro_batches,
            "optimizer": self.optimizer,
            **self.update_step.pipeline_items,  # `pipeline`, `loss_scaler`, `stop_code`: the pipeline's word
        }

    def state_variables(self):
        """Every variable the run's state is made of (broadcast from rank 0 after a resume)."""
        self.build()
        found = [self.global_step, self.micro_batches, *self.optimizer.variables,
                 *self.update_step.pipeline.variables(self.update_step.state)]
        unique, seen = [], set()
        for variable in found:
            if id(variable) not in seen:
                seen.add(id(variable))
                unique.append(variable)
        return unique

    @property
    def stop_reason(self):
        """None, or why the run must stop (the first stage with a stop policy that says so)."""
        return self.update_step.stop_reason

    def nonfinite_variables(self):
        """The paths of the trained variables and float optimizer state that hold a NaN or an infinity.

        The finite check judges the gradient; an update rule can still make a weight non-finite
        from finite gradients (Keras 3's Adafactor divides 0 by 0 where a row and a column of a
        kernel's gradient are all zero). Such a weight stays non-finite under every later update,
        and a forward pass may not show it (oneDNN's ReLU turns NaN into 0): the loop asks this
        before it reports, evaluates or saves (`nonfinite_check`).
        """
        if self._nonfinite is None:
            self.build()
            self._nonfinite = nonfinite_check([*self.variables_to_train, *self.optimizer.variables])
        return self._nonfinite()


# Tracing the compiled check costs about as much CPU as thirty eager ones (a small MLP with Adam:
# 44 ms against 1.4 ms, 2026-11-29), and most runs ask a few times (a short run, a sweep's trial,
# a restore): the first calls run eagerly, and a run that goes on asking compiles it.
EAGER_CHECKS = 8


def nonfinite_check(variables):
    """A callable returning the paths of the float ones of `variables` that hold a NaN or an infinity (a reduction
    per variable: eager for its first `EAGER_CHECKS` calls, then one compiled call)."""
    unique = list({id(v): v for v in variables if tf.as_dtype(v.dtype).is_floating}.values())
    paths = [getattr(v, "path", v.name) for v in unique]

    def flags():
        return tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in unique])

    compiled = tf.function(flags, autograph=False)
    calls = 0

    def nonfinite():
        nonlocal calls
        if not unique:
            return []
        calls += 1
        finite = (flags if calls <= EAGER_CHECKS else compiled)().numpy()
        return [path for path, ok in zip(paths, finite) if not ok]

    return nonfinite
