"""`optimize_loss`: builds the train op that carries a loss through the gradient pipeline to the weights.

The pipeline, in the order DESIGN.md fixes (each stage a transform tested on its own):

    loss x scale -> gradients -> unscale (float32) -> accumulate(iter_size, [
        all-reduce -> finite check + scaler update -> clip by global norm | LARC
    ]) -> optimizer.apply, only when the update is emitted and finite

Counting (documented in README.md, `count_skipped_updates`):

- `global_step` counts the updates that count toward `max_steps`: applied ones only
  (`count_skipped_updates=False`, OpenSeq2Seq's counting), or applied and skipped ones
  (`True`); it never moves on a micro-batch that ends no update.
- the optimizer's `iterations`, which drives the learning-rate policy, counts
  *applied* updates only: a skipped step moves no weight, slot or lr position.
- `micro_batches` counts every micro-batch run, skipped updates included: the data
  position a resumed run starts its stream at.
"""

from __future__ import annotations

import tensorflow as tf

import keras

from opt_train.errors import ParamError
from opt_train.optimizers import names, registry, user_transforms
from opt_train.optimizers.accumulation import accumulate
from opt_train.optimizers.allreduce import allreduce
from opt_train.optimizers.clipping import clip_by_global_norm
from opt_train.optimizers.finite import finite_check, l2_norm
from opt_train.optimizers.freezing import split_frozen, variable_path
from opt_train.optimizers.larc import larc
from opt_train.optimizers.loss_scaling import get_loss_scaler, unscale
from opt_train.optimizers.mixed_precision import (
    MixedPrecisionOptimizerWrapper,
    is_low_precision,
    needs_master_weights,
)
from opt_train.optimizers.transform import identity, named_chain, report, state_variables, states_with


def get_regularization_loss(model=None):
    """The sum of a model's regularization losses (`model.losses`) in float32; 0.0 when it has none.

    Also accepts a list of loss tensors. The weight penalties of float16 /
    bfloat16 variables are left out: `MixedPrecisionOptimizerWrapper`, which
    `optimize_loss` uses whenever variables are low precision, applies them in
    float32 on the master weights (in float16 a 1e-8 penalty underflows).
    """
    losses = list(getattr(model, "losses", model) or [])
    regularized = [v for v in getattr(model, "trainable_weights", ()) if getattr(v, "regularizer", None)]
    low = [is_low_precision(v) for v in regularized]
    if any(low) and len(losses) >= len(regularized):
        # Keras lists the weight penalties last, one per regularized weight in
        # `trainable_weights` order (keras.layers.Layer.losses).
        cut = len(losses) - len(regularized)
        losses = losses[:cut] + [loss for loss, drop in zip(losses[cut:], low) if not drop]
    if not losses:
        return tf.constant(0.0, tf.float32)
    return tf.add_n([tf.cast(loss, tf.float32) for loss in losses])


