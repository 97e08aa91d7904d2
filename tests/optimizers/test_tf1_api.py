"""TF1 / Keras API forms: hyperparameters as callables or tensors, TF1's signatures and messages.

References: the same optimizer run with plain floats, TF1's own optimizers
(`tf.compat.v1.train`), and the messages TF1 and Keras give.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import OPTIMIZER_CLS_NAMES
from opt_train.optimizers.adagrad_da import AdagradDA, AdagradDAOptimizer

V1 = tf.compat.v1.train

# name -> hyperparameters (away from their defaults, so each one matters in the run).
HYPERPARAMETERS = {
    "Adam": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "LazyAdam": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "Momentum": {"momentum": 0.8},
    "Adagrad": {"initial_accumulator_value": 0.2},
    "ProximalAdagrad": {
        "initial_accumulator_value": 0.2,
        "l1_regularization_strength": 0.01,
        "l2_regularization_strength": 0.02,
    },
    "ProximalGradientDescent": {"l1_regularization_strength": 0.01, "l2_regularization_strength": 0.02},
    # Its initial accumulator must be a number: AdagradDA refuses a tensor there, where a TF1
    # caller's positional `global_step` would land.
    "AdagradDA": {
        "l1_regularization_strength": 0.01,
        "l2_regularization_strength": 0.02,
    },
    "Adadelta": {"rho": 0.9, "epsilon": 1e-3},
    "Ftrl": {
        "learning_rate_power": -0.5,
        "initial_accumulator_value": 0.2,
        "l1_regularization_strength": 0.01,
        "l2_regularization_strength": 0.02,
        "l2_shrinkage_regularization_strength": 0.01,
        "beta": 0.1,
    },
    "RMSProp": {"rho": 0.8, "momentum": 0.5, "epsilon": 1e-3},
    "NovoGrad": {"beta_1": 0.9, "beta_2": 0.9, "epsilon": 1e-3, "coupled_weight_decay": 0.01},
    "AMSGrad": {"beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-3},
    "CustomAdam": {"beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-3},
    "GradVarianceScaled": {"beta_1": 0.8, "beta_2": 0.9, "epsilon": 1e-3},
    "NeuralOptimizer1": {"beta_1": 0.8, "decrease_factor": 0.2},
}
CASES = [(name, param) for name, params in HYPERPARAMETERS.items() for param in params]


def _run(name, params, steps=3):
    """Variables after `steps` updates with one dense and one sparse gradient."""
    optimizer = OPTIMIZER_CLS_NAMES[name](learning_rate=0.1, **params)
    var = tf.Variable([[1.0, -2.0], [0.5, 0.25], [-1.5, 3.0]])
    table = tf.Variable(np.arange(10, dtype="float32").reshape(5, 2) / 10.0 - 0.2)
    for step in range(steps):
        dense = tf.constant([[0.5, -0.25], [1.0, 0.125], [-0.75, 0.5]]) * (step + 1)
        sparse = tf.IndexedSlices(
            tf.constant([[0.5, -1.0], [0.25, 0.5], [-0.5, 0.75]]) / (step + 1),
            tf.constant([0, 2, 2]),
            tf.constant([5, 2]),
        )
        optimizer.apply_gradients([(dense, var), (sparse, table)])
    return var.numpy(), table.numpy()


@pytest.mark.parametrize("kind", ["callable", "tensor"])
@pytest.mark.parametrize("name, param", CASES)
def test_hyperparameter_as_callable_or_tensor_gives_the_float_run(name, param, kind):
    floats = HYPERPARAMETERS[name]
    value = floats[param]
    wrapped = (lambda: value) if kind == "callable" else tf.constant(value)
    expected = _run(name, floats)
    actual = _run(name, {**floats, param: wrapped})
    for ours, reference in zip(actual, expected):
        np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-7)


def test_callable_momentum_matches_tf1():
    ours = OPTIMIZER_CLS_NAMES["Momentum"](learning_rate=0.1, momentum=lambda: 0.8)
    reference = V1.MomentumOptimizer(0.1, momentum=lambda: 0.8)
    ours_var = tf.Variable([1.0, -2.0])
    ref_var = tf.Variable([1.0, -2.0])
    for _ in range(3):
        gradient = tf.constant([0.5, -0.25])
        ours.apply_gradients([(gradient, ours_var)])
        reference.apply_gradients([(gradient, ref_var)])
    np.testing.assert_allclose(ours_var.numpy(), ref_var.numpy(), rtol=1e-6)


def test_minimize_takes_tf1s_positional_order():
    # TF1: minimize(loss, global_step=None, var_list=None, gate_gradients, aggregation_method,
    #               colocate_gradients_with_ops, name, grad_loss)
    ours_var = tf.Variable([1.0, -2.0])
    ref_var = tf.Variable([1.0, -2.0])
    ours_step = tf.Variable(0, dtype=tf.int64)
    ref_step = tf.Variable(0, dtype=tf.int64)
    ours = OPTIMIZER_CLS_NAMES["GradientDescent"](0.1)
    reference = V1.GradientDescentOptimizer(0.1)
    grad_loss = tf.constant(2.0)
    positional = (1, None, False, "m", grad_loss)
    ours.minimize(lambda: tf.reduce_sum(ours_var * ours_var), ours_step, [ours_var], *positional)
    reference.minimize(lambda: tf.reduce_sum(ref_var * ref_var), ref_step, [ref_var], *positional)
    np.testing.assert_array_equal(ours_var.numpy(), ref_var.numpy())
    assert int(ours_step.numpy()) == int(ref_step.numpy()) == 1


def test_no_variables_to_optimize_as_tf1_says_it():
    # TF1 says it where it builds a graph (its eager path has no variable list to check).
    with tf.Graph().as_default(), pytest.raises(ValueError, match=r"^No variables to optimize\.$"):
        V1.GradientDescentOptimizer(0.1).minimize(tf.constant(1.0), var_list=[])
    with pytest.raises(ValueError, match=r"^No variables to optimize\.$"):
        OPTIMIZER_CLS_NAMES["GradientDescent"](0.1).minimize(lambda: tf.constant(1.0), var_list=[])


def test_a_missing_gradient_warns_as_keras_does():
    used = tf.Variable([1.0])
    unused = tf.Variable([2.0], name="unused")
    optimizer = OPTIMIZER_CLS_NAMES["Adam"](0.1)
    with pytest.warns(UserWarning, match=r"Gradients do not exist for variables \['unused"):
        optimizer.minimize(lambda: tf.reduce_sum(used * used), var_list=[used, unused])
    np.testing.assert_array_equal(unused.numpy(), [2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer.minimize(lambda: tf.reduce_sum(used * used), var_list=[used])


@pytest.mark.parametrize(
    "name", ["Adam", "Momentum", "Adagrad", "RMSProp", "Ftrl", "Adadelta", "GradientDescent"]
)
def test_use_locking_is_accepted_and_kept(name):
    params = {"momentum": 0.9} if name == "Momentum" else {}
    optimizer = OPTIMIZER_CLS_NAMES[name](learning_rate=0.1, use_locking=True, **params)
    assert optimizer.use_locking is True
    clone = type(optimizer).from_config(optimizer.get_config())
    assert clone.use_locking is True
    var = tf.Variable([1.0, -2.0])
    optimizer.apply_gradients([(tf.constant([0.5, -0.25]), var)])
    assert not np.array_equal(var.numpy(), [1.0, -2.0])


def test_adagrad_da_in_tf1s_signature_counts_from_the_global_step():
    ours_step = tf.Variable(3, dtype=tf.int64)
    ref_step = tf.Variable(3, dtype=tf.int64)
    ours_var = tf.Variable([1.0, -2.0])
    ref_var = tf.Variable([1.0, -2.0])
    ours = AdagradDAOptimizer(0.1, ours_step, 0.1, 0.01, 0.02)
    reference = V1.AdagradDAOptimizer(0.1, ref_step, 0.1, 0.01, 0.02)
    assert isinstance(ours, AdagradDA)
    for _ in range(3):
        gradient = tf.constant([0.5, -0.25])
        ours.apply_gradients([(gradient, ours_var)], global_step=ours_step)
        reference.apply_gradients([(gradient, ref_var)], global_step=ref_step)
    assert int(ours_step.numpy()) == int(ref_step.numpy()) == 6
    np.testing.assert_allclose(ours_var.numpy(), ref_var.numpy(), rtol=1e-6)


def test_callable_momentum_through_the_registry_matches_tf1():
    """`get("MomentumOptimizer", momentum=callable)` (OpenSeq2Seq's optimize_loss path) as TF1's class."""
    from opt_train.optimizers.registry import get

    ours = get("MomentumOptimizer", learning_rate=0.1, momentum=lambda: 0.8)
    reference = V1.MomentumOptimizer(0.1, momentum=lambda: 0.8)
    ours_var, ref_var = tf.Variable([1.0, -2.0]), tf.Variable([1.0, -2.0])
    for _ in range(3):
        gradient = tf.constant([0.5, -0.25])
        ours.apply_gradients([(gradient, ours_var)])
        reference.apply_gradients([(gradient, ref_var)])
    np.testing.assert_allclose(ours_var.numpy(), ref_var.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="`momentum` must be"):
        get("MomentumOptimizer", learning_rate=0.1, momentum="fast")


@pytest.mark.parametrize("name", ["GradientDescent", "Momentum", "Adam"])
def test_compute_gradients_with_tensors_as_tf1(name):
    """TF1's optimizer_test testComputeGradientsWithTensors: the gradient is computed, applying it raises.

    TF1's own GradientDescentOptimizer is the reference; its slot optimizers fail earlier in eager
    mode (an AttributeError making the slot), where ours raise TF1's NotImplementedError too.
    """
    x = tf.convert_to_tensor(1.0)
    params = {"momentum": 0.9} if name == "Momentum" else {}
    optimizers = [OPTIMIZER_CLS_NAMES[name](3.0, **params)]
    if name == "GradientDescent":
        optimizers.append(V1.GradientDescentOptimizer(3.0))
    for optimizer in optimizers:
        grads_and_vars = optimizer.compute_gradients(lambda: x * x, [x])
        assert len(grads_and_vars) == 1
        grad, x_as_var = grads_and_vars[0]
        assert x_as_var is x and float(grad) == 2.0
        with pytest.raises(NotImplementedError, match="Trying to update a Tensor"):
            optimizer.apply_gradients(grads_and_vars)


def test_compute_gradients_of_an_unsupported_type_as_tf1():
    with pytest.raises(NotImplementedError, match="Trying to optimize unsupported type"):
        OPTIMIZER_CLS_NAMES["GradientDescent"](0.1).compute_gradients(lambda: tf.constant(1.0), ["w"])


KERAS_REFUSALS = [
    ("SGD", "SGD", {"momentum": 1.5}),
    ("Lion", "Lion", {"beta_1": 0.0}),
    ("KerasFtrl", "Ftrl", {"initial_accumulator_value": -1.0}),
    ("KerasFtrl", "Ftrl", {"learning_rate_power": 0.5}),
    ("KerasFtrl", "Ftrl", {"l1_regularization_strength": -1.0}),
    ("KerasFtrl", "Ftrl", {"l2_shrinkage_regularization_strength": -1.0}),
    ("SGD", "SGD", {"clipnorm": 1.0, "clipvalue": 1.0}),
    ("SGD", "SGD", {"ema_momentum": 1.5, "use_ema": True}),
    ("AdamW", "AdamW", {"weight_decay": None}),
    ("SGD", "SGD", {"learning_rate": "fast"}),
]


@pytest.mark.parametrize("ours, keras_name, kwargs", KERAS_REFUSALS)
def test_keras_family_refuses_in_keras_s_words(ours, keras_name, kwargs):
    import keras

    with pytest.raises(ValueError) as expected:
        getattr(keras.optimizers, keras_name)(**kwargs)
    with pytest.raises(ValueError) as got:
        OPTIMIZER_CLS_NAMES[ours](**kwargs)
    assert str(got.value) == str(expected.value)
    if hasattr(got.value, "code"):
        assert got.value.code in ("out_of_range", "conflict", "wrong_type", "missing")
