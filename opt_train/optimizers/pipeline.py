"""`optimize_loss`: builds the train op that carries a loss through the gradient pipeline to the weights.

The pipeline, in the order DESIGN.md fixes (each stage a transform tested on its own):

    loss x scale -> gradients -> unscale (float32) -> accumulate(iter_size, [
        all-reduce -> finite check + scaler update -> clip by global norm | LARC
    ]) -> optimizer.apply, only when the update is emitted and finite

The train op that runs it, and the counters it keeps: opt_train/optimizers/train_op.py.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

import keras

from opt_train.errors import ParamError
from opt_train.optimizers import grouping, names, registry, user_transforms
from opt_train.optimizers.accumulation import accumulate
from opt_train.optimizers.allreduce import allreduce
from opt_train.optimizers.clipping import clip_by_global_norm
from opt_train.optimizers.finite import FiniteState, finite_check
from opt_train.optimizers.larc import larc
from opt_train.optimizers.loss_scaling import ScaleState, get_loss_scaler, unscale
from opt_train.optimizers.mixed_precision import (
    MixedPrecisionOptimizerWrapper,
    is_low_precision,
    needs_master_weights,
)
from opt_train.optimizers.optimizer_groups import OptimizerGroups, group_rate
from opt_train.optimizers.train_op import TrainOp
from opt_train.optimizers.transform import GradientTransform, find, identity, named_chain, state_variables
from opt_train.process_group import SingleProcess


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
        raise ParamError.said(
            "learning_rate_decay_fn", "wrong_type",
            "`learning_rate_decay_fn` must be a LearningRateSchedule or a callable(step). "
            f"Received: learning_rate_decay_fn={learning_rate_decay_fn!r}",
            learning_rate_decay_fn,
        )
    return _CallableSchedule(learning_rate_decay_fn)


def make_optimizer(optimizer, optimizer_params=None, learning_rate_decay_fn=None):
    """A Keras optimizer from a name, class or instance; the lr policy becomes its learning rate."""
    params = dict(optimizer_params or {})
    schedule = _as_schedule(learning_rate_decay_fn)
    if isinstance(optimizer, keras.optimizers.Optimizer):
        if params or schedule is not None:
            raise ParamError.said(
                "optimizer_params", "conflict",
                "`optimizer_params` and `learning_rate_decay_fn` cannot be given with an optimizer "
                f"instance. Received: optimizer_params={params!r}, "
                f"learning_rate_decay_fn={learning_rate_decay_fn!r}",
            )
        return optimizer
    if schedule is not None:
        params["learning_rate"] = schedule
    return registry.get(optimizer, **params)


def _dtype_name(dtype):
    return names.check_dtype(getattr(dtype, "name", dtype))


class _PipelineVariables(tf.Module):
    """Holds the pipeline's state variables in a stable order so a checkpoint can track them."""

    def __init__(self, variables):
        super().__init__(name="pipeline")
        self.state = list(variables)


class Pipeline(NamedTuple):
    """The gradient pipeline in two parts, split where replicas meet.

    `local`: the loss scale's removal and what runs right after it, on each
    replica's own gradient. `shared`: the accumulation and, once per update, the
    all-reduce and every stage after it, once per process (in cross-replica
    context under tf.distribute). In one process, and under Horovod (one replica
    per process), the two run one after the other: `whole()`.

    What a caller must know of a stage it asks the pipeline for by the class of
    the stage's state (`handle(state, ScaleState)`), as optax's `MultiSteps.has_updated`
    asks the state: the pipeline's state is the only copy.
    """

    local: GradientTransform
    shared: GradientTransform

    def whole(self):
        return named_chain(("local", self.local), ("accumulate", self.shared))

    def init(self, variables):
        """The state of both parts, as `whole()` keys it (created in the caller's scope)."""
        return {"local": self.local.init(variables), "accumulate": self.shared.init(variables)}

    @staticmethod
    def handles(state, kind):
        """Every stage state of class `kind` in `state`, in pipeline order."""
        return find(state, kind)

    @staticmethod
    def handle(state, kind):
        """The stage state of class `kind` in `state`, or None when no stage keeps one."""
        found = find(state, kind)
        if len(found) > 1:
            raise ParamError.said("kind", "conflict", f"One stage may keep a {kind.__name__}. "
                                  f"Received: {len(found)} stages keep one", kind.__name__)
        return found[0] if found else None

    @classmethod
    def variables(cls, state):
        """Every variable of the pipeline's state: the stage states', then the loss scaler's."""
        scale = cls.handle(state, ScaleState)
        return [*state_variables(state), *(scale.loss_scaler.variables if scale is not None else ())]

    @classmethod
    def checkpoint_items(cls, state):
        """What a checkpoint holds of the pipeline, under the keys checkpoints have always had.

        `pipeline`: every `tf.Variable` of the stage states, in pipeline order;
        `loss_scaler`: the scaler the unscale stage's `ScaleState` owns (a module of
        its own, so its variables are not in `pipeline`); `stop_code`: the finite
        check's, also under its own name.
        """
        items = {"pipeline": _PipelineVariables(state_variables(state))}
        scale = cls.handle(state, ScaleState)
        if scale is not None:
            items["loss_scaler"] = scale.loss_scaler
        stops = cls.handles(state, FiniteState)
        if stops:
            items["stop_code"] = stops[0].stop_code
        return items


