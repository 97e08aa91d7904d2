"""iter_size_mode (RETURNN's summing accum_grad_multiple_step) and Keras's overwrite_with_gradient
variables under accumulation, each against an independent reference: a hand-written Keras loop, and
Keras's own `gradient_accumulation_steps`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.pipeline import optimize_loss
from tests.optimizers.test_optimize_loss import K, MICRO, batches, make_loss, make_problem, make_variables


def _summed_reference(init, data):
    """RETURNN's accumulation: one SGD step per K micro-batches on the SUM of their gradients."""
    variables = make_variables(init)
    loss = make_loss(variables, sparse=False)
    optimizer = keras.optimizers.SGD(learning_rate=0.01)
    stream = batches(data, MICRO)
    for start in range(0, len(stream), K):
        total = [tf.zeros_like(v) for v in variables]
        for batch in stream[start:start + K]:
            with tf.GradientTape() as tape:
                value = loss(batch)
            total = [t + tf.convert_to_tensor(g) for t, g in zip(total, tape.gradient(value, variables))]
        optimizer.apply(total, variables)
    return [v.numpy() for v in variables]


def test_sum_mode_applies_the_sum_of_the_micro_batch_gradients():
    init, data = make_problem()
    expected = _summed_reference(init, data)
    variables = make_variables(init)
    train_op = optimize_loss(make_loss(variables, sparse=False), "SGD", {"learning_rate": 0.01},
                             var_list=variables, iter_size=K, iter_size_mode="sum")
    for batch in batches(data, MICRO):
        train_op(batch)
    for got, want in zip(variables, expected):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=0)


def test_bad_mode_is_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="did you mean 'sum'"):
        optimize_loss(lambda b: 0.0, "SGD", {}, iter_size=2, iter_size_mode="summ")


def test_overwrite_with_gradient_variables_accumulate_the_maximum_as_keras_does():
    """A float8-style statistic: the variable is overwritten by its 'gradient', accumulated by maximum."""
    rng = np.random.default_rng(5)
    micro_batches = [tf.constant(rng.normal(size=(3,)).astype(np.float32)) for _ in range(3 * K)]

    def make():
        weights = keras.Variable(np.ones(3, np.float32), name="w")
        statistic = keras.Variable(np.zeros(3, np.float32), name="amax")
        statistic.overwrite_with_gradient = True
        return weights, statistic

    def loss_of(weights, statistic):
        def loss(batch):
            # d loss / d statistic = batch: the "gradient" the statistic is overwritten with.
            return tf.reduce_sum(weights * weights * batch) + tf.reduce_sum(statistic * batch)

        return loss

    weights, statistic = make()
    keras_loss = loss_of(weights, statistic)
    reference = keras.optimizers.SGD(learning_rate=0.1, gradient_accumulation_steps=K)
    for batch in micro_batches:
        with tf.GradientTape() as tape:
            value = keras_loss(batch)
        reference.apply(tape.gradient(value, [weights, statistic]), [weights, statistic])

    ours_weights, ours_statistic = make()
    train_op = optimize_loss(loss_of(ours_weights, ours_statistic), "SGD", {"learning_rate": 0.1},
                             var_list=[ours_weights, ours_statistic], iter_size=K)
    for batch in micro_batches:
        train_op(batch)
    np.testing.assert_allclose(ours_statistic.numpy(), statistic.numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(ours_weights.numpy(), weights.numpy(), rtol=1e-6)
    assert np.any(statistic.numpy() > 0)  # the maximum, not the mean, moved it


def test_config_key_is_checked_before_training(tmp_path):
    from opt_train.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 2\niter_size: 4\niter_size_mode: Sum\n")
    assert load_config([str(path)]).iter_size_mode == "sum"
    path.write_text("max_steps: 2\niter_size: 4\niter_size_mode: summ\n")
    with pytest.raises(ConfigError) as caught:
        load_config([str(path)])
    (issue,) = caught.value.issues
    assert (issue.key, issue.code, issue.line) == ("iter_size_mode", "unknown_name", 3)
    assert "did you mean 'sum'" in issue.message
