"""Evaluation: the task's metrics over the eval split, and `opt-train eval` on a checkpoint."""

from __future__ import annotations

import contextlib

import tensorflow as tf

from opt_train.training.errors import RunRefused, TrainingFailed


def uses_ema(optimizer):
    """Whether `optimizer` keeps Keras's moving average of the weights (`use_ema: true`)."""
    return bool(getattr(optimizer, "use_ema", False))


@contextlib.contextmanager
def averaged_weights(optimizer):
    """Inside: the trained variables hold the optimizer's moving averages (`use_ema`); after: their own values again.

    Keras applies the averages only in `finalize_variable_values`, for good; a run
    that goes on training needs them back, so the raw values are kept and restored.
    The pairs are Keras's own (`_overwrite_model_variables_with_average_value`).
    """
    if not uses_ema(optimizer) or not getattr(optimizer, "built", False):
        yield False
        return
    pairs = [(variable, average) for variable, average in
             zip(optimizer._trainable_variables, optimizer._model_variables_moving_average) if average is not None]
    raw = [tf.identity(variable) for variable, _ in pairs]
    for variable, average in pairs:
        variable.assign(average)
    try:
        yield True
    finally:
        for (variable, _), value in zip(pairs, raw):
            variable.assign(value)


class Evaluator:
    """Runs the model over the eval split with a compiled step; returns plain floats.

    With an `optimizer` that keeps an EMA of the weights (`use_ema`), it evaluates the averages.
    """

    def __init__(self, model, data, jit_compile=False, optimizer=None):
        self.model = model
        self.optimizer = optimizer
        self.uses_ema = uses_ema(optimizer)
        self.dataset = data.eval
        self.task = data.task
        self.metrics = data.task.make_metrics()
        self._step = tf.function(self._update, jit_compile=jit_compile, reduce_retracing=True)

    def _update(self, features, labels, sample_weight=None):
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
        with averaged_weights(self.optimizer):
            for batch in self.dataset:  # (x, y) or, from a data factory, (x, y, sample_weight)
                self._step(*batch)
        results = {name: float(metric.result()) for name, metric in self.metrics.items()}
        return self.task.finalize(results)


def evaluate(config, checkpoint=None, report=None):
    """Evaluates `checkpoint` (default: the newest in logdir that restores) and returns the metrics.

    `report(line)` hears which checkpoint was evaluated and each newer one passed over, with why.
    """
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.checkpoints import Checkpoints, resolve_checkpoint

    if checkpoint is None and config.restore_best_checkpoint:
        from opt_train.training.controls import best_checkpoint

        # OpenSeq2Seq's restore_best_checkpoint: the best eval loss, not the latest.
        checkpoint = best_checkpoint(config.logdir)
        if checkpoint is None:
            raise RunRefused(f"no best checkpoint in {config.logdir}/best (restore_best_checkpoint)")
    # An unusable argument, or no checkpoint at all, is refused before anything is built.
    found = resolve_checkpoint(checkpoint, config.logdir)
    path = found if checkpoint is not None else None  # None: the newest that restores
    run = build_run(config, get_backend(), with_train_op=False)
    if run.data.eval is None:  # a TFRecord source without eval_files, a factory without an eval split
        raise TrainingFailed(f"{config.data} has no eval split to evaluate on")
    checkpoints = Checkpoints(config.logdir, {"model": run.model}, step=None, max_to_keep=1, writer=False)
    # Every weight of the model must come from the checkpoint: a partial match is refused.
    restored = checkpoints.restore(path, whole=False)
    if report is not None:
        for note in checkpoints.notes:
            report(note)
        report(f"evaluating {restored}")
    results = Evaluator(run.model, run.data, jit_compile=config.jit_compile)()
    return {"checkpoint": restored, **{f"eval/{k}": v for k, v in results.items()}}
