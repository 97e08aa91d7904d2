"""Evaluation: the task's metrics over the eval split, and `opt-train eval` on a checkpoint."""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from opt_train.optimizers.train_op import nonfinite_check
from opt_train.training.errors import RunRefused, TrainingFailed, listed


def uses_ema(optimizer):
    """Whether `optimizer` keeps Keras's moving average of the weights (`use_ema: true`)."""
    return bool(getattr(optimizer, "use_ema", False))


def weights_note(averaged):
    """What a line about evaluated or exported weights ends with: ` (EMA weights)` when they are the averages."""
    return " (EMA weights)" if averaged else ""


def restore_run(config, path=None, raw_weights=False, report=None):
    """The config's run with the weights of checkpoint `path` (None: the newest in logdir that restores).

    For `eval`, `export` and `predict` from a checkpoint. With `use_ema` in
    `optimizer_params` (and not `raw_weights`) the run has its optimizer too, restored
    with the moving averages the checkpoint holds beside the raw weights; the caller
    uses the model under `averaged_weights(optimizer)` or after
    `finalize_averages(optimizer)`, as the run's own evaluations and export do (Keras's
    `fit()` ends with `finalize_variable_values`). Without them the optimizer is None.
    `report(line)` hears each newer checkpoint passed over, with why.

    Returns:
        `(run, restored_path, optimizer)`.
    """
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.checkpoints import Checkpoints

    averaged = bool(dict(config.optimizer_params).get("use_ema", False)) and not raw_weights
    run = build_run(config, get_backend(), with_train_op=averaged)
    optimizer = run.train_op.optimizer if averaged else None
    items = {"model": run.model, **({"optimizer": optimizer} if averaged else {})}
    checkpoints = Checkpoints(
        config.logdir, items, step=None, max_to_keep=1, writer=False,
        refused_hint=f"Give the config of the run that wrote them: {os.path.join(config.logdir, 'config.yaml')}",
    )
    try:
        # Every weight of the model (and average, with use_ema) must come from the
        # checkpoint: a checkpoint of another model must not half-load silently.
        restored = checkpoints.restore(path, whole=False)
    except RunRefused as error:
        if not averaged:
            raise
        raise RunRefused(f"{error} (optimizer_params.use_ema: the averaged weights are read from the "
                         "checkpoint's optimizer state; --raw-weights reads the model's own weights)") from None
    if report is not None:
        for note in checkpoints.notes:
            report(note)
    # A model with such weights evaluates (oneDNN's ReLU turns NaN into 0) to figures that mean nothing.
    named = listed(nonfinite_check([*run.model.weights, *(optimizer.variables if averaged else [])])())
    if named:
        raise TrainingFailed(f"{restored} holds {named} not finite: it cannot be evaluated, exported or predicted with")
    return run, restored, optimizer


def _average_pairs(optimizer):
    """`[(variable, its moving average)]` of an optimizer that keeps them (Keras's own pairing); else [].

    Under optimizer groups (`OptimizerGroups.optimizers`), every group's optimizer's pairs.
    """
    if not uses_ema(optimizer) or not getattr(optimizer, "built", False):
        return []
    if isinstance(getattr(optimizer, "optimizers", None), list):
        return [pair for inner in optimizer.optimizers for pair in _average_pairs(inner)]
    return [(variable, average) for variable, average in
            zip(optimizer._trainable_variables, optimizer._model_variables_moving_average) if average is not None]


@contextlib.contextmanager
def averaged_weights(optimizer):
    """Inside: the trained variables hold the optimizer's moving averages (`use_ema`); after: their own values again.

    Keras applies the averages only in `finalize_variable_values`, for good; a run
    that goes on training needs them back, so the raw values are kept and restored.
    The pairs are Keras's own (`_overwrite_model_variables_with_average_value`).
    """
    pairs = _average_pairs(optimizer)
    if not pairs:
        yield False
        return
    raw = [tf.identity(variable) for variable, _ in pairs]
    for variable, average in pairs:
        variable.assign(average)
    try:
        yield True
    finally:
        for (variable, _), value in zip(pairs, raw):
            variable.assign(value)


def finalize_averages(optimizer):
    """The trained variables take the optimizer's moving averages for good (Keras's `finalize_variable_values`).

    For a model that is only used from here on (`export`, `predict` from a checkpoint).
    Returns whether there were averages to take.
    """
    pairs = _average_pairs(optimizer)
    for variable, average in pairs:
        variable.assign(average)
    return bool(pairs)