def build_pipeline(scaler, backend, *, iter_size=1, clip_gradients=None, larc_params=None, inserted=(),
                   on_nonfinite="skip", max_consecutive_overflows=None, iter_size_mode="mean",
                   rate_multipliers=None):
    """The gradient pipeline as a `Pipeline` (see the module docstring for the order).

    `scaler` goes to the unscale stage alone, whose state owns it; the finite check
    adjusts it through that state (the train op passes it as the extra input `scale`).

    `inserted` is `[(stage, transform)]`: each transform runs right after the
    built-in stage it names (`user_transforms.STAGES`), several after one stage
    in the order given. `rate_multipliers(variables) -> [float]`: each variable's
    rate over the run's (optimizer groups), which LARC's clip mode divides by.
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
        posts.append(("larc", larc(**larc_params, rate_multipliers=rate_multipliers)))
    post = named_chain(*posts) if len(posts) > 1 else posts[0][1] if posts else identity()
    per_update = named_chain(
        *[(f"after_accumulate_{i}", t) for i, t in enumerate(after.get("accumulate", ()))],
        *stage("allreduce", allreduce(backend, op="mean")),
        *stage("finite", finite_check(backend, on_nonfinite=on_nonfinite,
                                      max_consecutive_overflows=max_consecutive_overflows)),
        *stage("post", post, "clip"),
    )
    return Pipeline(
        local=named_chain(*stage("unscale", unscale(scaler))),
        shared=accumulate(iter_size, per_update, mode=iter_size_mode),
    )


def optimize_loss(loss, optimizer, optimizer_params=None, learning_rate_decay_fn=None, var_list=None,
                  dtype="float32", clip_gradients=None, summaries=names.DEFAULT_SUMMARIES, larc_params=None,
                  loss_scaling=1.0, loss_scaling_params=None, on_horovod=False, iter_size=1,
                  distributed=None, freeze_variables_regex=None, on_nonfinite="skip",
                  max_consecutive_overflows=names.MAX_CONSECUTIVE_OVERFLOWS_DEFAULT, jit_compile=False,
                  gradient_transforms=None, iter_size_mode="mean", count_skipped_updates=False,
                  optimizer_groups=None):
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
        summaries: names from `OPTIMIZER_SUMMARIES` added with `summarize=True`. Defaults to
            OpenSeq2Seq's `names.DEFAULT_SUMMARIES` (entries every step returns anyway).
        larc_params: `{larc_eta, larc_mode, min_update, epsilon}`, or None.
        loss_scaling: a number (static) or "Backoff" / "LogMax" / "Dynamic". Defaults to `1.0`.
        loss_scaling_params: the algorithm's parameters (`names.LOSS_SCALERS`).
        on_horovod: OpenSeq2Seq's switch; with `distributed` None a `ParamError` asking for
            the Horovod backend (`opt_train.distributed.get_backend("horovod")`).
        iter_size: micro-batches per update. Defaults to `1`.
        iter_size_mode: `"mean"` (OpenSeq2Seq) or `"sum"` (RETURNN's `accum_grad_multiple_step`)
            of the micro-batch gradients. Defaults to `"mean"`.
        distributed: an `opt_train.process_group.Backend` (`opt_train.distributed.get_backend`
            chooses one); None: a single process (`SingleProcess`).
        freeze_variables_regex: variables whose path matches get no update and no slots.
        on_nonfinite: "skip" (count and go on) or "stop" (set `stop_reason`). Defaults to `"skip"`.
        max_consecutive_overflows: stop after this many non-finite updates in a row; None: never
            when skipped updates count, else `names.MAX_CONSECUTIVE_OVERFLOWS_DEFAULT` (a run
            that skips every update would otherwise never reach its step). Defaults to `20`.
        count_skipped_updates: whether a skipped (non-finite) update moves `global_step`.
            Defaults to `False`, OpenSeq2Seq's counting.
        jit_compile: XLA-compile the step. Defaults to `False`.
        gradient_transforms: your own transforms, each run right after a named built-in
            stage: entries `{factory, params, after}` as in YAML (`user_transforms`), or
            `(after, GradientTransform)` pairs. Defaults to none.
        optimizer_groups: `[{variables, optimizer, optimizer_params, lr_multiplier}]` as in
            YAML (`grouping`): each variable goes to the first group whose regex searches its
            path, the others to `optimizer`; every group shares this one pipeline, and only the
            final apply is split (`OptimizerGroups`). Defaults to none.

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
    groups = _checked_groups(optimizer_groups, optimizer, optimizer_params)
    if not callable(loss):
        raise ParamError.said("loss", "wrong_type", f"`loss` must be a callable `loss(batch) -> scalar`. Received: loss={loss!r}",
                              loss)

    if distributed is None:
        if on_horovod:
            # The Horovod backend is the distributed layer's, above this one: its caller makes it.
            raise ParamError.said(
                "distributed", "missing",
                "`on_horovod=True` needs the Horovod backend passed in: "
                "`distributed=opt_train.distributed.get_backend(\"horovod\")`. Received: distributed=None",
            )
        distributed = SingleProcess()
    # Under tf.distribute a Keras optimizer keeps the strategy it was made under, and the
    # scaler's variables become mirrored ones.
    with distributed.scope():
        scaler = get_loss_scaler(loss_scaling, loss_scaling_params)
        opt = make_optimizer(optimizer, optimizer_params, learning_rate_decay_fn)
        if needs_master_weights(dtype):
            opt = MixedPrecisionOptimizerWrapper(opt)
        if groups:
            opt = _grouped(groups, optimizer, optimizer_params, learning_rate_decay_fn, opt, dtype)
        if distributed.mesh is not None:
            from opt_train.optimizers.mesh_state import mesh_aware

            opt = mesh_aware(opt, distributed.mesh)  # its state: DVariables laid out as their variables
    pipeline = build_pipeline(
        scaler, distributed, iter_size=iter_size, clip_gradients=clip_gradients, larc_params=larc_params,
        inserted=inserted, on_nonfinite=on_nonfinite, max_consecutive_overflows=max_consecutive_overflows,
        iter_size_mode=iter_size_mode, rate_multipliers=opt.multipliers if groups else None,
    )
    return TrainOp(
        loss, opt, pipeline, distributed, var_list, count_skipped_updates=count_skipped_updates,
        freeze_variables_regex=freeze_variables_regex, summaries=summaries, jit_compile=jit_compile,
    )


def _checked_groups(optimizer_groups, optimizer, optimizer_params):
    """The groups checked by the config layer's rules (`grouping`); the first problem raised."""
    groups, errors = grouping.check_groups(optimizer_groups)
    if groups and not isinstance(optimizer, str):
        raise ParamError.at(grouping.KEY, "conflict", "needs `optimizer` by name (a group without its own "
                            f"optimizer copies it with its parameters). Received: optimizer={optimizer!r}")
    errors = errors or grouping.param_errors(groups, optimizer, optimizer_params)
    if errors:
        raise errors[0]
    return groups


def _grouped(groups, optimizer, optimizer_params, learning_rate_decay_fn, default, dtype):
    """`OptimizerGroups`: a group's optimizer made as the top-level one is, at the run's rate times its multiplier."""
    schedule = _as_schedule(learning_rate_decay_fn)
    rate = schedule
    if rate is None:
        given = (optimizer_params or {}).get("learning_rate")
        inner = getattr(default, "optimizer", default)  # the wrapped one under float16
        rate = float(given) if given is not None else float(keras.ops.convert_to_numpy(inner.learning_rate))
    made = []
    for group in groups:
        name, params = grouping.settings(group, optimizer, optimizer_params)
        params["learning_rate"] = group_rate(rate, group["lr_multiplier"])
        made_one = registry.get(name, **params)
        made.append(MixedPrecisionOptimizerWrapper(made_one) if needs_master_weights(dtype) else made_one)
    return OptimizerGroups(groups, made, default, rate)
