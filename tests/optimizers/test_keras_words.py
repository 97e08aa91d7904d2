"""Keras-family optimizers refuse their arguments in Keras 3's own sentences, from Python and from a config.

The reference is the installed Keras class itself: each case builds it with the same bad
argument and takes its error's text, so a Keras upgrade that rewords one fails here.
"""

import keras
import pytest

from opt_train.optimizers import OPTIMIZER_CLS_NAMES
from opt_train.optimizers.specs import check_params

# (opt-train's name, Keras 3's class, the bad arguments, the parameter and code opt-train files it under)
CASES = [
    ("SGD", "SGD", {"momentum": -1}, "momentum", "out_of_range"),
    ("SGD", "SGD", {"momentum": "high"}, "momentum", "wrong_type"),
    ("Lion", "Lion", {"beta_1": -0.1}, "beta_1", "out_of_range"),
    ("AdamW", "AdamW", {"weight_decay": None}, "weight_decay", "wrong_type"),
    ("KerasAdam", "Adam", {"clipnorm": 1.0, "clipvalue": 0.5}, "clipvalue", "conflict"),
    ("SGD", "SGD", {"clipnorm": 1.0, "global_clipnorm": 2.0}, "global_clipnorm", "conflict"),
    ("Lion", "Lion", {"clipvalue": 1.0, "global_clipnorm": 2.0}, "global_clipnorm", "conflict"),
    ("KerasFtrl", "Ftrl", {"learning_rate_power": 0.5}, "learning_rate_power", "out_of_range"),
    ("KerasFtrl", "Ftrl", {"initial_accumulator_value": -1.0}, "initial_accumulator_value", "out_of_range"),
    ("KerasFtrl", "Ftrl", {"l1_regularization_strength": -1}, "l1_regularization_strength", "out_of_range"),
    ("KerasFtrl", "Ftrl", {"l2_regularization_strength": -0.5}, "l2_regularization_strength", "out_of_range"),
    ("KerasFtrl", "Ftrl", {"l2_shrinkage_regularization_strength": -2.0},
     "l2_shrinkage_regularization_strength", "out_of_range"),
]
IDS = [f"{ours}-{'-'.join(kwargs)}" for ours, _, kwargs, _, _ in CASES]


def keras_says(keras_name, kwargs):
    with pytest.raises(ValueError) as refused:
        getattr(keras.optimizers, keras_name)(**kwargs)
    return str(refused.value)


@pytest.mark.parametrize("ours, keras_name, kwargs, param, code", CASES, ids=IDS)
def test_config_check_says_what_keras_says(ours, keras_name, kwargs, param, code):
    """The TF-free check `opt-train validate` runs: Keras's sentence, opt-train's parameter and code."""
    with pytest.raises(ValueError) as refused:
        check_params(ours, kwargs)
    assert str(refused.value) == keras_says(keras_name, kwargs)
    assert (refused.value.param, refused.value.code) == (param, code)


@pytest.mark.parametrize("ours, keras_name, kwargs, param, code", CASES, ids=IDS)
def test_constructor_says_what_keras_says(ours, keras_name, kwargs, param, code):
    with pytest.raises(ValueError) as refused:
        OPTIMIZER_CLS_NAMES[ours](**kwargs)
    assert str(refused.value) == keras_says(keras_name, kwargs)
    assert (refused.value.param, refused.value.code) == (param, code)


def test_tf1_ftrl_keeps_its_own_words():
    """TF1's Ftrl is not Keras's: the same rule, opt-train's sentence."""
    with pytest.raises(ValueError) as refused:
        check_params("Ftrl", {"learning_rate_power": 0.5})
    assert str(refused.value) == "`learning_rate_power` must be in [-inf, 0]. Received: learning_rate_power=0.5"


def test_validate_frames_keras_words_with_key_line_and_code(cli, write_config):
    config = write_config({"max_steps": 2, "optimizer": "Lion",
                           "optimizer_params": {"learning_rate": 0.001, "beta_1": -0.1}})
    result = cli("validate", "--config", config)
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = next(number for number, text in enumerate(config.read_text().splitlines(), 1) if "beta_1" in text)
    said = keras_says("Lion", {"beta_1": -0.1}).split(" Received:")[0].rstrip(".")
    assert f"{config}:{line}: optimizer_params.beta_1: {said}. Received: -0.1 [out_of_range]" in result.output


def test_what_validate_accepts_keras_takes():
    """YAML's `momentum: 1` (an int) passes the table's rule, and the class gets the float Keras's SGD
    insists on (failed before: Keras refused the int at train time that validate had accepted)."""
    params = check_params("SGD", {"momentum": 1, "learning_rate": 1})
    with pytest.raises(ValueError):
        keras.optimizers.SGD(**params)  # Keras itself refuses the int
    optimizer = OPTIMIZER_CLS_NAMES["SGD"](**params)
    assert optimizer.momentum == 1.0 and isinstance(optimizer.momentum, float)


# Keras's own tests of these refusals (site-packages keras/src/optimizers/*_test.py), run on opt-train's
# classes: (test module, TestCase, test, {name the test module uses: opt-train's optimizer}).
UPSTREAM = [
    ("sgd_test", "SGDTest", "test_invalid_momentum", {"SGD": "SGD"}),
    ("lion_test", "LionTest", "test_invalid_beta_1", {"Lion": "Lion"}),
    ("adamw_test", "AdamWTest", "test_weight_decay_is_none", {"AdamW": "AdamW"}),
    *[("ftrl_test", "FtrlTest", f"test_invalid_{name}", {"Ftrl": "KerasFtrl"})
      for name in ("initial_accumulator_value", "learning_rate_power", "l1_regularization_strength",
                   "l2_regularization_strength", "l2_shrinkage_regularization_strength")],
    ("optimizer_test", "OptimizerTest", "test_clip_args", {"optimizers": {"SGD": "SGD"}}),
]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")  # Keras's own marks, read on import
@pytest.mark.parametrize("module, case, test, ours", UPSTREAM, ids=[test for _, _, test, _ in UPSTREAM])
def test_keras_s_own_tests_pass_on_opt_train_s_classes(module, case, test, ours, monkeypatch):
    import importlib
    import types
    import unittest

    tests = importlib.import_module(f"keras.src.optimizers.{module}")
    for name, target in ours.items():
        if isinstance(target, dict):  # a module the test reads classes from: only ours in it
            target = types.SimpleNamespace(**{attr: OPTIMIZER_CLS_NAMES[value] for attr, value in target.items()})
        else:
            target = OPTIMIZER_CLS_NAMES[target]
        monkeypatch.setattr(tests, name, target)
    result = unittest.TestResult()
    getattr(tests, case)(test).run(result)
    assert result.testsRun == 1 and result.wasSuccessful(), result.failures + result.errors
