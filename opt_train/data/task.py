"""What a dataset asks of a model: task kind, shapes, the loss, and the evaluation metrics.

Importing this module pulls in no TensorFlow; `loss` and `make_metrics` import it when
called. The metrics from `make_metrics` are updated alike for every task: `loss` (a
`keras.metrics.Mean`) with `update_state(task.loss(y_true, y_pred), sample_weight=batch_size)`,
every other one with `update_state(y_true, y_pred)`, so the loop needs no per-task branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from opt_train.errors import ParamError

TASK_KINDS = ("classification", "regression", "sequence")

# What every evaluation reports by task kind, beside `loss` and the config's `metrics`
# (`make_metrics` builds them, `finalize` adds the derived ones): the names `early_stopping`
# and `lr_control` may monitor, known to `validate` through `eval_metric_names`.
TASK_METRICS = {"classification": ("accuracy",), "sequence": ("accuracy",), "regression": ("mse", "mae")}
DERIVED_METRICS = {"sequence": ("perplexity",)}


def eval_metric_names(kind, metric_names=()):
    """The names of the figures an evaluation of a `kind` task reports with `metrics: metric_names` (registry names)."""
    names = ["loss", *TASK_METRICS[kind]]
    names += [name for name in metric_names if name not in names]
    return tuple(names + [name for name in DERIVED_METRICS.get(kind, ()) if name not in names])


@dataclass(frozen=True)
class Task:
    """The contract between a dataset and a model.

    Attributes:
        kind: "classification", "regression" or "sequence" (a label per position).
        input_shape: shape of one example's input, e.g. `(64,)` or `(8,)` tokens.
        output_dim: model outputs per example (classification), per position
            (sequence: `vocab_size`), or regression targets.
        input_dtype: "float32" for features, "int32" for token ids.
        num_classes: classes of a classification task, else None.
        vocab_size: tokens of a sequence task, else None.
        image_shape: `(height, width, channels)` a flat input can be reshaped to, or None.
    """

    kind: str
    input_shape: Tuple[int, ...]
    output_dim: int
    input_dtype: str = "float32"
    num_classes: Optional[int] = None
    vocab_size: Optional[int] = None
    image_shape: Optional[Tuple[int, ...]] = None
    # The config's `loss` (a keras.losses.Loss) and `metrics` (Keras names), when it gives them.
    loss_object: Any = field(default=None, compare=False)
    metric_names: Tuple[str, ...] = ()
    # The user's own label values by class id (`labels[i]` is what class i was written as),
    # and the input standardisation the data applied (`data.normalization.Statistics`):
    # the export puts both back around the model, so it takes raw rows and answers in labels.
    labels: Optional[Tuple[Any, ...]] = field(default=None, compare=False)
    # False when the model's output is already a probability (a softmax last layer):
    # the default loss and the crossentropy metrics then read probabilities.
    from_logits: bool = True
    normalization: Any = field(default=None, compare=False)
    # The training CSV's header (every column, the label's too), or None: `predict` and
    # whoever serves the export (`data.json`) map a CSV's columns by these names.
    columns: Optional[Tuple[str, ...]] = field(default=None, compare=False)

    def __post_init__(self):
        if self.kind not in TASK_KINDS:
            raise ParamError.said("kind", "unknown_name", f"`kind` must be one of {TASK_KINDS}. Received: kind={self.kind!r}",
                                  self.kind)

    def loss(self, y_true, y_pred, sample_weight=None):
        """Mean loss over the batch (and positions) as a float32 scalar.

        Classification and sequence: sparse softmax cross-entropy of the logits
        `y_pred` (of the probabilities when `from_logits` is False) against integer labels. Regression: mean squared error. With
        `sample_weight` (one number per example) each example's loss is weighted and
        the sum divided by the batch size, as Keras's "sum_over_batch_size": so
        micro-batches and ranks averaged equal one big batch.
        """
        import tensorflow as tf

        y_pred = tf.cast(y_pred, tf.float32)
        if self.loss_object is not None:
            return tf.cast(self.loss_object(y_true, y_pred, sample_weight=sample_weight), tf.float32)
        if self.kind == "regression":
            y_true = tf.cast(y_true, tf.float32)
            squared = tf.math.squared_difference(y_pred, y_true)
            if sample_weight is None:
                return tf.reduce_mean(squared)
            per_example = tf.reduce_mean(tf.reshape(squared, [tf.shape(squared)[0], -1]), axis=1)
        else:
            labels = tf.cast(y_true, tf.int32)
            if self.from_logits:
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=y_pred)
            else:
                import keras

                per_example = keras.losses.sparse_categorical_crossentropy(labels, y_pred, from_logits=False)
            if sample_weight is None:
                return tf.reduce_mean(per_example)
            per_example = tf.reshape(per_example, [tf.shape(per_example)[0], -1])
            per_example = tf.reduce_mean(per_example, axis=1)
        return tf.reduce_mean(per_example * tf.cast(tf.reshape(sample_weight, [-1]), tf.float32))

    def make_metrics(self):
        """Fresh metrics by name.

        `loss`: a `keras.metrics.Mean` of `self.loss` per batch, weighted by the batch
        size. The rest take `update_state(y_true, y_pred)`: `accuracy` (per example, or
        per token for sequences), or for regression `mse` and `mae`; then each of
        `metric_names` not among them, from Keras's registry.
        """
        import keras

        builders = {
            "accuracy": keras.metrics.SparseCategoricalAccuracy,
            "mse": keras.metrics.MeanSquaredError,
            "mae": keras.metrics.MeanAbsoluteError,
        }
        metrics = {"loss": keras.metrics.Mean(name="loss")}
        metrics.update({name: builders[name](name=name) for name in TASK_METRICS[self.kind]})
        if self.metric_names:
            from opt_train.data.objectives import make_metric

            for name in self.metric_names:
                metrics.setdefault(name, make_metric(name, self))
        return metrics

    def finalize(self, results):
        """`results` as plain floats, plus derived figures: `perplexity` = exp(loss) for sequences."""
        final = {name: float(value) for name, value in results.items()}
        if "perplexity" in DERIVED_METRICS.get(self.kind, ()) and "loss" in final:
            final["perplexity"] = math.exp(min(final["loss"], 700.0))  # exp overflows past ~709
        return final
