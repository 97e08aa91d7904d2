"""The keys judged at validate against what a real evaluation reports: `early_stopping.monitor`, `lr_control.monitor`,
`metrics` against the labels the task gives."""

import pytest

from opt_train.config import ConfigError, load_config
from opt_train.data import objective_names

HEAD = "max_steps: 10\neval_steps: 2\n"


def issues_of(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + text)
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    return caught.value.issues


@pytest.mark.parametrize("text, key, suggestion, line", [
    ("early_stopping: {monitor: acuracy}\n", "early_stopping.monitor", "accuracy", 3),
    ("lr_control:\n  mode: plateau\n  monitor: los\n", "lr_control.monitor", "loss", 5),
    ("data: synthetic_regression\nearly_stopping:\n  monitor: accuracy\n", "early_stopping.monitor", None, 5),
    ("metrics: [sparse_top_k_categorical_accuracy]\nearly_stopping: {monitor: sparse_top_k_categorical_acuracy}\n",
     "early_stopping.monitor", "sparse_top_k_categorical_accuracy", 4),
])
def test_a_monitor_the_evaluation_does_not_report_is_refused_at_validate(tmp_path, text, key, suggestion, line):
    [issue] = issues_of(tmp_path, text)
    assert (issue.key, issue.code, issue.line) == (key, "unknown_name", line)
    assert issue.file.endswith("run.yaml")
    if suggestion:
        assert f"did you mean '{suggestion}'?" in issue.message


def test_validate_refuses_a_monitor_typo_with_exit_2_in_one_line(cli, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + "early_stopping: {monitor: acuracy}\n")
    result = cli("validate", "--config", path)
    assert result.exit_code == 2
    assert "run.yaml:3: early_stopping.monitor: unknown eval metric 'acuracy'; did you mean 'accuracy'?" in result.output
    assert "Traceback" not in result.output


def test_a_monitor_without_a_direction_needs_min_or_max(tmp_path):
    regression = "data: synthetic_regression\n"  # the confusion counts read a regression's targets, not class ids
    [issue] = issues_of(tmp_path, regression + "metrics: [true_positives]\nearly_stopping: {monitor: true_positives}\n")
    assert (issue.key, issue.code) == ("early_stopping.mode", "conflict")
    path = tmp_path / "ok.yaml"
    path.write_text(HEAD + regression + "metrics: [true_positives]\nearly_stopping: {monitor: true_positives, mode: max}\n"
                    "lr_control: {mode: plateau, monitor: mae, monitor_mode: min}\n")
    config = load_config([path])
    assert config.early_stopping["mode"] == "max" and config.lr_control["monitor_mode"] == "min"
    [issue] = issues_of(tmp_path, "early_stopping: {mode: maxi}\n")
    assert (issue.key, issue.code) == ("early_stopping.mode", "unknown_name") and "'max'" in issue.message


def test_newbob_with_a_higher_is_better_monitor_is_refused(tmp_path):
    [issue] = issues_of(tmp_path, "lr_control: {mode: newbob, monitor: accuracy}\n")
    assert (issue.key, issue.code) == ("lr_control.monitor", "conflict")


def test_directions_are_kerass_own():
    """Each metric's direction is the `_direction` Keras gives it (mode auto reads it); none without one."""
    from opt_train.data.objectives import make_metric
    from opt_train.data.task import Task

    task = Task("classification", (4,), 3, num_classes=3)
    for name in objective_names.METRIC_NAMES:
        keras_direction = getattr(make_metric(name, task), "_direction", None)
        expected = {"up": "max", "down": "min", None: None}[keras_direction]
        try:
            mine = objective_names.monitor_direction(name)
        except ValueError:
            mine = None
        assert mine == expected, name
    assert objective_names.monitor_direction("loss") == "min"


@pytest.mark.parametrize("text", [
    "data: synthetic_classification\ndata_params: {num_examples: 40, num_features: 3, num_classes: 3}\n"
    "metrics: [acc, sparse_top_k_categorical_accuracy, sparse_categorical_crossentropy]\n",
    "data: synthetic_regression\ndata_params: {num_examples: 40, num_features: 3}\nmetrics: [r2_score]\n",
    "data: reversal\nmodel: transformer\nmodel_params: {d_model: 8, num_heads: 1, num_layers: 1, ff_dim: 8}\n"
    "data_params: {num_examples: 40}\nmetrics: [sparse_categorical_crossentropy]\n",
])
def test_validates_names_are_what_a_real_evaluation_reports(tmp_path, text):
    from opt_train.data import registry
    from opt_train.data.task import eval_metric_names
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.evaluation import Evaluator

    path = tmp_path / "run.yaml"
    path.write_text(HEAD + "model_params: {hidden_units: [4]}\nbatch_size_per_gpu: 4\n" * ("transformer" not in text)
                    + ("batch_size_per_gpu: 4\n" if "transformer" in text else "") + text + f"logdir: {tmp_path}/run\n")
    config = load_config([path])
    run = build_run(config, get_backend(), with_train_op=False)
    reported = Evaluator(run.model, run.data)()
    kind = registry.task_kind(config.data, config.data_params)
    assert list(reported) == list(eval_metric_names(kind, config.metrics))


