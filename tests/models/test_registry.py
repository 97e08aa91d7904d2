"""Tests for the TF-free model registry: names, parameter checks, factory specs, task fit."""

import subprocess
import sys

import pytest

from opt_train.models import registry
from opt_train.suggest import UnknownNameError
from opt_train.usercode import split_spec


def test_importing_registry_and_package_leaves_tensorflow_out():
    code = (
        "import sys, opt_train.models, opt_train.models.registry;"
        "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_names_and_resolve():
    assert set(registry.MODEL_NAMES) >= {"mlp", "cnn", "transformer"}
    assert registry.resolve("MLP") == "mlp"
    with pytest.raises(UnknownNameError) as info:
        registry.resolve("transfomer")
    assert info.value.suggestion == "transformer"


def test_check_params_fills_defaults():
    assert registry.check_params("mlp", {"hidden_units": [128]}) == {
        "hidden_units": [128], "activation": "relu", "dropout": 0.0,
    }
    assert registry.check_params("transformer", None)["d_model"] == 64


def test_unknown_param_and_activation_suggest():
    with pytest.raises(UnknownNameError) as info:
        registry.check_params("mlp", {"hidden_unit": [3]})
    assert info.value.suggestion == "hidden_units" and "unknown mlp parameter" in str(info.value)
    with pytest.raises(UnknownNameError) as info:
        registry.check_params("cnn", {"activation": "rellu"})
    assert info.value.suggestion == "relu" and info.value.param == "activation"


@pytest.mark.parametrize("name, params, message", [
    ("mlp", {"hidden_units": []}, "`hidden_units` must be a non-empty list of positive integers. Received: hidden_units=[]"),
    ("mlp", {"hidden_units": [64, 0]}, "`hidden_units` must be a non-empty list of positive integers"),
    ("mlp", {"dropout": 1.0}, "`dropout` must be in [0, 1). Received: dropout=1.0"),
    ("cnn", {"kernel_size": 0}, "`kernel_size` must be a positive integer. Received: kernel_size=0"),
    ("transformer", {"d_model": 30, "num_heads": 4},
     "`num_heads` must divide `d_model`. Received: num_heads=4, d_model=30"),
])
def test_bad_values(name, params, message):
    with pytest.raises(ValueError) as info:
        registry.check_params(name, params)
    assert message in str(info.value)


def test_factory_params_pass_through_unchecked():
    spec = {"factory": "my_pkg.models:make"}
    assert registry.check_params(spec, {"anything": 1}) == {"anything": 1}
    assert split_spec(spec) == ("my_pkg.models", "make")
    assert split_spec({"factory": "my_pkg.models.make"}) == ("my_pkg.models", "make")


@pytest.mark.parametrize("spec", [{"factory": "nomodule"}, {"factory": "pkg:"}, {"factory": 3},
                                  {"factory": "a:b", "extra": 1}])
def test_malformed_factory_specs(spec):
    with pytest.raises(ValueError, match="factory"):
        registry.check_params(spec, {})


def test_check_task():
    registry.check_task("mlp", "regression")
    registry.check_task({"factory": "a:b"}, "sequence")
    with pytest.raises(ValueError, match="Model `transformer` cannot be trained on a classification task"):
        registry.check_task("transformer", "classification")


def test_every_activation_name_is_known_to_keras():
    import keras

    for name in registry.ACTIVATIONS:
        assert callable(keras.activations.get(name)), name
