"""Tests for AMSGrad against RETURNN's rule (no bias correction) re-computed in NumPy.

RETURNN has no sparse path: a sparse gradient is used densely, so every row's
averages decay. Where RETURNN divided 0 by 0 (a never-seen element with the
default epsilon=0) the reference, like AMSGrad, takes a zero step.
"""

import numpy as np
import pytest
import tensorflow as tf
from parity import assert_defaults, assert_parity
from test_custom import adaptive_lr_schedule, numpy_reference

from opt_train.optimizers import registry
from opt_train.optimizers.amsgrad import AMSGrad


def amsgrad_rule(beta_1, beta_2, epsilon, decay):
    def rule(w, g, rows, slots, lr, t):
        m = beta_1 * slots["m"] + (1 - beta_1) * g
        v = beta_2 * slots["v"] + (1 - beta_2) * g * g
        v_hat = np.maximum(slots["v_hat"], v)
        if decay:
            lr = lr / np.sqrt(np.float32(t))
        denominator = epsilon + np.sqrt(v_hat)
        ratio = np.divide(m, denominator, out=np.zeros_like(m), where=denominator != 0)
        w -= lr * ratio
        return w, {"m": m, "v": v, "v_hat": v_hat}

    return rule


@pytest.mark.one_case_fast
@pytest.mark.parametrize(
    "sparse, decay, epsilon", [(False, False, 0.0), (True, False, 0.0), (False, True, 1e-7)]
)
def test_matches_numpy_rule(sparse, decay, epsilon):
    beta_1, beta_2, eps = np.float32([0.9, 0.99, epsilon])
    assert_parity(
        lambda lr: AMSGrad(learning_rate=lr, decay=decay, epsilon=epsilon),
        numpy_reference(amsgrad_rule(beta_1, beta_2, eps, decay), ("m", "v", "v_hat")),
        sparse=sparse,
        steps=100,
        lr_schedule=adaptive_lr_schedule,
    )


def test_denominator_never_shrinks():
    var = tf.Variable([0.0])
    optimizer = AMSGrad(learning_rate=1.0, beta_1=0.0, beta_2=0.5)
    optimizer.apply_gradients([(tf.constant([2.0]), var)])  # v = 2, v_hat = 2
    optimizer.apply_gradients([(tf.constant([1.0]), var)])  # v = 1.5, v_hat stays 2
    np.testing.assert_allclose(optimizer.get_slot(var, "v_hat").numpy(), [2.0])
    np.testing.assert_allclose(var.numpy(), [-2.0 / np.sqrt(2.0) - 1.0 / np.sqrt(2.0)], rtol=1e-6)


def test_never_seen_elements_stay_finite_with_zero_epsilon():
    table = tf.Variable(np.ones((3, 2), np.float32))
    grad = tf.IndexedSlices(tf.constant([[1.0, -1.0]]), tf.constant([1]), tf.constant([3, 2]))
    AMSGrad(learning_rate=0.1).apply_gradients([(grad, table)])
    np.testing.assert_array_equal(table.numpy()[[0, 2]], np.ones((2, 2)))
    assert np.all(np.isfinite(table.numpy()))


def test_var_list_builds_the_slots_up_front():
    var = tf.Variable([1.0, 2.0])
    optimizer = AMSGrad(var_list=[var])
    assert optimizer.built
    np.testing.assert_array_equal(optimizer.get_slot(var, "v_hat").numpy(), [0.0, 0.0])
    assert "var_list" not in optimizer.get_config()


def test_defaults_follow_reference_000():
    # RETURNN: AMSGradOptimizer(learning_rate=0.001, decay=False, beta1=0.9, beta2=0.99,
    # epsilon=0.0, var_list=()).
    assert_defaults(
        AMSGrad,
        {
            "learning_rate": 0.001,
            "decay": False,
            "beta_1": 0.9,
            "beta_2": 0.99,
            "epsilon": 0.0,
            "var_list": (),
        },
    )


def test_config_round_trip_and_registry_spelling():
    optimizer = registry.get("AMSGradOptimizer", beta1=0.8, decay=True)
    config = optimizer.get_config()
    assert (config["beta_1"], config["decay"], config["beta_2"]) == (0.8, True, 0.99)
    assert AMSGrad.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.0}, "`beta_1` must be in [0, 1). Received: beta_1=1.0"),
        ({"beta_2": 2}, "`beta_2` must be in [0, 1). Received: beta_2=2"),
        ({"epsilon": -0.1}, "`epsilon` must be in [0, inf]. Received: epsilon=-0.1"),
    ],
)
def test_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        AMSGrad(**kwargs)
    assert str(error.value) == message
