"""Losses and metrics by name: the same figures as Keras's own on the same batch, in float32, weighted."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.data import Task
from opt_train.data.objective_names import LOSS_NAMES, METRIC_NAMES
from opt_train.data.objectives import make_loss, with_objectives
from tests.support import read_json, read_jsonl

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(6, 4)).astype(np.float32)
LABELS = np.array([0, 3, 1, 1, 2, 0])
WEIGHTS = np.array([0.5, 1.0, 2.0, 0.0, 1.5, 1.0], np.float32)
TARGETS = RNG.normal(size=(6, 2)).astype(np.float32)
PREDICTIONS = RNG.normal(size=(6, 2)).astype(np.float32)
CLASSIFY = Task("classification", (3,), 4, num_classes=4)
REGRESS = Task("regression", (3,), 2)


def test_every_name_is_in_the_keras_registries():
    for name in LOSS_NAMES:
        assert callable(keras.losses.get(name)), name
    for name in METRIC_NAMES:
        assert isinstance(keras.metrics.get(name), keras.metrics.Metric), name


@pytest.mark.parametrize("name, params, task, y, p, reference", [
    ("sparse_categorical_crossentropy", {"from_logits": True}, CLASSIFY, LABELS, LOGITS,
     lambda y, p: keras.losses.get("sparse_categorical_crossentropy")(y, p, from_logits=True)),
    ("sparse_categorical_crossentropy", {}, CLASSIFY, LABELS, LOGITS,  # from_logits defaults to true
     lambda y, p: keras.losses.get("sparse_categorical_crossentropy")(y, p, from_logits=True)),
    ("huber", {"delta": 0.5}, REGRESS, TARGETS, PREDICTIONS, lambda y, p: keras.losses.get("huber")(y, p, delta=0.5)),
    ("mse", {}, REGRESS, TARGETS, PREDICTIONS, lambda y, p: keras.losses.get("mse")(y, p)),
    ("log_cosh", {}, REGRESS, TARGETS, PREDICTIONS, lambda y, p: keras.losses.get("log_cosh")(y, p)),
])
def test_losses_equal_keras_functions_on_the_same_batch(name, params, task, y, p, reference):
    task = with_objectives(task, name, params)
    per_example = reference(tf.constant(y), tf.constant(p)).numpy()
    np.testing.assert_allclose(task.loss(y, p).numpy(), per_example.mean(), rtol=1e-6)
    # weighted: sum of weighted losses over the batch size, as Keras reduces
    np.testing.assert_allclose(task.loss(y, p, sample_weight=WEIGHTS).numpy(), (per_example * WEIGHTS).sum() / 6,
                               rtol=1e-6)


def test_loss_is_float32_on_float16_predictions():
    task = with_objectives(CLASSIFY, "sparse_categorical_crossentropy")
    loss = task.loss(LABELS, tf.constant(LOGITS, tf.float16))
    assert loss.dtype == tf.float32
    expected = keras.losses.get("sparse_categorical_crossentropy")(
        LABELS, tf.cast(tf.constant(LOGITS, tf.float16), tf.float32), from_logits=True).numpy().mean()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)


def test_a_user_loss_function_with_params():
    task = with_objectives(REGRESS, {"factory": "tests.data.losses_fixture:scaled_absolute"}, {"scale": 3.0})
    expected = 3.0 * np.abs(TARGETS - PREDICTIONS).mean()
    np.testing.assert_allclose(task.loss(TARGETS, PREDICTIONS).numpy(), expected, rtol=1e-6)


def test_metrics_are_added_and_accuracy_reads_logits():
    metrics = with_objectives(CLASSIFY, metrics=["accuracy", "sparse_top_k_categorical_accuracy"]).make_metrics()
    assert list(metrics) == ["loss", "accuracy", "sparse_top_k_categorical_accuracy"]
    metrics["sparse_top_k_categorical_accuracy"].update_state(LABELS, LOGITS)
    reference = keras.metrics.SparseTopKCategoricalAccuracy(k=5)
    reference.update_state(LABELS, LOGITS)
    assert float(metrics["sparse_top_k_categorical_accuracy"].result()) == float(reference.result())


def test_unknown_loss_parameter_is_named():
    with pytest.raises(ValueError, match="did you mean 'from_logits'") as caught:
        make_loss("sparse_categorical_crossentropy", {"from_logit": True})
    assert caught.value.param == "from_logit"


@pytest.mark.parametrize("payload, needle", [
    ({"loss": "huber_los"}, "loss: unknown loss 'huber_los'; did you mean 'huber'?"),
    ({"metrics": ["accuracy", "sparse_top_k_categorical_acuracy"]},
     "metrics[1]: unknown metric 'sparse_top_k_categorical_acuracy'; did you mean 'sparse_top_k_categorical_accuracy'?"),
])
def test_unknown_names_are_config_errors_with_did_you_mean(cli, write_config, payload, needle):
    result = cli("validate", "--config", write_config({"max_steps": 3, **payload}))
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output


def test_a_run_reports_each_metric_everywhere(cli, write_config, tmp_path):
    config = write_config({
        "data": "digits", "model": "mlp", "model_params": {"hidden_units": [8]}, "batch_size_per_gpu": 32,
        "max_steps": 10, "eval_steps": 5, "print_loss_steps": 5, "dtype": "mixed",
        "loss": "sparse_categorical_crossentropy", "loss_params": {"from_logits": True},
        "metrics": ["accuracy", "sparse_top_k_categorical_accuracy"],
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert 0 < final["eval/sparse_top_k_categorical_accuracy"] <= 1 and "eval/accuracy" in final
    records = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "eval/sparse_top_k_categorical_accuracy" in r]
    assert [r["step"] for r in records] == [5, 10]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for events in (tmp_path / "run").rglob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events)).Reload()
        tags |= set(accumulator.Tags().get("tensors", [])) | set(accumulator.Tags().get("scalars", []))
    assert any(tag.endswith("sparse_top_k_categorical_accuracy") for tag in tags), tags


def _weights(logdir):
    reader = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("model_variables/")}


@pytest.mark.slow  # 5 s on 2 cores
def test_weighted_named_loss_with_iter_size_equals_one_big_batch(cli, write_config, tmp_path):
    """2 micro-batches of 16 with sample weights == 1 batch of 32: the same 32 examples, the same update."""
    common = {
        "model": "mlp", "model_params": {"hidden_units": [8]}, "data": {"factory": "examples.my_data:make"},
        "data_params": {"points_per_arm": 40, "weight_outer": True, "task": "classification", "num_classes": 3},
        "loss": "sparse_categorical_crossentropy", "optimizer": "SGD", "optimizer_params": {"learning_rate": 0.5},
        "max_steps": 3, "print_loss_steps": 1, "random_seed": 1,
    }
    big = write_config({**common, "batch_size_per_gpu": 32, "logdir": str(tmp_path / "big")}, "big.yaml")
    small = write_config({**common, "batch_size_per_gpu": 16, "iter_size": 2, "logdir": str(tmp_path / "acc")},
                         "acc.yaml")
    for config in (big, small):
        result = cli("train", "--config", config)
        assert result.exit_code == 0, result.output
    expected, actual = _weights(tmp_path / "big"), _weights(tmp_path / "acc")
    assert len(expected) >= 4
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=0, atol=1e-6, err_msg=name)


@pytest.mark.slow  # 5 s on 2 cores
def test_the_example_config_trains(cli, tmp_path):
    from tests.support import CONFIGS

    result = cli("train", "--config", CONFIGS / "loss_metrics.yaml", "--set", "max_steps=20",
                 "--set", "eval_steps=10", "--set", f"logdir={tmp_path / 'run'}")
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert {"eval/loss", "eval/accuracy", "eval/sparse_top_k_categorical_accuracy"} <= set(final)
