"""The weight count the builder checks memory with, against the Keras models the builders make."""

import pytest

from opt_train.data.task import Task
from opt_train.models.layers import image_shape
from opt_train.models.size import weight_count

CNN = {"filters": [4, 6], "kernel_size": 3, "dense_units": 5, "activation": "relu", "dropout": 0.0}

TASKS = {
    "flat_with_image_shape": Task("classification", (64,), 10, num_classes=10, image_shape=(8, 8, 1)),
    "two_dimensional": Task("regression", (6, 5), 2),
    "three_dimensional": Task("classification", (9, 7, 3), 4, num_classes=4),
}


@pytest.mark.parametrize("case", sorted(TASKS))
def test_cnn_weight_count_is_the_keras_models(case):
    from opt_train.models.cnn import build_cnn

    task = TASKS[case]
    assert weight_count("cnn", CNN, task) == build_cnn(task, **CNN).count_params()


def test_an_input_that_is_no_image_has_no_count_and_the_builder_says_why():
    from opt_train.models.cnn import build_cnn

    # 60 values cannot be reshaped to 8 x 8 x 1: no shape, no count, and cnn's own error.
    task = Task("classification", (60,), 10, num_classes=10, image_shape=(8, 8, 1))
    assert image_shape(task) is None
    assert weight_count("cnn", CNN, task) is None
    with pytest.raises(ValueError, match="needs image-like inputs"):
        build_cnn(task, **CNN)


# Every built-in model with its defaults and a few other parameter combinations, on the tasks it serves.
SEQUENCE = Task("sequence", (8,), 12, input_dtype="int32", vocab_size=12)
SHAPE_CASES = {
    "mlp-defaults": ("mlp", {}, TASKS["flat_with_image_shape"]),
    "mlp-three-layers-2d-input": ("mlp", {"hidden_units": [7, 5, 3], "dropout": 0.2}, TASKS["two_dimensional"]),
    "cnn-defaults": ("cnn", {}, TASKS["flat_with_image_shape"]),
    "cnn-three-blocks-rgb": ("cnn", {"filters": [4, 6, 8], "kernel_size": 5}, TASKS["three_dimensional"]),
    "transformer-defaults": ("transformer", {}, SEQUENCE),
    "transformer-one-layer-8-heads": (
        "transformer", {"d_model": 32, "num_heads": 8, "num_layers": 1, "ff_dim": 48, "dropout": 0.1}, SEQUENCE),
}


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
def test_variable_paths_and_shapes_are_the_built_keras_models(case):
    from opt_train.models.registry import MODELS, check_params
    from opt_train.models.size import variable_shapes

    name, given, task = SHAPE_CASES[case]
    params = check_params(name, given)
    model = MODELS.load(name)(task, **params)
    built = [(weight.path, tuple(weight.shape)) for weight in model.weights]
    assert variable_shapes(name, params, task) == built
    assert weight_count(name, params, task) == model.count_params()


def test_every_built_in_model_has_a_case_holding_its_sizes_to_keras():
    from opt_train.models.registry import MODEL_NAMES

    assert {name for name, _, _ in SHAPE_CASES.values()} == set(MODEL_NAMES)
