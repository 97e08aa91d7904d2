"""Every wrapped Keras optimizer takes a zero-argument callable for any hyperparameter, as TF1 and Keras 2 did.

References: the same class given the constant (identical weights), and the same class whose
attribute is set to the new constant between steps (what Keras reads at each update).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import keras_family

# A non-default value for each numeric hyperparameter of each wrapped class.
HYPERPARAMETERS = {
    "SGD": {"momentum": 0.9},
    "Adamax": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "Nadam": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "AdamW": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3, "weight_decay": 0.01},
    "Adafactor": {"beta_2_decay": -0.7, "epsilon_1": 1e-29, "epsilon_2": 1e-3, "clip_threshold": 0.9},
    "Lion": {"beta_1": 0.8, "beta_2": 0.95},
    "Lamb": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "Muon": {"adam_beta_1": 0.8, "adam_beta_2": 0.99, "epsilon": 1e-3, "momentum": 0.9, "adam_lr_ratio": 0.5},
    "ScheduleFreeAdamW": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "KerasAdam": {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-3},
    "KerasAdagrad": {"epsilon": 1e-3, "initial_accumulator_value": 0.2},
    "KerasAdadelta": {"rho": 0.9, "epsilon": 1e-3},
    "KerasFtrl": {"learning_rate_power": -0.4, "initial_accumulator_value": 0.2, "l1_regularization_strength": 0.01,
                  "l2_regularization_strength": 0.01, "l2_shrinkage_regularization_strength": 0.01, "beta": 0.1},
    "KerasRMSprop": {"rho": 0.8, "momentum": 0.5, "epsilon": 1e-3},
}
CASES = [(name, param, value) for name, params in HYPERPARAMETERS.items() for param, value in params.items()]
GRADIENTS = [np.array([[0.5, -1.0], [2.0, 0.1]], np.float32), np.array([[-0.2, 0.4], [1.0, -0.5]], np.float32),
             np.array([[1.5, 0.3], [-0.7, 0.2]], np.float32), np.array([[0.1, -0.3], [0.6, 0.9]], np.float32)]


def _run(optimizer, before_step=None):
    # Muon's orthogonalised path wants a 2-D kernel; all others take any shape.
    variable = keras.Variable(np.array([[1.0, -2.0], [0.5, 0.25]], np.float32), name="dense_kernel")
    for step, grad in enumerate(GRADIENTS):
        if before_step is not None:
            before_step(step)
        optimizer.apply_gradients([(tf.constant(grad), variable)])
    return variable.numpy()


def test_every_wrapped_class_is_covered():
    assert set(HYPERPARAMETERS) == set(keras_family.WRAPPERS)


@pytest.mark.parametrize("name, param, value", CASES, ids=[f"{n}-{p}" for n, p, _ in CASES])
def test_a_callable_gives_the_constants_weights(name, param, value):
    cls = keras_family.WRAPPERS[name]
    constant = _run(cls(0.05, **{param: value}))
    called = _run(cls(0.05, **{param: lambda: value}))
    np.testing.assert_array_equal(called, constant)


@pytest.mark.parametrize("name, param, value", CASES, ids=[f"{n}-{p}" for n, p, _ in CASES])
def test_a_callable_is_read_at_each_update(name, param, value):
    """Steps 1-2 at the value, 3-4 at another: as the class whose attribute is set between steps."""
    cls = keras_family.WRAPPERS[name]
    other = value * 0.5
    current = [value]

    def switch(step):
        if step == 2:
            current[0] = other

    called = _run(cls(0.05, **{param: lambda: current[0]}), before_step=switch)
    reference = cls(0.05, **{param: value})

    def set_attribute(step):
        if step == 2:
            setattr(reference, param, other)

    expected = _run(reference, before_step=set_attribute)
    np.testing.assert_allclose(called, expected, rtol=1e-6, atol=1e-7)
    assert callable(getattr(cls(0.05, **{param: lambda: value}), param))


@pytest.mark.parametrize("name, param", [("SGD", "momentum"), ("KerasRMSprop", "momentum"), ("KerasAdam", "beta_1")])
def test_a_callable_reading_a_variable_works_inside_tf_function(name, param):
    """Keras branches on `momentum`; a tensor-valued callable takes the general path, same numbers."""
    cls = keras_family.WRAPPERS[name]
    knob = tf.Variable(0.9)
    optimizer = cls(0.05, **{param: lambda: knob.read_value()})
    variable = keras.Variable(np.array([[1.0, -2.0], [0.5, 0.25]], np.float32))

    @tf.function
    def step(grad):
        optimizer.apply_gradients([(grad, variable)])

    reference = cls(0.05, **{param: 0.9})
    expected = keras.Variable(np.array([[1.0, -2.0], [0.5, 0.25]], np.float32))
    for index, grad in enumerate(GRADIENTS):
        if index == 2:
            knob.assign(0.0)  # momentum 0 through the general path: plain steps
            setattr(reference, param, 0.0)
        step(tf.constant(grad))
        reference.apply_gradients([(tf.constant(grad), expected)])
    np.testing.assert_allclose(variable.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)