def test_a_sweep_ranks_an_eval_metric_the_way_early_stopping_does():
    """One direction rule: a sweep's default `mode` for `eval/<name>` is early stopping's for `name`."""
    from opt_train.sweep.spec import default_mode

    for name in sorted(objective_names.HIGHER_IS_BETTER | objective_names.LOWER_IS_BETTER):
        assert default_mode(f"eval/{name}") == objective_names.monitor_direction(name), name
    assert default_mode("eval/bleu") == "max" and default_mode("eval/wer") == "min"


@pytest.mark.parametrize("data, metric", [
    ("digits", "auc"), ("digits", "f1_score"), ("digits", "categorical_accuracy"),
    ("synthetic_regression", "sparse_categorical_crossentropy"),
])
def test_validate_refuses_a_metric_that_cannot_read_the_tasks_labels_in_one_line(cli, tmp_path, data, metric):
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + f"data: {data}\nmetrics: [accuracy, {metric}]\n")
    result = cli("validate", "--config", path)
    assert result.exit_code == 2, result.output
    [error] = [row for row in result.output.splitlines() if row.startswith("Error:")]
    assert error.startswith(f"Error: {path}:4: metrics[1]: reads ") and error.endswith(f"Received: '{metric}' [conflict]")
    assert "Traceback" not in result.output


def test_a_loss_and_model_of_ones_own_say_how_labels_are_read_and_the_metric_is_left_to_them(tmp_path):
    (tmp_path / "one_unit.py").write_text("def build(task):\n    raise NotImplementedError  # a sigmoid unit\n")
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + "model: {factory: 'one_unit:build'}\nloss: binary_crossentropy\nmetrics: [auc]\n")
    assert load_config([path]).metrics == ("auc",)


APPLICATION = ("model: {keras_application: MobileNetV2}\n"
               "data_params: {num_examples: 64, height: 32, width: 32, channels: 3, num_classes: 4}\n")


@pytest.mark.parametrize("data, loss, model", [
    ("digits", "categorical_crossentropy", ""), ("digits", "mse", ""),
    ("synthetic_regression", "sparse_categorical_crossentropy", ""),
    # A Keras application's head is opt-train's: per-class logits, as a built-in's. Failed before: validate
    # passed, and train ended at its first step with Keras's shape error and exit 1.
    ("synthetic_images", "categorical_crossentropy", APPLICATION),
])
def test_validate_refuses_a_loss_that_cannot_read_a_built_in_models_output_in_one_line(cli, tmp_path, data, loss,
                                                                                     model):
    """Failed before: validate passed, and train ended at its first step with Keras's shape error and exit 1."""
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + f"data: {data}\nloss: {loss}\n" + model)
    result = cli("validate", "--config", path)
    assert result.exit_code == 2, result.output
    [error] = [row for row in result.output.splitlines() if row.startswith("Error:")]
    assert error.startswith(f"Error: {path}:4: loss: reads ") and error.endswith(f"Received: '{loss}' [conflict]")
    path.write_text(HEAD + f"data: {data}\n" + model)
    assert cli("validate", "--config", path).exit_code == 0  # the model and data themselves are a valid pair


def test_what_a_refused_loss_does_to_class_ids_and_logits():
    """The reference: Keras's own losses on what a built-in classifier gives them."""
    import keras
    import numpy as np

    labels, logits = np.array([0, 2, 1]), np.zeros((3, 4), "float32")
    with pytest.raises(ValueError, match="same rank"):
        keras.losses.CategoricalCrossentropy(from_logits=True)(labels, logits)
    sparse = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    assert float(sparse) == pytest.approx(np.log(4.0))


def test_what_a_refused_metric_would_report_on_class_ids():
    """The reference: on class ids against logits, Keras's one-hot metrics fail or report another figure than
    the class-id one (a NumPy argmax match); the class-id metrics report it."""
    import keras
    import numpy as np

    labels = np.array([0, 2, 1, 2, 0, 1])
    logits = np.random.default_rng(0).normal(size=(6, 3)).astype("float32")
    expected = float(np.mean(np.argmax(logits, axis=1) == labels))
    sparse = keras.metrics.SparseCategoricalAccuracy()
    sparse.update_state(labels, logits)
    assert float(sparse.result()) == pytest.approx(expected)
    assert "sparse_categorical_accuracy" in objective_names.CLASS_ID_METRICS
    one_hot = keras.metrics.CategoricalAccuracy()
    one_hot.update_state(labels, logits)
    assert float(one_hot.result()) != pytest.approx(expected)
    with pytest.raises(ValueError, match="expects 2D inputs"):
        keras.metrics.F1Score().update_state(labels, logits)
