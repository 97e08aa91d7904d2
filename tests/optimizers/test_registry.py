"""Tests for the optimizer registry: names (`table`), classes, parameter spellings, `get`, serialisation."""

import subprocess
import sys

import keras
import pytest

from opt_train.optimizers import classes, construct, registry, serialization, table
from opt_train.optimizers.adagrad_da import AdagradDA
from opt_train.optimizers.keras_family import SGD, KerasAdam, KerasRMSprop
from opt_train.optimizers.momentum import Momentum
from opt_train.suggest import UnknownNameError


def test_import_does_not_load_tensorflow():
    code = (
        "import sys, opt_train.optimizers, opt_train.optimizers.registry, opt_train.optimizers.serialization;"
        "import opt_train.optimizers.table as t, opt_train.optimizers.classes as c;"
        "t.resolve('adam'); t.OPTIMIZER_NAMES; t.describe(); 'Adam' in c.OPTIMIZER_CLS_NAMES;"
        "print('tensorflow' in sys.modules or 'keras' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("spelling, name", [
    ("adam", "Adam"), ("AdamOptimizer", "Adam"), ("MOMENTUM", "Momentum"),
    ("momentum_optimizer", "Momentum"), ("rmsprop", "RMSProp"), ("KerasRMSprop", "KerasRMSprop"),
    ("adagrad-da", "AdagradDA"), ("sgd", "SGD"),
])
def test_resolve_is_case_insensitive_and_allows_the_suffix(spelling, name):
    assert table.resolve(spelling) == name


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownNameError) as info:
        table.resolve("Momentun")
    assert info.value.suggestion == "Momentum"
    assert "did you mean 'Momentum'" in str(info.value)


@pytest.mark.parametrize("name", ["SyncReplicas", "SyncReplicasOptimizer"])
def test_sync_replicas_names_its_replacement(name):
    with pytest.raises(ValueError, match=r"num_gpus: N.*--np N.*distributed: tf"):
        registry.get(name)


def test_every_registered_name_imports_its_class():
    for name in table.OPTIMIZER_NAMES:
        cls = classes.OPTIMIZER_CLS_NAMES[name]
        assert issubclass(cls, keras.optimizers.Optimizer), name
        assert cls.__name__ == name, name
        assert hasattr(cls, "get_slot"), name


def test_cls_names_mapping_accepts_any_spelling():
    assert classes.OPTIMIZER_CLS_NAMES["momentumoptimizer"] is Momentum
    assert "adagradda" in classes.OPTIMIZER_CLS_NAMES
    assert "Adamm" not in classes.OPTIMIZER_CLS_NAMES
    assert len(classes.OPTIMIZER_CLS_NAMES) == len(table.OPTIMIZER_NAMES)


def test_get_builds_with_params():
    opt = registry.get("MomentumOptimizer", learning_rate=0.3, momentum=0.5)
    assert type(opt) is Momentum and opt.momentum == 0.5


@pytest.mark.parametrize("name, given, attribute, value", [
    ("Momentum", {"momentum": 0.9, "nesterov": True}, "use_nesterov", True),
    ("SGD", {"use_nesterov": True}, "nesterov", True),
    ("KerasAdam", {"beta1": 0.7, "beta2": 0.9}, "beta_1", 0.7),
    ("KerasRMSprop", {"decay": 0.8}, "rho", 0.8),
    ("GradientDescent", {"lr": 0.25}, "learning_rate", 0.25),
])
def test_both_parameter_spellings_are_accepted(name, given, attribute, value):
    opt = registry.get(name, **given)
    assert float(getattr(opt, attribute)) == pytest.approx(float(value))


def test_both_spellings_at_once_is_an_error():
    with pytest.raises(ValueError, match=r"`beta1` and `beta_1` are two spellings.*Received: beta1=0.8, beta_1=0.7"):
        registry.get("KerasAdam", beta1=0.8, beta_1=0.7)


def test_unknown_parameter_names_it_and_suggests():
    with pytest.raises(UnknownNameError) as info:
        registry.get("AdagradDA", l1_regularisation_strength=0.1)
    assert info.value.kind == "parameter of AdagradDA"
    assert info.value.suggestion == "l1_regularization_strength"


@pytest.mark.parametrize("argument, replacement", [
    ("gradient_accumulation_steps", "iter_size"), ("loss_scale_factor", "loss_scaling")])
def test_pipeline_arguments_point_to_the_config_key(argument, replacement):
    with pytest.raises(ValueError, match=replacement):
        registry.get("Adagrad", **{argument: 2})


def test_check_params_returns_the_class_spelling():
    assert construct.check_params("SGD", {"use_nesterov": True, "lr": 0.1}) == {
        "nesterov": True, "learning_rate": 0.1}


def test_get_accepts_paths_classes_instances_and_dicts():
    assert type(registry.get("tf.compat.v1.train.AdagradDAOptimizer")) is AdagradDA
    assert type(registry.get("opt_train.optimizers.momentum:Momentum", momentum=0.1)) is Momentum
    assert type(registry.get(keras.optimizers.Adam)) is KerasAdam
    instance = SGD()
    assert registry.get(instance) is instance
    assert type(registry.get({"class_name": "SGD", "config": {"momentum": 0.2}})) is SGD
    with pytest.raises(ValueError, match="not a Keras optimizer class"):
        registry.get("collections.OrderedDict")
    with pytest.raises(ValueError, match="Cannot import"):
        registry.get("no_such_module.Thing")


def test_user_class_by_dotted_path():
    assert type(registry.get(f"{__name__}.MyOptimizer")) is MyOptimizer


class MyOptimizer(keras.optimizers.SGD):
    pass


def test_exclude_from_weight_decay_is_accepted():
    opt = registry.get("AdamW", weight_decay=0.1, exclude_from_weight_decay=["bias"])
    assert opt._exclude_from_weight_decay_pattern.pattern == "bias"


def test_serialize_round_trip_rebuilds_our_class():
    opt = registry.get("Momentum", learning_rate=0.2, momentum=0.7, use_nesterov=True)
    clone = serialization.deserialize(serialization.serialize(opt))
    assert type(clone) is Momentum
    assert clone.get_config() == opt.get_config()


def test_serialize_round_trip_keeps_a_schedule():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    clone = serialization.deserialize(serialization.serialize(registry.get("SGD", learning_rate=schedule)))
    assert isinstance(clone._learning_rate, keras.optimizers.schedules.ExponentialDecay)


def test_deserialize_reads_keras_own_dicts_as_keras_classes():
    config = keras.optimizers.serialize(keras.optimizers.RMSprop(0.1, rho=0.8))
    clone = serialization.deserialize(config)
    assert type(clone) is KerasRMSprop and clone.rho == 0.8


def test_describe_lists_every_name_with_defaults():
    rows = {name: (family, params) for name, family, params in table.describe()}
    assert set(rows) == set(table.OPTIMIZER_NAMES)
    assert rows["Momentum"] == ("tf1", {"learning_rate": 0.01, "momentum": "required",
                                        "use_nesterov": False})
    assert rows["SGD"][1]["nesterov"] is False
    assert rows["AdamW"][1]["weight_decay"] == 0.004
    assert "clipnorm" not in rows["SGD"][1]
