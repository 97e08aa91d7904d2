"""Counting skipped updates: `count_skipped_updates` against Keras's LossScaleOptimizer, which skips the same ones."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import optimize_loss

UPDATES = 12
LR = 0.01
# A scale at float32's top: the first updates overflow, and growing after every 2 finite
# updates keeps overflowing now and then, so skips happen all along the run.
INITIAL_SCALE = 2.0**127
GROWTH_STEPS = 2


def make_data():
    return np.random.default_rng(0).normal(size=(80, 4, 3)).astype(np.float32)


def make_loss(weights):
    def loss(batch):
        return tf.reduce_mean(tf.square(batch @ weights - 1.0))

    return loss


def keras_reference(data, updates, count_skipped):
    """Keras's LossScaleOptimizer on the same stream: weights, micro-batches read, applied updates.

    Its `iterations` counts applied updates only; a run stops after `updates` of them
    (OpenSeq2Seq's counting), or after `updates` batches whether applied or not.
    """
    weights = tf.Variable(np.ones((3, 1), np.float32))
    optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(LR), initial_scale=INITIAL_SCALE, dynamic_growth_steps=GROWTH_STEPS
    )
    optimizer.build([weights])
    loss = make_loss(weights)
    consumed = 0
    while (consumed if count_skipped else int(optimizer.iterations.numpy())) < updates:
        with tf.GradientTape() as tape:
            scaled = optimizer.scale_loss(loss(tf.constant(data[consumed])))
        optimizer.apply(tape.gradient(scaled, [weights]), [weights])
        consumed += 1
    return weights.numpy(), consumed, int(optimizer.iterations.numpy())


def make_train_op(count_skipped, iter_size=1, **options):
    weights = tf.Variable(np.ones((3, 1), np.float32))
    train_op = optimize_loss(
        make_loss(weights), "SGD", {"learning_rate": LR}, var_list=[weights], iter_size=iter_size,
        loss_scaling="Dynamic",
        loss_scaling_params={"initial_scale": INITIAL_SCALE, "dynamic_growth_steps": GROWTH_STEPS},
        count_skipped_updates=count_skipped, **options,
    )
    return weights, train_op


@pytest.mark.parametrize("count_skipped", [False, True], ids=["openseq2seq_counting", "count_skipped"])
@pytest.mark.parametrize("driven_by", ["run", "update"])
def test_max_steps_counts_applied_updates_unless_told(count_skipped, driven_by):
    data = make_data()
    expected, consumed, applied = keras_reference(data, UPDATES, count_skipped)
    assert consumed - applied >= 3  # the reference skips updates, early and later on

    weights, train_op = make_train_op(count_skipped)
    iterator = iter(tf.data.Dataset.from_tensor_slices(data))
    if driven_by == "run":
        train_op.run(iterator, UPDATES)
    else:
        for _ in range(UPDATES):
            train_op.update(iterator, statistics=False)

    assert int(train_op.global_step.numpy()) == UPDATES
    assert int(train_op.optimizer.iterations.numpy()) == applied
    assert train_op.data_position == consumed
    np.testing.assert_allclose(weights.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_an_update_of_several_micro_batches_counts_as_one():
    data = make_data()
    weights, train_op = make_train_op(False, iter_size=2)
    iterator = iter(tf.data.Dataset.from_tensor_slices(data))
    mean_loss = train_op.run(iterator, 5)
    result = train_op.update(iterator)
    assert int(result["global_step"]) == int(train_op.global_step.numpy()) == 6
    assert int(train_op.optimizer.iterations.numpy()) == 6
    skipped = int(result["skipped_steps"])
    assert skipped >= 1
    assert train_op.data_position == 2 * (6 + skipped)
    assert np.isfinite(float(mean_loss)) and np.isfinite(float(result["loss"]))


@pytest.mark.parametrize("bound", [None, 5])
def test_a_run_that_skips_every_update_stops(bound):
    """Nothing ever counts, so `run` must end by the overflow bound: the key's, or its default 20."""
    weights = tf.Variable(np.ones((3, 1), np.float32))

    def loss(batch):
        return tf.reduce_mean(batch @ weights) * float("nan")

    train_op = optimize_loss(loss, "SGD", {"learning_rate": LR}, var_list=[weights], iter_size=2,
                             count_skipped_updates=False, max_consecutive_overflows=bound)
    iterator = iter(tf.data.Dataset.from_tensor_slices(make_data()).repeat())
    train_op.run(iterator, 3)
    limit = bound or 20
    assert int(train_op.global_step.numpy()) == 0
    assert train_op.data_position == 2 * limit
    assert train_op.stop_reason.startswith(f"{limit} consecutive non-finite updates")
    np.testing.assert_array_equal(weights.numpy(), np.ones((3, 1), np.float32))
