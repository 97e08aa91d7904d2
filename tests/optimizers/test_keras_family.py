"""Tests for the wrapped Keras 3 optimizers: same math as Keras, plus the TF1 API."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import keras_family
from opt_train.optimizers.registry import get
from parity import assert_parity
from tests.support import optimizer_cases

FEW_STEPS = 30


@pytest.mark.parametrize("name", optimizer_cases(sorted(keras_family.KERAS_CLASSES)))
def test_wrapper_matches_its_keras_class(name):
    keras_class, _ = keras_family.KERAS_CLASSES[name]
    wrapper = keras_family.WRAPPERS[name]
    assert issubclass(wrapper, keras_class)
    assert_parity(lambda lr: wrapper(lr), lambda lr: keras_class(lr), steps=FEW_STEPS)


@pytest.mark.parametrize("name", ["SGD", "Adamax", "KerasAdam", "KerasRMSprop"])
def test_wrapper_matches_its_keras_class_on_sparse_gradients(name):
    keras_class, _ = keras_family.KERAS_CLASSES[name]
    kwargs = {"momentum": 0.9} if name in ("SGD", "KerasRMSprop") else {}
    assert_parity(
        lambda lr: keras_family.WRAPPERS[name](lr, **kwargs),
        lambda lr: keras_class(lr, **kwargs),
        steps=FEW_STEPS,
        sparse=True,
    )


def _built(optimizer, var):
    optimizer.apply_gradients([(tf.ones_like(var), var)])
    return optimizer


def test_sgd_momentum_slot_is_reachable():
    var = tf.Variable([1.0, 2.0])
    opt = _built(keras_family.SGD(0.1, momentum=0.9), var)
    assert opt.get_slot_names() == ["momentum"]
    np.testing.assert_allclose(opt.get_slot(var, "momentum").numpy(), [-0.1, -0.1], rtol=1e-6)


def test_sgd_without_momentum_has_no_slots():
    var = tf.Variable([1.0])
    opt = _built(keras_family.SGD(0.1), var)
    assert opt.get_slot_names() == []
    assert opt.get_slot(var, "momentum") is None


def test_keras_adam_slots_use_tf1_names():
    var = tf.Variable([1.0])
    opt = _built(keras_family.KerasAdam(0.1), var)
    assert opt.get_slot_names() == ["m", "v"]
    np.testing.assert_allclose(opt.get_slot(var, "m").numpy(), [0.1], rtol=1e-6)


def test_tf1_api_increments_global_step():
    var = tf.Variable([1.0])
    step = tf.Variable(0, dtype=tf.int64)
    opt = keras_family.Nadam(0.1)
    opt.minimize(lambda: tf.reduce_sum(var * var), var_list=[var], global_step=step)
    assert int(step.numpy()) == 1 and var.numpy()[0] < 1.0


@pytest.mark.parametrize("argument, replacement", [
    ("gradient_accumulation_steps", "iter_size"), ("loss_scale_factor", "loss_scaling")])
def test_pipeline_arguments_are_rejected(argument, replacement):
    with pytest.raises(ValueError, match=rf"`{argument}` is not offered.*`{replacement}`"):
        keras_family.AdamW(**{argument: 2})


def test_dotted_path_to_a_keras_class_gets_the_wrapper():
    opt = get("keras.optimizers.RMSprop", rho=0.8)
    assert type(opt) is keras_family.KerasRMSprop
    assert opt.rho == 0.8


def test_config_round_trip_keeps_the_wrapper():
    opt = keras_family.Lion(0.01, beta_1=0.8)
    clone = keras_family.Lion.from_config(opt.get_config())
    assert type(clone) is keras_family.Lion and clone.get_config() == opt.get_config()


def test_wrappers_cover_keras_optimizers():
    # every trainable Keras optimizer class is offered by name (wrappers and the
    # loss-scale wrapper are the pipeline's or not optimizers by themselves)
    not_offered = {"Optimizer", "LossScaleOptimizer", "MultiOptimizer", "OptimizerMap"}
    exported = {
        name for name in dir(keras.optimizers)
        if isinstance(getattr(keras.optimizers, name), type)
        and issubclass(getattr(keras.optimizers, name), keras.optimizers.Optimizer)
    }
    wrapped = {cls.__name__ for cls, _ in keras_family.KERAS_CLASSES.values()}
    assert exported - not_offered == wrapped
