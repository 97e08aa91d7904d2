"""Tests for `{factory: "package.module:function"}`: loading, calling with task and params, error messages."""

import itertools

import keras
import numpy as np
import pytest

from opt_train.data.task import Task
from opt_train.models import build_model

TASK = Task("classification", (4,), 3, num_classes=3)
_COUNTER = itertools.count()

FACTORY_SOURCE = '''
import keras

def with_task(task, units=2):
    inputs = keras.Input(shape=task.input_shape)
    return keras.Model(inputs, keras.layers.Dense(task.output_dim * units)(inputs))

def without_task(width):
    return keras.Sequential([keras.layers.Dense(width)])  # not built until called

def not_a_model():
    return "model"

class Subclassed(keras.Model):
    def __init__(self, units):
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x):
        return self.dense(x)

def built_without_weights(task):
    model = Subclassed(task.output_dim)
    model.build((None,) + tuple(task.input_shape))  # no build() of its own: marked built, no weights
    return model
'''


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh importable module holding FACTORY_SOURCE; returns its name."""
    name = f"user_models_{next(_COUNTER)}"
    (tmp_path / f"{name}.py").write_text(FACTORY_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_factory_with_task_gets_task_and_params(module):
    model = build_model({"factory": f"{module}:with_task"}, {"units": 5}, TASK)
    assert model.output_shape == (None, 15)


def test_factory_without_task_is_built_on_a_dummy_batch_and_accepts_dotted_spelling(module):
    model = build_model({"factory": f"{module}.without_task"}, {"width": 7}, TASK)
    assert model.built
    assert model(np.zeros((2, 4), np.float32)).shape == (2, 7)


@pytest.mark.parametrize("target, message", [
    ("no_such_module_xyz:make", "Model factory 'no_such_module_xyz:make': cannot import module 'no_such_module_xyz'"),
    ("{module}:missing", "Model factory '{module}:missing': module '{module}' has no function 'missing'"),
    ("{module}:not_a_model", "Model factory '{module}:not_a_model' must return a keras.Model. Received: str"),
])
def test_factory_errors_name_the_factory(module, target, message):
    target, message = target.format(module=module), message.format(module=module)
    with pytest.raises(ValueError) as info:
        build_model({"factory": target}, {}, TASK)
    assert message in str(info.value)


def test_factory_rejecting_params_is_a_value_error(module):
    """The parameter the function does not take is named, at its config key (validate says the same from the source)."""
    with pytest.raises(ValueError, match=rf"is not a parameter of {module}:without_task") as caught:
        build_model({"factory": f"{module}:without_task"}, {"depth": 2}, TASK)
    assert (caught.value.key, caught.value.code) == ("model_params.depth", "unknown_key")


@pytest.mark.filterwarnings("ignore:`build\\(\\)` was called on layer:UserWarning")  # Keras's, about the user's model
def test_a_subclassed_model_built_without_weights_gets_them_from_a_zero_batch(module):
    model = build_model({"factory": f"{module}:built_without_weights"}, {}, TASK)
    reference = keras.layers.Dense(3)
    reference.build((None, 4))
    assert [tuple(v.shape) for v in model.trainable_variables] == [tuple(v.shape) for v in reference.weights]


def test_factory_returns_keras_model_instance(module):
    assert isinstance(build_model({"factory": f"{module}:with_task"}, {}, TASK), keras.Model)
