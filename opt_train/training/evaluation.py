"""Evaluation: the task's metrics over the eval split, and `opt-train eval` on a checkpoint."""

from __future__ import annotations

import tensorflow as tf


class Evaluator:
    """Runs the model over the eval split with a compiled step; returns plain floats."""

    def __init__(self, model, data, jit_compile=False):
        self.model = model
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
        for batch in self.dataset:  # (x, y) or, from a data factory, (x, y, sample_weight)
            self._step(*batch)
        results = {name: float(metric.result()) for name, metric in self.metrics.items()}
        return self.task.finalize(results)


def evaluate(config, checkpoint=None):
    """Evaluates `checkpoint` (default: the latest in logdir) and returns the metrics."""
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.checkpoints import Checkpoints
    from opt_train.training.errors import TrainingFailed

    run = build_run(config, get_backend(False), with_train_op=False)
    if run.data.eval is None:  # a TFRecord source without eval_files, a factory without an eval split
        raise TrainingFailed(f"{config.data} has no eval split to evaluate on")
    checkpoints = Checkpoints(config.logdir, {"model": run.model}, step=None, max_to_keep=1, writer=False)
    restored = checkpoints.restore(checkpoint)
    if restored is None:
        raise TrainingFailed(f"no checkpoint to evaluate in {checkpoints.directory}")
    results = Evaluator(run.model, run.data, jit_compile=config.jit_compile)()
    return {"checkpoint": restored, **{f"eval/{k}": v for k, v in results.items()}}
