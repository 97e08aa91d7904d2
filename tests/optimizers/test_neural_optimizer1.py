"""Tests for NeuralOptimizer1 against reference 000's rule re-computed in NumPy.

Sparse semantics (RETURNN's `_apply`): `m` decays in every row, the gradient
term is added to the touched rows, only touched rows of the variable move.
"""

import numpy as np
import pytest
import tensorflow as tf
from parity import REQUIRED, assert_defaults, assert_parity
from test_custom import numpy_reference, touched

from opt_train.optimizers import registry
from opt_train.optimizers.neural_optimizer1 import NeuralOptimizer1


def neural_optimizer1_rule(beta_1, decrease_factor):
    def rule(w, g, rows, slots, lr, t):
        sel = touched(rows)
        m = beta_1 * slots["m"]
        m[sel] += (1 - beta_1) * g[sel]
        factor = np.where(np.sign(g[sel]) == np.sign(m[sel]), np.float32(1), decrease_factor)
        w[sel] -= lr * g[sel] * factor
        return w, {"m": m}

    return rule


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
def test_matches_numpy_rule(sparse):
    assert_parity(
        lambda lr: NeuralOptimizer1(learning_rate=lr, beta_1=0.8, decrease_factor=0.135),
        numpy_reference(neural_optimizer1_rule(*np.float32([0.8, 0.135])), ("m",)),
        sparse=sparse,
        steps=100,
    )


def test_step_shrinks_where_gradient_disagrees_with_its_average():
    var = tf.Variable([0.0, 0.0])
    optimizer = NeuralOptimizer1(learning_rate=1.0, beta_1=0.5, decrease_factor=0.1)
    optimizer.apply_gradients([(tf.constant([1.0, 1.0]), var)])  # m = [0.5, 0.5]
    optimizer.apply_gradients([(tf.constant([-0.2, 2.0]), var)])  # m = [0.15, 1.25]
    # Element 0: sign(g) = -1 != sign(m) -> step 0.1 * -0.2; element 1 agrees -> 2.0.
    np.testing.assert_allclose(var.numpy(), [-1.0 + 0.02, -1.0 - 2.0], rtol=1e-6)


def test_sparse_decays_average_in_untouched_rows():
    table = tf.Variable(np.zeros((3, 1), np.float32))
    optimizer = NeuralOptimizer1(learning_rate=0.1, beta_1=0.5)
    optimizer.apply_gradients([(tf.ones((3, 1)), table)])
    grad = tf.IndexedSlices(tf.constant([[2.0]]), tf.constant([1]), tf.constant([3, 1]))
    optimizer.apply_gradients([(grad, table)])
    np.testing.assert_allclose(optimizer.get_slot(table, "m").numpy()[:, 0], [0.25, 1.25, 0.25])
    np.testing.assert_allclose(table.numpy()[:, 0], [-0.1, -0.3, -0.1], rtol=1e-6)


def test_defaults_follow_reference_000():
    # RETURNN: NeuralOptimizer1(beta1=0.9, decrease_factor=0.1, **kwargs).
    assert_defaults(
        NeuralOptimizer1, {"learning_rate": REQUIRED, "beta_1": 0.9, "decrease_factor": 0.1}
    )


def test_config_round_trip_and_registry_spelling():
    optimizer = registry.get("NeuralOptimizer1", learning_rate=0.1, beta1=0.7, decrease_factor=0.2)
    config = optimizer.get_config()
    assert (config["beta_1"], config["decrease_factor"]) == (0.7, 0.2)
    assert NeuralOptimizer1.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.5}, "`beta_1` must be in [0, 1). Received: beta_1=1.5"),
        (
            {"decrease_factor": -0.1},
            "`decrease_factor` must be in [0, inf]. Received: decrease_factor=-0.1",
        ),
    ],
)
def test_rejects_bad_hyperparameters(kwargs, message):
    with pytest.raises(ValueError) as error:
        NeuralOptimizer1(learning_rate=0.1, **kwargs)
    assert str(error.value) == message
