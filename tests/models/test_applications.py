"""`model: {keras_application: Name}`: any keras.applications architecture, untrained, shaped by the data."""

import re
import textwrap

import keras
import numpy as np
import pytest

from opt_train.config import ConfigError, load_config
from opt_train.data.task import Task
from opt_train.models import build_model
from opt_train.models.registry import APPLICATION_MIN_SIDE, KERAS_APPLICATIONS
from tests.support import read_json

IMAGES = Task("classification", (32, 32, 3), 5, num_classes=5, image_shape=(32, 32, 3))
SMALL_MOBILENET = {"alpha": 0.25}


def test_the_validated_names_are_exactly_keras_applications():
    constructors = {n for n in dir(keras.applications) if n[:1].isupper() and callable(getattr(keras.applications, n))}
    assert set(KERAS_APPLICATIONS) == constructors


def test_the_smallest_image_side_of_each_application_is_the_one_keras_checks():
    """`APPLICATION_MIN_SIDE` (TF-free, for `validate`) against Keras's own refusal of 8x8 images, which
    names the architecture's smallest side before it builds anything."""
    said = {}
    for name in KERAS_APPLICATIONS:
        with pytest.raises(ValueError) as refused:
            getattr(keras.applications, name)(input_shape=(8, 8, 3), weights=None, include_top=False)
        said[name] = int(re.match(r"Input size must be at least (\d+)x\1;", str(refused.value))[1])
    assert APPLICATION_MIN_SIDE == said


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
    ("model: {keras_application: ResNet50}\nmodel_params: {weights: none.weights.h5}\n", "model_params.weights",
     "file_not_found"),
    ("model: {keras_application: ResNet50}\nmodel_params: {weights: 3}\n", "model_params.weights", "wrong_type"),
    ("model: {keras_application: ResNet50}\nmodel_params: {weights: imagenet.pt}\n", "model_params.weights", "wrong_type"),
    ("model: {keras_application: ResNet50}\nmodel_params: {classes: 3}\n", "model_params.classes", "conflict"),
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


