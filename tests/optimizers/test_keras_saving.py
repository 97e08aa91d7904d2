"""Every registered optimizer is a first-class Keras object: `.keras` round trip, pickle, deserialize.

The reference is Keras itself: `model.save` / `keras.models.load_model`,
`pickle` and `keras.optimizers.serialize` / `deserialize`; what comes back is
compared with the optimizer that went in (class, config, every variable).
"""

import pickle

import keras
import numpy as np
import pytest

from opt_train.optimizers import OPTIMIZER_CLS_NAMES, get
from tests.support import optimizer_cases

# Required parameters without a default, per optimizer.
REQUIRED = {
    "Momentum": {"momentum": 0.9},
    "NeuralOptimizer1": {"learning_rate": 0.01},
    "GradVarianceScaled": {"learning_rate": 0.01},
    "NormalizedSGD": {"learning_rate": 0.01},
    "CustomGradientDescent": {"learning_rate": 0.01},
    "CustomAdam": {"learning_rate": 0.01},
    "AMSGrad": {"learning_rate": 0.01},
}


def _optimizer(name):
    return get(name, **REQUIRED.get(name, {}))


def _trained_model(name):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    # Eagerly: the state fit leaves is what is saved; tracing fit's step took half of each case.
    model.compile(optimizer=_optimizer(name), loss="mse", run_eagerly=True)
    x = np.linspace(-1.0, 1.0, 12, dtype="float32").reshape(4, 3)
    y = np.ones((4, 2), dtype="float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    return model


def _assert_same_optimizer(loaded, original):
    assert type(loaded) is type(original)
    assert loaded.get_config() == original.get_config()
    assert len(loaded.variables) == len(original.variables)
    for ours, theirs in zip(loaded.variables, original.variables):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("name", optimizer_cases(sorted(OPTIMIZER_CLS_NAMES)))
def test_keras_file_round_trips_the_optimizer(name, tmp_path):
    model = _trained_model(name)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    _assert_same_optimizer(loaded.optimizer, model.optimizer)
    assert int(loaded.optimizer.iterations.numpy()) == 1


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLS_NAMES))
def test_pickle_round_trips_the_optimizer(name):
    optimizer = _optimizer(name)
    clone = pickle.loads(pickle.dumps(optimizer))
    assert type(clone) is type(optimizer)
    assert clone.get_config() == optimizer.get_config()


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CLS_NAMES))
def test_keras_deserialize_takes_the_serialized_form(name):
    optimizer = _optimizer(name)
    serialized = keras.optimizers.serialize(optimizer)
    assert serialized["registered_name"] == f"opt_train>{name}"
    clone = keras.optimizers.deserialize(serialized)
    assert type(clone) is type(optimizer)
    assert clone.get_config() == optimizer.get_config()
