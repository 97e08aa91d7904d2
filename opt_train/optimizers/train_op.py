"""`TrainOp`: runs whole updates of a built gradient pipeline, on one process's replicas, and holds the run's counters.

`optimize_loss` (opt_train/optimizers/pipeline.py) builds one. Counting:

- `global_step` counts the updates that count toward `max_steps`: applied ones only
  (`count_skipped_updates=False`, OpenSeq2Seq's counting), or applied and skipped ones
  (`True`); it never moves on a micro-batch that ends no update.
- the optimizer's `iterations`, which drives the learning-rate policy, counts
  *applied* updates only: a skipped step moves no weight, slot or lr position.
- `micro_batches` counts every micro-batch run, skipped updates included: the data
  position a resumed run starts its stream at.

What the train op must know of the pipeline it asks the pipeline for, by the class of a
stage's state (`pipeline.handle(state, ScaleState)`), as optax's `MultiSteps.has_updated`
asks the state: the loss scale (the unscale stage's `ScaleState`, which owns the scaler;
the finite check receives it as the extra input `scale`), the micro-batches an update
takes (`accumulate`'s `AccumulateState`), whether a stop policy fired (the finite check's
`FiniteState`). It keeps no copy of them; the pipeline says what a checkpoint holds of it.

Under tf.distribute (`backend.strategy`), `pipeline.local` runs on every replica
(`strategy.run`) and the rest once per process in cross-replica context; see
opt_train/distributed/tfdist.py.
"""

from __future__ import annotations

