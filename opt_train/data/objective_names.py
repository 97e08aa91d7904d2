"""The loss and metric names a config may give (Keras's own registry names), checked without TensorFlow.

`tests/data/test_objectives.py` checks each name against Keras (`keras.losses.get`,
`keras.metrics.get`), so these lists cannot drift from the installed Keras unnoticed.
"""

from __future__ import annotations

from opt_train.suggest import UnknownNameError

LOSS_NAMES = (
    "binary_crossentropy", "bce", "binary_focal_crossentropy", "categorical_crossentropy",
    "categorical_focal_crossentropy", "categorical_hinge", "circle", "cosine_similarity", "ctc", "dice",
    "hinge", "huber", "kl_divergence", "kld", "log_cosh", "mean_absolute_error", "mae",
    "mean_absolute_percentage_error", "mape", "mean_squared_error", "mse", "mean_squared_logarithmic_error",
    "msle", "poisson", "sparse_categorical_crossentropy", "squared_hinge", "tversky",
)

# Metrics Keras builds from the name alone (those needing e.g. `num_classes` or a
# target recall are left out: their constructor has no default for it).
METRIC_NAMES = (
    "accuracy", "auc", "bce", "binary_accuracy", "binary_crossentropy", "binary_io_u", "categorical_accuracy",
    "categorical_crossentropy", "categorical_hinge", "concordance_correlation", "cosine_similarity", "f1_score",
    "f_beta_score", "false_negatives", "false_positives", "hinge", "kl_divergence", "log_cosh_error", "mae",
    "mape", "mean_absolute_error", "mean_absolute_percentage_error", "mean_squared_error",
    "mean_squared_logarithmic_error", "mse", "msle", "pearson_correlation", "poisson", "precision", "r2_score",
    "recall", "root_mean_squared_error", "sparse_categorical_accuracy", "sparse_categorical_crossentropy",
    "sparse_top_k_categorical_accuracy", "squared_hinge", "top_k_categorical_accuracy", "true_negatives",
    "true_positives",
)


def resolve_loss(name):
    """`name` in Keras's spelling (case ignored); raises UnknownNameError with the closest name."""
    if isinstance(name, str) and name.lower() in LOSS_NAMES:
        return name.lower()
    raise UnknownNameError("loss", name, LOSS_NAMES)


def resolve_metric(name):
    """`name` in Keras's spelling (case ignored); raises UnknownNameError with the closest name."""
    if isinstance(name, str) and name.lower() in METRIC_NAMES:
        return name.lower()
    raise UnknownNameError("metric", name, METRIC_NAMES)