class _CallableSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Adapts a `callable(step) -> lr` (OpenSeq2Seq's `learning_rate_decay_fn`) to a Keras schedule."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, step):
        return self.fn(step)

    def get_config(self):
        return {"fn": getattr(self.fn, "__name__", repr(self.fn))}


def _as_schedule(learning_rate_decay_fn):
    if learning_rate_decay_fn is None or isinstance(
        learning_rate_decay_fn, keras.optimizers.schedules.LearningRateSchedule
    ):
        return learning_rate_decay_fn
    if not callable(learning_rate_decay_fn):
        raise ValueError(
            "`learning_rate_decay_fn` must be a LearningRateSchedule or a callable(step). "
            f"Received: learning_rate_decay_fn={learning_rate_decay_fn!r}"
        )
    return _CallableSchedule(learning_rate_decay_fn)


def make_optimizer(optimizer, optimizer_params=None, learning_rate_decay_fn=None):
    """A Keras optimizer from a name, class or instance; the lr policy becomes its learning rate."""
    params = dict(optimizer_params or {})
    schedule = _as_schedule(learning_rate_decay_fn)
    if isinstance(optimizer, keras.optimizers.Optimizer):
        if params or schedule is not None:
            raise ValueError(
                "`optimizer_params` and `learning_rate_decay_fn` cannot be given with an optimizer "
                f"instance. Received: optimizer_params={params!r}, "
                f"learning_rate_decay_fn={learning_rate_decay_fn!r}"
            )
        return optimizer
    if schedule is not None:
        params["learning_rate"] = schedule
    return registry.get(optimizer, **params)


def _dtype_name(dtype):
    return names.check_dtype(getattr(dtype, "name", dtype))


def build_pipeline(scaler, backend, *, iter_size=1, clip_gradients=None, larc_params=None, inserted=(),
                   on_nonfinite="skip", max_consecutive_overflows=None, iter_size_mode="mean"):
    """The gradient pipeline as one named chain (see the module docstring for the order).

    `inserted` is `[(stage, transform)]`: each transform runs right after the
    built-in stage it names (`user_transforms.STAGES`), several after one stage
    in the order given.
    """
    after = {}
    for place, transform in inserted:
        after.setdefault(user_transforms.position(place), []).append(transform)

    def stage(name, transform, place=None):
        extra = [(f"after_{name}_{i}", t) for i, t in enumerate(after.get(place or name, ()))]
        return [(name, transform)] + extra

    # OpenSeq2Seq's post_process_gradients order: clip by global norm, then LARC.
    posts = [("clip", clip_by_global_norm(clip_gradients))] if clip_gradients is not None else []
    if larc_params is not None:
        posts.append(("larc", larc(**larc_params)))
    post = named_chain(*posts) if len(posts) > 1 else posts[0][1] if posts else identity()
    per_update = named_chain(
        *[(f"after_accumulate_{i}", t) for i, t in enumerate(after.get("accumulate", ()))],
        *stage("allreduce", allreduce(backend, op="mean")),
        *stage("finite", finite_check(backend, scaler, on_nonfinite=on_nonfinite,
                                      max_consecutive_overflows=max_consecutive_overflows)),
        *stage("post", post, "clip"),
    )
    return named_chain(
        *stage("unscale", unscale(scaler)),
        ("accumulate", accumulate(iter_size, per_update, mode=iter_size_mode)),
    )


class _PipelineVariables(tf.Module):
    """Holds the pipeline's state variables in a stable order so a checkpoint can track them."""

    def __init__(self, variables):
        super().__init__(name="pipeline")
        self.state = list(variables)


class TrainOp(tf.Module):
    """Runs whole updates: `update(iterator)` one, `run(iterator, updates)` many in one compiled call.

    `iter_size` lives here (with the accumulate transform): callers count updates and
    never micro-batches. `train_op(batch)` runs a single micro-batch, for callers
    that feed batches themselves. See `optimize_loss` for the returned entries.
    """

    def __init__(self, loss, optimizer, pipeline, scaler, backend, var_list, *, freeze_variables_regex=None,
                 summaries=(), jit_compile=False, iter_size=1, count_skipped_updates=True):
        super().__init__(name="train_op")
        self.loss_fn = loss
        self.optimizer = optimizer
        self.scaler = scaler
        self.backend = backend
        self.iter_size = names.check_iter_size(iter_size)
        self.count_skipped_updates = bool(count_skipped_updates)
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # Every micro-batch run, skipped updates included: where the data stream stands.
        self.micro_batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_batches")
        self._pipeline = pipeline
        self._var_list = var_list
        self._freeze_regex = freeze_variables_regex
        self._summaries = summaries
        self._jit_compile = jit_compile
        # Under Horovod a custom-op all-reduce cannot be XLA-compiled: then the parts around it, the
        # forward/backward pass and the optimizer update, are compiled each as one XLA call.
        around_allreduce = jit_compile and backend.size > 1
        self._forward_backward = (
            tf.function(self._gradients, jit_compile=True) if around_allreduce else self._gradients
        )
        self._apply_update = tf.function(self._apply, jit_compile=True) if around_allreduce else self._apply
        self._state = None
        self._stoppers = ()
        self.variables_to_train = None
        self.frozen_variables = None
        self._built = False
        self._compiled = {}

    # -- building ------------------------------------------------------------
    def _resolve_variables(self, batch):
        source = self._var_list
        if source is None:
            if batch is None:
                raise ValueError(
                    "`var_list` is None, so the variables are found by running the loss once: "
                    "call `build(batch)` or pass `var_list`. Received: batch=None"
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
        """Creates every variable (optimizer slots, accumulators, scaler), so a checkpoint can restore first."""
        if self._built:
            return self
        variables, frozen = split_frozen(self._resolve_variables(batch), self._freeze_regex)
        if not variables:
            raise ParamError(
                "freeze_variables_regex", "out_of_range",
                f"matches all {len(frozen)} variables: no variable left to train", self._freeze_regex,
                key="freeze_variables_regex",
                text="No variable left to train. Received: freeze_variables_regex="
                f"{self._freeze_regex!r} matched all {len(frozen)} variables",
            )
        self.variables_to_train = variables
        self.frozen_variables = frozen
        self.optimizer.build(variables)
        self._state = self._pipeline.init(variables)
        self._pipeline_variables = _PipelineVariables(state_variables(self._state))
        # The stages with a stop policy (the finite check), each owning its verdict.
        self._stoppers = states_with(self._state, "stop_reason")
        self._built = True
        return self

    # -- the step --------------------------------------------------------------
    def _gradients(self, batch):
        with tf.GradientTape() as tape:
            loss = tf.cast(self.loss_fn(batch), tf.float32)
            scaled = loss * tf.cast(self.scaler.loss_scale, tf.float32)
        return loss, tape.gradient(scaled, self.variables_to_train)

    def _apply(self, grads):
        pairs = [(g, v) for g, v in zip(grads, self.variables_to_train) if g is not None]
        self.optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])

    def _step(self, batch, summarize, statistics):
        loss, grads = self._forward_backward(batch)
        learning_rate = tf.cast(self.optimizer.learning_rate, tf.float32)
        grads, state = self._pipeline.update(
            grads, self._state, self.variables_to_train,
            learning_rate=learning_rate, loss_is_finite=tf.math.is_finite(loss),
        )
        stages = report(state)
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
            "loss_scale": tf.cast(self.scaler.loss_scale, tf.float32),
            **stages,
        }
        if summarize:
            result.update(self._summary_entries(grads, larc, learning_rate))
        return result

    def _summary_entries(self, grads, larc, learning_rate):
        entries = {}
        wanted = set(self._summaries)
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
                entries[f"larc/final_lr/{name}"] = learning_rate * ratio
        return entries

    def _compiled_step(self, summarize, statistics):
        key = (summarize, statistics)
        if key not in self._compiled:
            whole = self._jit_compile and self.backend.size == 1
            self._compiled[key] = tf.function(
                lambda batch: self._step(batch, summarize, statistics), jit_compile=whole
            )
        return self._compiled[key]

    @staticmethod
    def _check_iterator(iterator):
        if not isinstance(iterator, tf.data.Iterator):
            # A Python iterator would be read once, while tracing: every step would see one batch.
            raise ValueError(
                "`iterator` must be a tf.data iterator (`iter(dataset)`). "
                f"Received: iterator of type {type(iterator).__name__}"
            )

    def update(self, iterator, summarize=False, statistics=True):
        """Runs one update (its `iter_size` micro-batches from `iterator`); returns its statistics.

        Only the micro-batch that ends the update asks for statistics or summaries.
        When skipped updates do not count, attempts repeat until one counts or a
        stop policy fires. `loss` is the mean over every micro-batch run.
        """
        self._check_iterator(iterator)
        self.build()
        start = None if self.count_skipped_updates else int(self.global_step.numpy())
        losses = []
        while True:
            for index in range(self.iter_size):
                last = index == self.iter_size - 1
                result = self._compiled_step(bool(summarize and last), bool(statistics and last))(next(iterator))
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
        if "run" not in self._compiled:
            self._compiled["run"] = tf.function(self._run_many)
        return self._compiled["run"](iterator, tf.constant(updates, tf.int64))

    def _stopping(self):
        """True once a stage's stop policy says the run must end (a tensor; no host sync)."""
        if not self._stoppers:
            return tf.constant(False)
        return tf.reduce_any(tf.stack([s.stop_code.read_value() > 0 for s in self._stoppers]))

    def _run_many(self, iterator, updates):
        # A nested tf.function is inlined, unless it is XLA-compiled: then it is one cluster.
        step = self._compiled_step(False, False)
        total = tf.constant(0.0, tf.float32)
        count = tf.constant(0, tf.int64)
        if self.count_skipped_updates:
            for _ in tf.range(updates * self.iter_size):
                total += step(next(iterator))["loss"]
                count += 1
        else:
            # A skipped update does not move global_step: loop until it reaches the target.
            # Every rank takes the same turns: the finite verdict (hence the step) is collective.
            target = self.global_step.read_value() + updates
            while self.global_step < target and not self._stopping():
                for _ in tf.range(self.iter_size):
                    total += step(next(iterator))["loss"]
                    count += 1
        return total / tf.cast(tf.maximum(count, 1), tf.float32)

    def __call__(self, batch, summarize=False, statistics=True):
        """Runs one micro-batch; `statistics=False` returns only `loss` (unless summarizing)."""
        self.build(batch)
        return self._compiled_step(bool(summarize), bool(statistics))(batch)

    @property
    def data_position(self):
        """Micro-batches consumed so far (skipped updates included): where a resumed stream starts."""
        return int(self.micro_batches.numpy())

    def fill_data_position(self):
        """For a checkpoint saved before `micro_batches` existed, when every update counted."""
        self.micro_batches.assign(self.global_step * self.iter_size)

    # -- state -------------------------------------------------------------------
    def checkpoint_items(self):
        """What a `tf.train.Checkpoint` must hold besides the model to resume mid-run."""
        self.build()
        items = {
            "global_step": self.global_step,
            "micro_batches": self.micro_batches,
            "optimizer": self.optimizer,
            "pipeline": self._pipeline_variables,
            "loss_scaler": self.scaler,
        }
        if self._stoppers:
            # Also under its own name, as checkpoints have always had it.
            items["stop_code"] = self._stoppers[0].stop_code
        return items

    def state_variables(self):
        """Every variable the run's state is made of (broadcast from rank 0 after a resume)."""
        self.build()
        found = [self.global_step, self.micro_batches, *self.optimizer.variables,
                 *self._pipeline_variables.state, *self.scaler.variables]
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


