"""The loss and metric names a config may give (every spelling Keras's `compile` accepts), checked without TensorFlow.

`tests/data/test_objectives.py` checks each name against Keras (`keras.losses.get`,
`keras.metrics.get`), so these lists cannot drift from the installed Keras unnoticed.
"""

from __future__ import annotations

from opt_train.errors import ParamError
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


# The metrics that read what a classification or sequence evaluation feeds every metric: class ids
# (one per example or position) against per-class scores. The others read one-hot or binary labels
# of the prediction's own shape: on class ids they fail at the first evaluation (auc, f1_score) or
# report another figure (categorical_accuracy); regression's targets have the prediction's shape.
CLASS_ID_METRICS = ("accuracy", "sparse_categorical_accuracy", "sparse_categorical_crossentropy",
                    "sparse_top_k_categorical_accuracy")


def loss_fit_problem(name, kind):
    """Why loss `name` (a registry name) cannot score the output of a model opt-train builds (a built-in, a
    `keras_application` with opt-train's head) for a `kind` task, or None: classification and sequence models
    output per-class logits against class ids, which only the sparse
    categorical cross-entropy reads (the others fail at the first step); a regression's targets are not ids."""
    if kind in ("classification", "sequence") and name != "sparse_categorical_crossentropy":
        return (f"reads labels of the prediction's shape, but the model opt-train builds for a {kind} task outputs "
                "per-class logits against class ids, which only sparse_categorical_crossentropy reads")
    if kind == "regression" and name == "sparse_categorical_crossentropy":
        return "reads class ids, but a regression's targets have the prediction's shape"
    return None


def metric_fit_problem(name, kind):
    """Why metric `name` (a registry name) cannot score a `kind` task's evaluation, or None."""
    if kind in ("classification", "sequence") and name not in CLASS_ID_METRICS:
        return (f"reads one-hot or binary labels, but a {kind} evaluation gives class ids against per-class "
                f"scores; metrics that read class ids: {', '.join(CLASS_ID_METRICS)}")
    if kind == "regression" and name in CLASS_ID_METRICS[1:]:
        return "reads class ids, but a regression evaluation gives targets of the prediction's shape"
    return None


# What `Model.compile` accepts beyond the registry names, as a Keras user writes them:
# the compile-time strings Keras maps by the labels' shape (opt-train's labels are class
# ids, so the sparse class is the one Keras would pick) and Keras 2 spellings.
LOSS_ALIASES = {"ce": "sparse_categorical_crossentropy", "crossentropy": "sparse_categorical_crossentropy",
                "kullback_leibler_divergence": "kl_divergence"}
METRIC_ALIASES = {"acc": "accuracy", "ce": "sparse_categorical_crossentropy",
                  "crossentropy": "sparse_categorical_crossentropy", "kld": "kl_divergence",
                  "logcosh": "log_cosh_error", "log_cosh": "log_cosh_error", "rmse": "root_mean_squared_error"}


def _key(name):
    """Spelling-free key: `MeanSquaredError`, `mean_squared_error` and `MEAN-SQUARED-ERROR` are one name."""
    return name.lower().replace("_", "").replace("-", "")


def _table(names, aliases):
    table = {_key(name): name for name in names}  # class names (`LogCosh`, `AUC`) meet their snake names here
    table.update({_key(alias): target for alias, target in aliases.items()})
    return table


_LOSSES = _table(LOSS_NAMES, LOSS_ALIASES)
_METRICS = _table(METRIC_NAMES, METRIC_ALIASES)


def resolve_loss(name):
    """The registry name of a loss as Keras's `compile` accepts it (class name, snake name, alias; any case)."""
    if isinstance(name, str) and _key(name) in _LOSSES:
        return _LOSSES[_key(name)]
    raise UnknownNameError("loss", name, LOSS_NAMES + tuple(LOSS_ALIASES))


def resolve_metric(name):
    """The registry name of a metric as Keras's `compile` accepts it (class name, snake name, alias; any case)."""
    if isinstance(name, str) and _key(name) in _METRICS:
        return _METRICS[_key(name)]
    raise UnknownNameError("metric", name, METRIC_NAMES + tuple(METRIC_ALIASES))


# Which way each figure an evaluation reports gets better, as Keras 3's callbacks decide it in
# `mode="auto"` (keras/src/callbacks/monitor_callback.py `_set_monitor_op`): `loss` is minimised,
# any other metric goes the way its own `_direction` says ("up": maximised), and a metric without
# one (the confusion counts) is refused. Keyed by the registry names `resolve_metric` gives;
# `tests/data/test_objectives.py` holds both sets to each metric's `_direction`. `perplexity`,
# exp(loss), is opt-train's own figure and goes the loss's way.
HIGHER_IS_BETTER = frozenset({
    "accuracy", "auc", "binary_accuracy", "binary_io_u", "categorical_accuracy", "concordance_correlation",
    "cosine_similarity", "f1_score", "f_beta_score", "pearson_correlation", "precision", "r2_score", "recall",
    "sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy", "top_k_categorical_accuracy",
})
LOWER_IS_BETTER = frozenset({
    "loss", "perplexity", "bce", "binary_crossentropy", "categorical_crossentropy", "categorical_hinge", "hinge",
    "kl_divergence", "log_cosh_error", "mae", "mape", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_error", "mean_squared_logarithmic_error", "mse", "msle", "poisson", "root_mean_squared_error",
    "sparse_categorical_crossentropy", "squared_hinge",
})
# `early_stopping.mode` / `lr_control.monitor_mode`: Keras's `mode` of EarlyStopping and ReduceLROnPlateau.
MONITOR_MODES = ("auto", "min", "max")


def monitor_direction(monitor, mode="auto"):
    """"min" or "max": which way `monitor` improves under `mode` (Keras's rule for "auto").

    Raises:
        ParamError: `mode` is "auto" and the metric has no direction (Keras refuses it too).
    """
    if mode in ("min", "max"):
        return mode
    if monitor in LOWER_IS_BETTER:
        return "min"
    if monitor in HIGHER_IS_BETTER:
        return "max"
    text = f"cannot tell whether {monitor!r} is better higher or lower (nor can Keras's mode auto); give min or max"
    raise ParamError("mode", "conflict", text, mode, text=text)