def _one_trace(dataset):
    """tf.function options under which the eval step traces once for all of `dataset`'s batches.

    The eval split is batched with its last batch short, so an exact first trace would be
    followed by a second, relaxed one for that batch (about a third of a small model's
    evaluation). The dataset's own element spec already leaves the batch size open.
    """
    spec = getattr(dataset, "element_spec", None)
    if isinstance(spec, tuple):  # (x, y) or (x, y, sample_weight): the step's arguments
        return {"input_signature": spec}
    return {"reduce_retracing": True}


class Evaluator:
    """Runs the model over the eval split with a compiled step; returns plain floats.

    With an `optimizer` that keeps an EMA of the weights (`use_ema`), it evaluates the averages.
    """

    def __init__(self, model, data, jit_compile=False, optimizer=None, backend=None):
        self.model = model
        self.optimizer = optimizer
        self.uses_ema = uses_ema(optimizer)
        self.dataset = data.eval
        self.task = data.task
        # On a mesh (`opt_train.distributed.mesh`): the metrics' state is replicated DVariables
        # and each batch is laid out whole on every device (a short last batch need not divide).
        self._mesh = backend if backend is not None and backend.mesh is not None else None
        # A mesh across workers: the chief evaluates alone, so on plain whole copies of the weights
        # (`backend.unsharded`), running no DTensor op the other workers do not run too.
        self._unsharded = None
        if self._mesh is not None and backend.num_workers > 1:
            self._unsharded, self._mesh = backend.unsharded, None
        with backend.scope() if self._mesh else contextlib.nullcontext():
            self.metrics = data.task.make_metrics()
        trace = {"reduce_retracing": True} if self._mesh else _one_trace(self.dataset)
        self._step = tf.function(self._update, jit_compile=jit_compile, autograph=False, **trace)

    def _update(self, features, labels, sample_weight=None):
        with self._mesh.forward() if self._mesh else contextlib.nullcontext():
            predictions = self.model(features, training=False)
        for name, metric in self.metrics.items():
            if name == "loss":
                # Weighted by batch size, so a short last batch counts for what it holds.
                metric.update_state(
                    self.task.loss(labels, predictions, sample_weight=sample_weight),
                    sample_weight=tf.shape(labels)[0],
                )
            else:
                metric.update_state(labels, predictions, sample_weight=sample_weight)

    def __call__(self):
        for metric in self.metrics.values():
            metric.reset_state()
        with averaged_weights(self.optimizer), (
                self._unsharded(self.model.variables) if self._unsharded else contextlib.nullcontext()):
            for batch in self.dataset:  # (x, y) or, from a data factory, (x, y, sample_weight)
                self._step(*(self._mesh.place_replicated(batch) if self._mesh else batch))
        results = {name: float(metric.result()) for name, metric in self.metrics.items()}
        return self.task.finalize(results)


def evaluate(config, checkpoint=None, report=None, raw_weights=False):
    """Evaluates `checkpoint` (default: the newest in logdir that restores) and returns the metrics.

    With `use_ema` the averaged weights are evaluated, unless `raw_weights` (see `restore_run`).
    `report(line)` hears which checkpoint was evaluated, with which weights, and each
    newer one passed over, with why.
    """
    from opt_train.training.builder import dtype_policy_kept, graph_refusals
    from opt_train.training.checkpoints import resolve_checkpoint

    if checkpoint is None and config.restore_best_checkpoint:
        from opt_train.training.controls import best_checkpoint

        # OpenSeq2Seq's restore_best_checkpoint: the best evaluation (early stopping's monitor, else loss).
        checkpoint = best_checkpoint(config.logdir)
        if checkpoint is None:
            raise RunRefused(f"no best checkpoint in {config.logdir}/best (restore_best_checkpoint)")
    # An unusable argument, or no checkpoint at all, is refused before anything is built.
    found = resolve_checkpoint(checkpoint, config.logdir)
    path = found if checkpoint is not None else None  # None: the newest that restores
    with dtype_policy_kept():
        run, restored, optimizer = restore_run(config, path, raw_weights, report)
        if run.data.eval is None:  # a TFRecord source without eval_files, a factory without an eval split
            raise TrainingFailed(f"{config.named('data')} has no eval split to evaluate on")
        if report is not None:
            report(f"evaluating {restored}{weights_note(uses_ema(optimizer))}")
        with graph_refusals(config):
            results = Evaluator(run.model, run.data, jit_compile=config.jit_compile, optimizer=optimizer)()
    return {"checkpoint": restored, **{f"eval/{k}": v for k, v in results.items()}}