import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers.accumulation import AccumulateState
from opt_train.optimizers.finite import FiniteState, l2_norm
from opt_train.optimizers.freezing import check_left_to_train, split_frozen, variable_path
from opt_train.optimizers.larc import LarcState
from opt_train.optimizers.loss_scaling import ScaleState
from opt_train.optimizers.optimizer_groups import OptimizerGroups
from opt_train.optimizers.transform import report


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
        self.loss_fn = loss
        self.optimizer = optimizer
        self.backend = backend
        self.count_skipped_updates = bool(count_skipped_updates)
        with backend.counter_scope():  # on a mesh: replicated DVariables
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # Every micro-batch run, skipped updates included: where the data stream stands.
            self.micro_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_batches")
        self._pipeline = pipeline
        self._var_list = var_list
        self._freeze_regex = freeze_variables_regex
        self._summaries = summaries
        self._jit_compile = jit_compile
        # Under Horovod a custom-op all-reduce cannot be XLA-compiled: then the parts around it, the
        # forward/backward pass and the optimizer update, are compiled each as one XLA call. Under
        # tf.distribute the forward/backward pass (on each replica) is; the update runs through the
        # strategy's cross-replica `update`, which XLA cannot hold.
        self._strategy = backend.strategy
        # A DTensor mesh: batches are laid out on it before the compiled step (`backend.place_batch`).
        self._mesh = backend.mesh
        self._checked = set()
        around_allreduce = jit_compile and not self._whole_step_xla
        self._forward_backward = (
            tf.function(self._gradients, jit_compile=True) if around_allreduce else self._gradients
        )
        self._apply_update = (
            tf.function(self._apply, jit_compile=True)
            if around_allreduce and self._strategy is None else self._apply
        )
        self._state = None
        self._has_gradient = ()
        self._scale = None
        self._accumulation = None
        self._stoppers = ()
        self._larc = None
        self._pipeline_items = {}
        self.variables_to_train = None
        self.frozen_variables = None
        self._built = False
        self._compiled = {}

    # -- building ------------------------------------------------------------
    def _resolve_variables(self, batch):
        source = self._var_list
        if source is None:
            if batch is None:
                raise ParamError.said(
                    "batch", "missing",
                    "`var_list` is None, so the variables are found by running the loss once: "
                    "call `build(batch)` or pass `var_list`. Received: batch=None",
                )
            with tf.GradientTape() as tape:
                self.loss_fn(batch)
            source = [v for v in tape.watched_variables() if v.trainable]
        elif isinstance(source, (list, tuple)):
            # Checked first: stored on this trackable, a list becomes a ListWrapper,
            # whose own (empty) `trainable_variables` would hide the Keras variables.
            pass
        elif hasattr(source, "trainable_variables"):
            source = source.trainable_variables
        elif callable(source):
            source = source()
        return list(source)

    def build(self, batch=None):
        """Creates every variable (optimizer slots, the pipeline's state), so a checkpoint can restore first."""
        if self._built:
            return self
        variables, frozen = split_frozen(self._resolve_variables(batch), self._freeze_regex)
        if not variables and not frozen:
            raise ParamError("var_list", "missing", "holds no trainable variable", text="No variable to train: "
                             "var_list (or, without one, the trainable variables the loss reads) is empty.")
        check_left_to_train(variables, frozen, self._freeze_regex)
        self.variables_to_train = variables
        self.frozen_variables = frozen
        with self.backend.scope():
            # Inside the strategy's scope (tf.distribute): the optimizer's slots become mirrored
            # variables and the accumulators replica-local ones. Building the slots here, eagerly,
            # also avoids keras#23085 (a first update traced under a strategy fails to build them).
            if isinstance(self.optimizer, OptimizerGroups):
                self.optimizer.build(variables, frozen=frozen)  # a group of frozen variables alone is refused
            else:
                self.optimizer.build(variables)
            self._state = self._pipeline.init(variables)
        # What the step asks the pipeline, each a stage's state found by its class: the loss
        # scale, how many micro-batches an update takes, the stop policies (the finite check),
        # LARC's per-variable rates. A pipeline without one of these stages has no handle
        # (None): no loss scaling, one micro-batch an update, no stop policy.
        self._scale = self._pipeline.handle(self._state, ScaleState)
        self._accumulation = self._pipeline.handle(self._state, AccumulateState)
        self._stoppers = tuple(self._pipeline.handles(self._state, FiniteState))
        self._larc = self._pipeline.handle(self._state, LarcState)
        self._pipeline_items = self._pipeline.checkpoint_items(self._state)
        self._built = True
        return self

    # -- the step --------------------------------------------------------------
    def _gradients(self, batch):
        with self.backend.forward(), tf.GradientTape() as tape:
            loss = tf.cast(self.loss_fn(batch), tf.float32)
            scaled = loss if self._scale is None else self._scale.scale_loss(loss)
        grads = tape.gradient(scaled, self.variables_to_train)
        if self._mesh is not None:
            # DTensor has no layout for a scatter update: an embedding's rows arrive dense.
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return loss, grads

    def _apply(self, grads):
        pairs = [(g, v) for g, v in zip(grads, self.variables_to_train) if g is not None]
        self.optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])

    def _local_part(self, batch):
        """Loss, gradients and the pipeline's local stages on one replica's micro-batch."""
        loss, grads = self._forward_backward(batch)
        grads, _ = self._pipeline.local.update(
            grads, self._state["local"], self.variables_to_train,
            learning_rate=tf.cast(self.optimizer.learning_rate, tf.float32),
            loss_is_finite=tf.math.is_finite(loss), scale=self._scale,
        )
        if self._strategy is not None:
            # A replica returns its gradients as per-replica values: None (a variable without
            # a gradient) cannot be one, so only the present ones leave the replica (set while
            # tracing, the same on every replica).
            self._has_gradient = [g is not None for g in grads]
            return loss, [g for g in grads if g is not None]
        return loss, grads

    def _replicated_part(self, batch):
        """`_local_part` on every replica; this process's mean loss and the per-replica gradients, in variable order.

        The loss is averaged over this process's replicas only: across workers it would
        be a collective per micro-batch (on a small model as costly as the gradients'
        own), while the loop reduces the figures it reports and the finite check asks
        every worker (`backend.all_finite`) where a policy reads the loss.
        """
        loss, present = self._strategy.run(self._local_part, args=(self.backend.split_batch(batch),))
        losses = self._strategy.experimental_local_results(loss)
        loss = tf.add_n(list(losses)) / float(len(losses))
        grads, found = [], iter(present)
        for has_gradient in self._has_gradient:
            grads.append(next(found) if has_gradient else None)
        return loss, grads

    def _update_core(self, batch):
        """One micro-batch's update, all that every kind of step shares: gradients, pipelines, apply, counters.

        Returns `(loss, grads, learning_rate, update, applied, stages)`, the stages' reports
        without `update` and `apply`.
        """
        if self._strategy is None:
            loss, grads = self._local_part(batch)
        else:
            loss, grads = self._replicated_part(batch)
        learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)
        grads, _ = self._pipeline.shared.update(
            grads, self._state["accumulate"], self.variables_to_train,
            learning_rate=learning_rate, loss_is_finite=tf.math.is_finite(loss), scale=self._scale,
        )
        stages = report(self._state)
        update = stages.pop("update", tf.constant(True))
        applied = tf.logical_and(update, stages.pop("apply", tf.constant(True)))
        tf.cond(applied, lambda: self._apply_update(grads), lambda: None)
        # OpenSeq2Seq counts only applied updates: under automatic loss scaling its
        # MixedPrecisionOptimizerWrapper.apply_gradients (open_seq2seq/optimizers/mp_wrapper.py,
        # NVIDIA/OpenSeq2Seq@0f6258e) runs `tf.cond(should_skip_update, tf.no_op, apply_ops_wrapper)`,
        # and only apply_ops_wrapper passes `global_step` on to the inner optimizer's apply_gradients.
        counted = update if self.count_skipped_updates else applied
        self.global_step.assign_add(tf.cast(counted, tf.int64))
        self.micro_batches.assign_add(1)
        return loss, grads, learning_rate, update, applied, stages

    @property
    def _whole_step_xla(self):
        """Each kind of step one XLA cluster: XLA asked for, and no all-reduce for it to stop at."""
        return self._jit_compile and self.backend.size == 1 and self._strategy is None

    def _core(self, shared):
        """`_update_core` as a kind of step calls it: `shared`, one trace of the model's update for every kind.

        Each kind of step (several updates in one call, with statistics, with summaries)
        calls one function, inlined into it when its graph is built (a step costs what it
        did: `run` ~240 us an update on a tiny model either way). The model's forward and
        backward pass is traced once instead of once per kind: for ResNet-50 on CPU ~25 s of
        start-up each. A train op's first kind, unless `run` drives it, traces the update
        into itself: one used a single way (a call per batch) pays for no second function
        (~0.07 s at its first call).

        Under whole-step XLA each kind stays one XLA cluster, its core traced into it: an
        XLA-compiled core would return the gradients to every kind.
        """
        if self._whole_step_xla or not shared:
            return self._update_core
        if "core" not in self._compiled:
            self._compiled["core"] = tf.function(self._update_core, autograph=False)
        return self._compiled["core"]

    def _step(self, batch, summarize, statistics, shared):
        loss, grads, learning_rate, update, applied, stages = self._core(shared)(batch)
        if not (statistics or summarize):
            # Steps nobody reports on return the loss alone: fewer outputs, less per-step cost.
            return {"loss": loss}
        larc = {name: stages.pop(name) for name in ("larc_ratio", "larc_clip_on") if name in stages}
        result = {
            "loss": loss,
            "global_step": self.global_step.read_value(),
            "update": update,
            "applied": applied,
            "learning_rate": learning_rate,
            **stages,  # loss_scale first: the unscale stage's
        }
        if summarize:
            entries = self._summary_entries(grads, larc, learning_rate)
            if self._mesh is not None:  # whole on every device: the reporter reads them as NumPy
                entries = {name: self.backend.whole(value) for name, value in entries.items()}
            result.update(entries)
        return result

    def _summary_entries(self, grads, larc, learning_rate):
        entries = {}
        wanted = set(self._summaries)
        # Each variable's rate over the reported one: its optimizer group's lr_multiplier, as LARC holds it.
        rate_scale = self._larc.rate_scale if self._larc is not None and self._larc.rate_scale else (1.0,) * len(grads)
        for i, (g, v) in enumerate(zip(grads, self.variables_to_train)):
            name = variable_path(v).replace(":", "_")
            if g is not None and "gradients" in wanted:
                entries[f"gradients/{name}"] = tf.convert_to_tensor(g)
            if g is not None and "gradient_norm" in wanted:
                entries[f"gradient_norm/{name}"] = l2_norm(tf.convert_to_tensor(g))
            if "variables" in wanted:
                entries[f"variables/{name}"] = tf.convert_to_tensor(v)
            if "variable_norm" in wanted:
                entries[f"variable_norm/{name}"] = l2_norm(v)
            if larc and "larc_summaries" in wanted:
                ratio = larc["larc_ratio"][i]
                entries[f"larc/grad_update/{name}"] = ratio
                entries[f"larc/clip_on/{name}"] = tf.cast(larc["larc_clip_on"][i], tf.int32)
                entries[f"larc/final_lr/{name}"] = learning_rate * rate_scale[i] * ratio
        return entries

    def _compiled_step(self, summarize, statistics):
        key = (summarize, statistics)
        if key not in self._compiled:
            # The first kind compiled shares nothing (under `run`, "run" is compiled already).
            shared = bool(self._compiled)
            # Traced without AutoGraph, as Keras 3's fit traces its step: nothing in it branches
            # on a tensor in Python (`_run_many`'s loops are tf.while_loops), and converting its
            # ~100 functions cost ~3 s of CPU in every process that trains.
            self._compiled[key] = tf.function(lambda batch: self._step(batch, summarize, statistics, shared),
                                              jit_compile=self._whole_step_xla, autograph=False)
        return self._compiled[key]

    def _call_step(self, key, function, *args):
        """`function(*args)`; on a mesh, first checked once per kind of step (`backend.check_step`)."""
        if self._mesh is not None and key not in self._checked:
            self.backend.check_step(function, *args)
            self._checked.add(key)
        return function(*args)

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
        start = None if self.count_skipped_updates else int(self.global_step.numpy())
        losses = []
        while True:
            left_in_update = 1 if self._accumulation is None else self._accumulation.micro_batches_left()
            for left in range(left_in_update, 0, -1):
                last = left == 1
                kind = (bool(summarize and last), bool(statistics and last))
                result = self._call_step(kind, self._compiled_step(*kind), next(iterator))
                losses.append(result["loss"])
            # Reading the step is a host sync, paid only on the updates someone reports on.
            if start is None or int(self.global_step.numpy()) > start or self.stop_reason is not None:
                break
        result = dict(result)
        result["loss"] = losses[0] if len(losses) == 1 else tf.add_n(losses) / float(len(losses))
        return result

    def run(self, iterator, updates):
        """Runs `updates` counted updates from `iterator` in one compiled call; returns the mean loss.

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
            return self._run_placed(iterator, updates)
        if "run" not in self._compiled:
            self._compiled["run"] = tf.function(self._run_many, autograph=False)
        return self._compiled["run"](iterator, tf.constant(updates, tf.int64))

    def _stopping(self):
        """True once a stage's stop policy says the run must end (a tensor; no host sync)."""
        if not self._stoppers:
            return tf.constant(False)
        return tf.reduce_any(tf.stack([stopper.stopping() for stopper in self._stoppers]))

    def _run_many(self, iterator, updates):
        # A nested tf.function is inlined, unless it is XLA-compiled: then it is one cluster.
        step = self._compiled_step(False, False)
        # Micro-batch after micro-batch until global_step reaches the target: it moves only
        # where an update ends (has_updated), so this runs whole updates. A skipped update
        # moves it only when skipped updates count; otherwise the loop also ends where a stop
        # policy fires. Every rank takes the same turns: the finite verdict is collective.
        target = self.global_step.read_value() + updates

        def going(total, count):
            more = self.global_step < target
            return more if self.count_skipped_updates else tf.logical_and(more, tf.logical_not(self._stopping()))

        total, count = tf.while_loop(
            going, lambda total, count: (total + step(next(iterator))["loss"], count + 1),
            (tf.constant(0.0, tf.float32), tf.constant(0, tf.int64)),
        )
        return total / tf.cast(tf.maximum(count, 1), tf.float32)

    def _run_placed(self, iterator, updates):
        """`run` on a mesh: the same turns as `_run_many`, each micro-batch laid out eagerly before its step."""
        step = self._compiled_step(False, False)
        target = int(self.global_step.numpy()) + updates
        total, count = 0.0, 0
        while int(self.global_step.numpy()) < target:
            if not self.count_skipped_updates and self.stop_reason is not None:
                break
            total += float(self._call_step((False, False), step, next(iterator))["loss"])
            count += 1
        return tf.constant(total / max(count, 1), tf.float32)

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
        return self._call_step(kind, self._compiled_step(*kind), batch)

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
        return 1 if self._accumulation is None else self._accumulation.per_update

    @property
    def loss_scaler(self):
        """The pipeline's loss scaler, as the unscale stage's state holds it (after `build()`); None without one."""
        return None if self._scale is None else self._scale.loss_scaler

    # -- state -------------------------------------------------------------------
    def checkpoint_items(self):
        """What a `tf.train.Checkpoint` must hold besides the model to resume mid-run."""
        self.build()
        return {
            "global_step": self.global_step,
            "micro_batches": self.micro_batches,
            "optimizer": self.optimizer,
            **self._pipeline_items,  # `pipeline`, `loss_scaler`, `stop_code`: the pipeline's word
        }

    def state_variables(self):
        """Every variable the run's state is made of (broadcast from rank 0 after a resume)."""
        self.build()
        found = [self.global_step, self.micro_batches, *self.optimizer.variables,
                 *self._pipeline.variables(self._state)]
        unique, seen = [], set()
        for variable in found:
            if id(variable) not in seen:
                seen.add(id(variable))
                unique.append(variable)
        return unique

    @property
    def stop_reason(self):
        """None, or why the run must stop (the first stage with a stop policy that says so)."""
        for stopper in self._stoppers:
            reason = stopper.stop_reason()
            if reason is not None:
                return reason
        return None
