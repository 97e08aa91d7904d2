"""Tests for the TF-free dataset registry: names, parameter checks, no TensorFlow at import."""

import subprocess
import sys

import pytest

from opt_train.data import registry
from opt_train.suggest import UnknownNameError


def test_importing_registry_and_package_leaves_tensorflow_out():
    code = (
        "import sys, opt_train.data, opt_train.data.registry;"
        "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("given, canonical", [("digits", "digits"), ("Digits", "digits"),
                                              ("synthetic-classification", "synthetic_classification"),
                                              ("NPZ", "npz")])
def test_resolve_ignores_case_and_separators(given, canonical):
    assert registry.resolve(given) == canonical


def test_unknown_dataset_suggests_closest():
    with pytest.raises(UnknownNameError) as info:
        registry.resolve("digitz")
    assert info.value.suggestion == "digits"
    assert "unknown dataset 'digitz'" in str(info.value)


def test_check_params_fills_defaults():
    assert registry.check_params("reversal", {"seq_len": 5}) == {
        "vocab_size": 16, "seq_len": 5, "num_examples": 4000, "eval_fraction": 0.2, "seed": 0,
    }


def test_unknown_param_suggests_closest_and_names_it():
    with pytest.raises(UnknownNameError) as info:
        registry.check_params("digits", {"eval_fracton": 0.1})
    assert info.value.suggestion == "eval_fraction"
    assert info.value.param == "eval_fracton"


@pytest.mark.parametrize("name, params, message", [
    ("digits", {"eval_fraction": 1.0}, "`eval_fraction` must be in (0, 1). Received: eval_fraction=1.0"),
    ("synthetic_classification", {"num_classes": 1}, "`num_classes` must be an integer >= 2. Received: num_classes=1"),
    ("synthetic_regression", {"noise": -0.5}, "`noise` must be a number >= 0. Received: noise=-0.5"),
    ("reversal", {"seq_len": True}, "`seq_len` must be a positive integer. Received: seq_len=True"),
    ("npz", {}, "`path` is required for npz."),
    ("csv", {"path": "a.csv", "label_column": 1.5}, "`label_column` must be a column name or an integer index"),
])
def test_bad_values_raise_keras_style_errors(name, params, message):
    with pytest.raises(ValueError) as info:
        registry.check_params(name, params)
    assert message in str(info.value)


def test_task_choice_is_a_name_with_suggestion():
    with pytest.raises(UnknownNameError) as info:
        registry.check_params("csv", {"path": "a.csv", "task": "regresion"})
    assert info.value.suggestion == "regression"
    assert info.value.param == "task"


def test_param_errors_lists_every_problem():
    errors = registry.param_errors("synthetic_classification", {"num_classes": 0, "noise": -1, "bogus": 1})[1]
    assert sorted(e.param for e in errors) == ["bogus", "noise", "num_classes"]


def test_task_kind_follows_dataset_and_params():
    assert registry.task_kind("digits") == "classification"
    assert registry.task_kind("reversal") == "sequence"
    assert registry.task_kind("npz", {"path": "x", "task": "regression"}) == "regression"
    assert registry.task_kind("csv", {"path": "x"}) == "classification"
