"""Keras habits: every loss and metric spelling `compile` accepts, and models that end in softmax."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.losses import ALL_OBJECTS_DICT as KERAS_LOSSES
from keras.src.metrics import ALL_OBJECTS_DICT as KERAS_METRICS

from opt_train.data import Task
from opt_train.data.objective_names import LOSS_ALIASES, METRIC_ALIASES, resolve_loss, resolve_metric
from opt_train.data.objectives import make_loss, make_metric, match_output
from opt_train.models.output import probability_output

CLASSIFY = Task("classification", (3,), 4, num_classes=4)
LABELS = np.array([0, 3, 1, 1, 2, 0])
LOGITS = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)


def _builds_from_name(get, name):
    try:
        return get(name)
    except (TypeError, ValueError):  # abstract bases, or a class that needs e.g. num_classes
        return None


@pytest.mark.parametrize("name", sorted(KERAS_METRICS))
def test_every_metric_keras_builds_by_name_is_accepted_as_the_same_metric(name):
    reference = _builds_from_name(keras.metrics.get, name)
    if not isinstance(reference, keras.metrics.Metric) or type(reference) in (
        keras.metrics.Metric, keras.metrics.Mean, keras.metrics.Sum, keras.metrics.MeanMetricWrapper
    ):
        pytest.skip(f"{name}: not a metric keras builds from its name alone")
    ours = make_metric(resolve_metric(name), CLASSIFY)
    if resolve_metric(name) == "accuracy":  # Keras's compile too picks the sparse one for class ids
        assert isinstance(ours, keras.metrics.SparseCategoricalAccuracy)
    else:
        assert type(ours) is type(reference), name


@pytest.mark.parametrize("name", sorted(KERAS_LOSSES))
def test_every_loss_keras_builds_by_name_is_accepted_as_the_same_loss(name):
    reference = _builds_from_name(keras.losses.get, name)
    fn = getattr(reference, "fn", reference)
    if not callable(fn) or inspect.isclass(reference) or name in ("Loss", "LossFunctionWrapper"):
        pytest.skip(f"{name}: not a loss keras builds from its name alone")
    ours = make_loss(resolve_loss(name), {})
    assert ours.fn is fn, name


COMPILE_STRINGS = ["acc", "accuracy", "ce", "crossentropy", "bce", "mse", "mae", "mape", "msle", "kld", "logcosh",
                   "AUC", "MeanSquaredError", "SparseCategoricalAccuracy"]


def test_compile_strings_keras_accepts_are_accepted():
    """Each string goes through Keras's own compile-time lookup first (class ids against 4 outputs)."""
    from keras.src.trainers.compile_utils import get_loss, get_metric

    y_true, y_pred = tf.constant(LABELS), tf.constant(LOGITS)
    accepted = {"metric": 0, "loss": 0}
    for name in COMPILE_STRINGS:
        try:
            reference = get_metric(name, y_true, y_pred)
        except ValueError:
            reference = None
        if reference is not None:
            accepted["metric"] += 1
            ours = make_metric(resolve_metric(name), CLASSIFY)
            assert type(ours) is type(reference), name
        try:
            reference = get_loss(name, y_true, y_pred)
        except ValueError:
            continue
        accepted["loss"] += 1
        assert make_loss(resolve_loss(name), {}).fn is getattr(reference, "fn", reference), name
    assert accepted["metric"] >= 10 and accepted["loss"] >= 9, accepted
    assert resolve_metric("logcosh") == "log_cosh_error" and set(LOSS_ALIASES) and set(METRIC_ALIASES)


def test_crossentropy_metric_reads_logits_by_default_and_probabilities_after_softmax():
    metric = make_metric("sparse_categorical_crossentropy", CLASSIFY)
    metric.update_state(LABELS, LOGITS)
    expected = keras.losses.sparse_categorical_crossentropy(LABELS, LOGITS, from_logits=True).numpy().mean()
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5)


def test_softmax_output_is_found_and_scored_with_the_probability_loss():
    from tests.models.probability_models import sigmoid_mlp, softmax_mlp

    model = softmax_mlp(CLASSIFY)
    assert probability_output(model) == ("probs", "softmax")
    assert probability_output(sigmoid_mlp(CLASSIFY)) == ("scores", "sigmoid")
    task = match_output(CLASSIFY, probability_output(model))
    probs = tf.nn.softmax(LOGITS).numpy()
    expected = keras.losses.sparse_categorical_crossentropy(LABELS, probs).numpy().mean()
    np.testing.assert_allclose(task.loss(LABELS, probs).numpy(), expected, rtol=1e-5)
    named = match_output(CLASSIFY, ("probs", "softmax"), "sparse_categorical_crossentropy", {})
    np.testing.assert_allclose(named.loss(LABELS, probs).numpy(), expected, rtol=1e-5)
    with pytest.raises(ValueError, match="'probs' ends in softmax.*from_logits: true would apply it twice") as caught:
        match_output(CLASSIFY, ("probs", "softmax"), "sparse_categorical_crossentropy", {"from_logits": True})
    assert caught.value.key == "loss_params.from_logits"


@pytest.mark.slow
def test_a_softmax_model_trains_and_a_sigmoid_one_is_refused_naming_the_layer(cli, write_config, tmp_path):
    common = {"data": "synthetic_classification", "max_steps": 150, "eval_steps": 150,
              "optimizer_params": {"learning_rate": 0.01}}
    result = cli("train", "--config", write_config(
        {**common, "model": {"factory": "tests.models.probability_models:softmax_mlp"}}))
    assert result.exit_code == 0, result.output
    import json

    final = json.loads((tmp_path / "run" / "final_metrics.json").read_text())
    assert final["eval/accuracy"] > 0.8 and final["train/loss"] < 0.5, final  # from_logits on softmax sticks near 1.2
    result = cli("train", "--config", write_config(
        {**common, "model": {"factory": "tests.models.probability_models:sigmoid_mlp"},
         "logdir": str(tmp_path / "sig")}, "sig.yaml"))
    assert result.exit_code == 2
    assert "'scores' ends in sigmoid" in result.output and "End the model in softmax" in result.output
    assert "Traceback" not in result.output
