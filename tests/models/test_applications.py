"""`model: {keras_application: Name}`: any keras.applications architecture, untrained, shaped by the data."""

import textwrap

import keras
import numpy as np
import pytest

from opt_train.config import ConfigError, load_config
from opt_train.data.task import Task
from opt_train.models import build_model
from opt_train.models.registry import KERAS_APPLICATIONS
from tests.support import read_json

IMAGES = Task("classification", (32, 32, 3), 5, num_classes=5, image_shape=(32, 32, 3))
SMALL_MOBILENET = {"alpha": 0.25}


def test_the_validated_names_are_exactly_keras_applications():
    constructors = {n for n in dir(keras.applications) if n[:1].isupper() and callable(getattr(keras.applications, n))}
    assert set(KERAS_APPLICATIONS) == constructors


def _load(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config([str(path)])


def test_names_resolve_without_tensorflow_and_misspellings_suggest(tmp_path):
    config = _load(tmp_path, "max_steps: 1\ndata: synthetic_images\nmodel: {keras_application: resnet50}\n")
    assert config.model == {"keras_application": "ResNet50"}
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "max_steps: 1\ndata: synthetic_images\nmodel:\n  keras_application: ResNet05\n")
    (issue,) = info.value.issues
    assert issue.key == "model" and issue.line == 3 and issue.code == "unknown_name"
    assert "ResNet50" in issue.message


@pytest.mark.parametrize("text, key, code", [
    ("model: {keras_application: ResNet50}\nmodel_params: {weights: imagenet}\n", "model_params.weights", "conflict"),
    ("model: {keras_aplication: ResNet50}\n", "model.keras_aplication", "unknown_key"),
    ("model: {keras_application: ResNet50}\ndata: reversal\n", "model", "out_of_range"),
    ("model: {path: my_model.h5}\n", "model.path", "out_of_range"),
    ("model: {path: my_model.keras}\nmodel_params: {safe_mode: 'no'}\n", "model_params.safe_mode", "wrong_type"),
])
def test_bad_specs_are_located(tmp_path, text, key, code):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "max_steps: 1\n" + text)
    assert [(issue.key, issue.code) for issue in info.value.issues] == [(key, code)], info.value


@pytest.mark.slow  # 17 s in the fast subset on 2 cores: builds a Keras application
def test_build_adds_a_head_to_the_keras_architecture():
    model = build_model({"keras_application": "MobileNet"}, SMALL_MOBILENET, IMAGES)
    reference = keras.applications.MobileNet(
        include_top=False, weights=None, input_shape=(32, 32, 3), pooling="avg", alpha=0.25
    )
    features = reference.output_shape[-1]
    assert model.count_params() == reference.count_params() + features * 5 + 5
    outputs = model(np.zeros((2, 32, 32, 3), np.float32))
    assert tuple(outputs.shape) == (2, 5) and outputs.dtype == "float32"


def test_include_top_uses_the_architectures_own_classifier():
    model = build_model({"keras_application": "MobileNet"}, {**SMALL_MOBILENET, "include_top": True}, IMAGES)
    reference = keras.applications.MobileNet(
        include_top=True, weights=None, input_shape=(32, 32, 3), alpha=0.25, classes=5, classifier_activation=None
    )
    assert model.count_params() == reference.count_params()


@pytest.mark.slow  # 144 s measured on 2 loaded cores: tracing and exporting a Keras application
def test_a_small_application_trains_end_to_end_on_synthetic_images(cli, write_config, tmp_path):
    config = write_config({
        "model": {"keras_application": "MobileNet"},
        "model_params": SMALL_MOBILENET,
        "data": "synthetic_images",
        "data_params": {"num_examples": 40, "height": 32, "width": 32, "num_classes": 3},
        "batch_size_per_gpu": 8,
        "max_steps": 3,
        "print_loss_steps": 3,
        "save_summaries_steps": None,
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    # The spec's value, not its mapping ("training {'keras_application': 'MobileNet'} on ...").
    assert "training MobileNet on synthetic_images with Adam" in result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["global_step"] == 3 and 0.0 <= final["eval/accuracy"] <= 1.0
    assert (tmp_path / "run" / "export" / "model.keras").is_file()


def test_images_too_small_for_the_architecture_are_a_config_error_naming_model(cli, write_config):
    config = write_config({"model": {"keras_application": "ResNet50"}, "data": "digits", "max_steps": 1})
    result = cli("train", "--config", config)
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{config}:1: model:" in lines[0] and "ResNet50" in lines[0], lines


def test_an_unknown_constructor_parameter_suggests_one(cli, write_config):
    config = write_config({
        "model": {"keras_application": "MobileNet"}, "model_params": {"alpah": 0.25},
        "data": "synthetic_images", "max_steps": 1,
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 2 and "model_params.alpah" in result.output and "'alpha'" in result.output