def optimize_loss(loss, optimizer, optimizer_params=None, learning_rate_decay_fn=None, var_list=None,
                  dtype="float32", clip_gradients=None, summaries=None, larc_params=None,
                  loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                  distributed=None, freeze_variables_regex=None, on_nonfinite="skip",
                  max_consecutive_overflows=None, jit_compile=False, gradient_transforms=None,
                  iter_size_mode="mean", count_skipped_updates=True):
    """Given a loss function and optimizer settings, returns a `TrainOp` (OpenSeq2Seq's `optimize_loss` for TF2).

    Args:
        loss: `loss(batch) -> scalar`, the model's forward pass on one micro-batch.
        optimizer: name (`registry.get`), class or Keras optimizer instance.
        optimizer_params: the optimizer's parameters. Defaults to `{}`.
        learning_rate_decay_fn: a Keras LearningRateSchedule or `callable(step) -> lr`;
            becomes the optimizer's learning rate, evaluated at applied updates.
        var_list: variables to train (a list, a model, a callable); None: found by
            running `loss` once at `build(batch)`.
        dtype: one of `names.DTYPES`; float16 / bfloat16 wrap the optimizer in
            `MixedPrecisionOptimizerWrapper`. Defaults to `"float32"`.
        clip_gradients: `max_grad_norm`, or None. With `larc_params`, clipping runs first.
        summaries: names from `OPTIMIZER_SUMMARIES` added with `summarize=True`.
        larc_params: `{larc_eta, larc_mode, min_update, epsilon}`, or None.
        loss_scaling: a number (static) or "Backoff" / "LogMax" / "Dynamic". Defaults to `1.0`.
        loss_scaling_params: the algorithm's parameters (`names.LOSS_SCALERS`).
        on_horovod: pick the Horovod backend when `distributed` is None.
        iter_size: micro-batches per update. Defaults to `1`.
        iter_size_mode: `"mean"` (OpenSeq2Seq) or `"sum"` (RETURNN's `accum_grad_multiple_step`)
            of the micro-batch gradients. Defaults to `"mean"`.
        distributed: an `opt_train.distributed.Backend`; None: `get_backend(on_horovod)`.
        freeze_variables_regex: variables whose path matches get no update and no slots.
        on_nonfinite: "skip" (count and go on) or "stop" (set `stop_reason`). Defaults to `"skip"`.
        max_consecutive_overflows: stop after this many non-finite updates in a row; None: never
            when skipped updates count, else `names.MAX_CONSECUTIVE_OVERFLOWS_DEFAULT` (a run
            that skips every update would otherwise never reach its step).
        count_skipped_updates: whether a skipped (non-finite) update moves `global_step`.
            False is OpenSeq2Seq's counting (YAML's default); True keeps this function's
            historical counting. Defaults to `True`.
        jit_compile: XLA-compile the step. Defaults to `False`.
        gradient_transforms: your own transforms, each run right after a named built-in
            stage: entries `{factory, params, after}` as in YAML (`user_transforms`), or
            `(after, GradientTransform)` pairs. Defaults to none.

    Returns:
        A `TrainOp`. `train_op(batch, summarize=False)` returns `loss` (float32,
        unscaled), `global_step`, `update`, `applied`, `learning_rate`,
        `loss_scale`, `global_gradient_norm`, `skipped_steps`,
        `consecutive_overflows` (plus `global_clipped_gradient_norm` when
        clipping), and with `summarize=True` the per-variable entries asked for.
    """
    dtype = _dtype_name(dtype)
    summaries = names.check_summaries(summaries)
    clip_gradients = names.check_max_grad_norm(clip_gradients)
    larc_params = names.check_larc_params(larc_params)
    names.check_clip_and_larc(clip_gradients, larc_params)
    iter_size = names.check_iter_size(iter_size)
    iter_size_mode = names.check_iter_size_mode(iter_size_mode)
    on_nonfinite = names.check_on_nonfinite(on_nonfinite)
    max_consecutive_overflows = names.check_max_consecutive_overflows(max_consecutive_overflows)
    count_skipped_updates = names.check_count_skipped_updates(count_skipped_updates)
    if not count_skipped_updates and max_consecutive_overflows is None:
        max_consecutive_overflows = names.MAX_CONSECUTIVE_OVERFLOWS_DEFAULT
    inserted = user_transforms.build(gradient_transforms)
    if not callable(loss):
        raise ValueError(f"`loss` must be a callable `loss(batch) -> scalar`. Received: loss={loss!r}")

    if distributed is None:
        from opt_train.distributed import get_backend

        distributed = get_backend(on_horovod)
    scaler = get_loss_scaler(loss_scaling, loss_scaling_params)
    opt = make_optimizer(optimizer, optimizer_params, learning_rate_decay_fn)
    if needs_master_weights(dtype):
        opt = MixedPrecisionOptimizerWrapper(opt)
    pipeline = build_pipeline(
        scaler, distributed, iter_size=iter_size, clip_gradients=clip_gradients, larc_params=larc_params,
        inserted=inserted, on_nonfinite=on_nonfinite, max_consecutive_overflows=max_consecutive_overflows,
        iter_size_mode=iter_size_mode,
    )
    return TrainOp(
        loss, opt, pipeline, scaler, distributed, var_list,
        freeze_variables_regex=freeze_variables_regex, summaries=summaries, jit_compile=jit_compile,
        iter_size=iter_size, count_skipped_updates=count_skipped_updates,
    )
