"""Tests for GradVarianceScaled against the rule (reference 000 + RETURNN's updater.py) in NumPy.

Sparse semantics (RETURNN's `_apply`): `m` and `v` decay in every row, the new
terms are added to the touched rows, only touched rows of the variable move.
"""

import numpy as np
import pytest
import tensorflow as tf
from parity import REQUIRED, assert_defaults, assert_parity
from test_custom import numpy_reference, touched

from opt_train.optimizers import registry
from opt_train.optimizers.grad_variance_scaled import GradVarianceScaled


def grad_variance_scaled_rule(beta_1, beta_2, epsilon):
    def rule(w, g, rows, slots, lr, t):
        sel = touched(rows)
        m = beta_1 * slots["m"]
        m[sel] += (1 - beta_1) * g[sel]
        variance = (g[sel] - m[sel]) ** 2
        v = beta_2 * slots["v"]
        v[sel] += (1 - beta_2) * variance
        w[sel] -= lr * g[sel] * np.minimum(v[sel] / (variance + epsilon), np.float32(1))
        return w, {"m": m, "v": v}

    return rule


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.one_case_fast
def test_matches_numpy_rule(sparse):
    assert_parity(
        lambda lr: GradVarianceScaled(learning_rate=lr, beta_2=0.9),
        numpy_reference(grad_variance_scaled_rule(*np.float32([0.9, 0.9, 1e-8])), ("m", "v")),
        sparse=sparse,
        steps=100,
    )


def test_first_steps_by_hand():
    var = tf.Variable([0.0])
    optimizer = GradVarianceScaled(learning_rate=1.0, beta_1=0.5, beta_2=0.5, epsilon=0.0)
    optimizer.apply_gradients([(tf.constant([2.0]), var)])
    # m = 1, variance = 1, v = 0.5, factor = 0.5 -> step 1.0
    np.testing.assert_allclose(var.numpy(), [-1.0], rtol=1e-6)
    optimizer.apply_gradients([(tf.constant([4.0]), var)])
    # m = 2.5, variance = 2.25, v = 1.375, factor = 1.375 / 2.25 -> step 4 * 0.6111
    np.testing.assert_allclose(var.numpy(), [-1.0 - 4.0 * 1.375 / 2.25], rtol=1e-6)


def test_sparse_decays_averages_in_untouched_rows():
    table = tf.Variable(np.zeros((2, 1), np.float32))
    optimizer = GradVarianceScaled(learning_rate=1.0, beta_1=0.5, beta_2=0.5)
    optimizer.apply_gradients([(tf.ones((2, 1)), table)])
    before = table.numpy().copy()
    grad = tf.IndexedSlices(tf.constant([[3.0]]), tf.constant([1]), tf.constant([2, 1]))
    optimizer.apply_gradients([(grad, table)])
    np.testing.assert_allclose(optimizer.get_slot(table, "m").numpy()[:, 0], [0.25, 1.75])
    v = optimizer.get_slot(table, "v").numpy()[:, 0]
    np.testing.assert_allclose(v, [0.0625, 0.0625 + 0.5 * (3 - 1.75) ** 2])
    assert table.numpy()[0, 0] == before[0, 0]


def test_defaults_follow_reference_000():
    # RETURNN: GradVarianceScaledOptimizer(beta1=0.9, beta2=0.999, epsilon=1e-08, **kwargs).
    assert_defaults(
        GradVarianceScaled,
        {"learning_rate": REQUIRED, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-8},
    )


def test_config_round_trip_and_registry_spelling():
    optimizer = registry.get("GradVarianceScaledOptimizer", learning_rate=0.1, beta2=0.99)
    config = optimizer.get_config()
    assert (config["beta_1"], config["beta_2"], config["epsilon"]) == (0.9, 0.99, 1e-8)
    assert GradVarianceScaled.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": -0.5}, "`beta_1` must be in [0, 1). Received: beta_1=-0.5"),
        ({"beta_2": 1.0}, "`beta_2` must be in [0, 1). Received: beta_2=1.0"),
        ({"epsilon": -1e-8}, "`epsilon` must be in [0, inf]. Received: epsilon=-1e-08"),
    ],
)
def test_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        GradVarianceScaled(learning_rate=0.1, **kwargs)
    assert str(error.value) == message