@pytest.mark.slow  # 5-7 s on 2 cores: tracing, evaluating and exporting a Keras application
def test_a_small_application_trains_end_to_end_on_synthetic_images(cli, write_config, tmp_path):
    # VGG16: the application with the fewest layers (20) to trace and export; a quarter-width
    # MobileNet's 87 cost three times the CPU here (15 s against 5).
    config = write_config({
        "model": {"keras_application": "VGG16"},
        "model_params": {"pooling": "avg"},
        "data": "synthetic_images",
        "data_params": {"num_examples": 40, "height": 32, "width": 32, "num_classes": 3},
        "batch_size_per_gpu": 8,
        "max_steps": 3,
        "print_loss_steps": 3,
        "save_summaries_steps": None,
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    # The spec's value, not its mapping ("training {'keras_application': 'VGG16'} on ...").
    assert "training VGG16 on synthetic_images with Adam" in result.output
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


def _small_mobilenet_config(tmp_path, **params):
    """A config of MobileNet (alpha 0.25) on 32x32 images, its `model_params` extended by `params`."""
    path = tmp_path / "pretrained.yaml"
    path.write_text(textwrap.dedent(f"""\
        model: {{keras_application: MobileNet}}
        model_params: {dict(SMALL_MOBILENET, **params)}
        data: synthetic_images
        data_params: {{num_examples: 20, height: 32, width: 32, num_classes: 5}}
        max_steps: 1
        batch_size_per_gpu: 4
        logdir: {tmp_path / "run"}
    """))
    return load_config([str(path)])


def _images():
    return np.random.default_rng(3).normal(size=(2, 32, 32, 3)).astype("float32")


@pytest.mark.slow  # 7-10 s on 2 cores: four MobileNets (the fast subset keeps the refusal below)
def test_weights_from_a_file_give_keras_outputs_with_that_file_and_a_fresh_head(tmp_path):
    """`model_params.weights: file` (relative to the config) is Keras's `weights=file`; the new head starts fresh."""
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    shape = {"include_top": False, "input_shape": (32, 32, 3), "pooling": "avg", **SMALL_MOBILENET}
    keras.utils.set_random_seed(7)
    keras.applications.MobileNet(weights=None, **shape).save_weights(tmp_path / "backbone.weights.h5")
    reference = keras.applications.MobileNet(weights=str(tmp_path / "backbone.weights.h5"), **shape)

    config = _small_mobilenet_config(tmp_path, weights="backbone.weights.h5")
    assert config.model_params["weights"] == str(tmp_path / "backbone.weights.h5")  # the config's path rule
    model = build_run(config, get_backend(), with_train_op=False).model
    body = model.get_layer(reference.name)
    np.testing.assert_array_equal(body(_images()).numpy(), reference(_images()).numpy())
    fresh = build_run(_small_mobilenet_config(tmp_path), get_backend(), with_train_op=False).model
    np.testing.assert_array_equal(model.get_layer("logits").kernel.numpy(), fresh.get_layer("logits").kernel.numpy())
    assert not np.array_equal(body.weights[0].numpy(), fresh.get_layer(reference.name).weights[0].numpy())


@pytest.mark.slow  # 8 s on 2 cores: two more MobileNets
def test_include_top_weights_from_a_file_give_keras_outputs(tmp_path):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    shape = {"include_top": True, "input_shape": (32, 32, 3), "classes": 5, "classifier_activation": None,
             **SMALL_MOBILENET}
    keras.applications.MobileNet(weights=None, **shape).save_weights(tmp_path / "whole.weights.h5")
    reference = keras.applications.MobileNet(weights=str(tmp_path / "whole.weights.h5"), **shape)
    config = _small_mobilenet_config(tmp_path, include_top=True, weights=str(tmp_path / "whole.weights.h5"))
    model = build_run(config, get_backend(), with_train_op=False).model
    np.testing.assert_array_equal(model(_images()).numpy(), reference(_images()).numpy())


def test_weights_of_another_architecture_name_the_key(tmp_path):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    inputs = keras.Input((32, 32, 3))
    other = keras.Model(inputs, keras.layers.Conv2D(4, 3, name="conv1")(inputs))
    other.save_weights(tmp_path / "other.weights.h5")
    with pytest.raises(ConfigError) as caught:
        build_run(_small_mobilenet_config(tmp_path, weights="other.weights.h5"), get_backend(), with_train_op=False)
    [issue] = caught.value.issues
    assert (issue.key, issue.code, issue.line) == ("model_params.weights", "conflict", 2), issue


@pytest.mark.slow  # 10 s: a fresh process imports TensorFlow
def test_imagenet_without_a_network_is_one_line_naming_the_key(tmp_path):
    """A machine without network (here: a proxy nobody listens on, and an empty Keras cache): exit 2, one line."""
    import subprocess
    import sys

    from tests.support import REPO, unlaunched_environ

    config = tmp_path / "imagenet.yaml"
    config.write_text(textwrap.dedent(f"""\
        model: {{keras_application: MobileNet}}
        model_params: {{alpha: 0.25, weights: imagenet}}
        data: synthetic_images
        data_params: {{num_examples: 20, height: 32, width: 32, num_classes: 5}}
        max_steps: 1
        batch_size_per_gpu: 4
        logdir: {tmp_path / "run"}
    """))
    unreachable = "http://127.0.0.1:9"
    env = unlaunched_environ(KERAS_HOME=str(tmp_path / "keras"), https_proxy=unreachable, HTTPS_PROXY=unreachable,
                             http_proxy=unreachable, HTTP_PROXY=unreachable, no_proxy="", NO_PROXY="",
                             PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "opt_train", "train", "--config", str(config)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{config}:2: model_params.weights: Keras could not download MobileNet's imagenet weights" in errors[0]
    assert not (tmp_path / "run" / "checkpoints").exists()
