"""Accumulation: emits the float32 mean of k micro-batches once every k calls; k == 1 is free."""

import numpy as np
import tensorflow as tf

from opt_train.optimizers.accumulation import accumulate
from opt_train.optimizers.transform import GradientTransform, init_empty


def recording_inner(seen):
    """An inner stage that records what it is given (so the test sees exactly when it runs)."""

    def update(grads, state, variables=None, **extra):
        seen.append([tf.convert_to_tensor(g).numpy() for g in grads])
        return grads, state

    return GradientTransform(init_empty, update)


def test_mean_of_k_then_reset():
    variables = [tf.Variable(tf.zeros([2])), tf.Variable(tf.zeros([3, 2]))]
    seen = []
    transform = accumulate(3, recording_inner(seen))
    state = transform.init(variables)
    rng = np.random.default_rng(1)
    stream = [[rng.normal(size=(2,)).astype(np.float32), rng.normal(size=(3, 2)).astype(np.float32)]
              for _ in range(6)]
    emits = []
    for grads in stream:
        out, state = transform.update([tf.constant(g) for g in grads], state, variables)
        emits.append(bool(state.emit.numpy()))
    assert emits == [False, False, True, False, False, True]
    assert len(seen) == 2
    for update_index in range(2):
        window = stream[3 * update_index: 3 * update_index + 3]
        for part in range(2):
            np.testing.assert_allclose(seen[update_index][part],
                                       np.mean([g[part] for g in window], axis=0), rtol=1e-6)
    assert int(state.mini_step.numpy()) == 0
    for acc in state.accumulators:
        np.testing.assert_array_equal(acc.numpy(), 0.0)


def test_sparse_gradient_accumulates_dense():
    variables = [tf.Variable(tf.zeros([4, 2]))]
    seen = []
    transform = accumulate(2, recording_inner(seen))
    state = transform.init(variables)
    rows = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    for indices in ([0, 0], [3, 0]):  # a repeated row inside one slice, and across micro-batches
        sparse = tf.IndexedSlices(rows, tf.constant(indices), tf.constant([4, 2]))
        transform.update([sparse], state, variables)
    expected = np.zeros([4, 2], np.float32)
    for indices in ([0, 0], [3, 0]):
        np.add.at(expected, indices, rows.numpy())
    np.testing.assert_allclose(seen[0][0], expected / 2)


def test_k_equal_one_has_no_accumulators_and_passes_through():
    variables = [tf.Variable(tf.zeros([2]))]
    seen = []
    transform = accumulate(1, recording_inner(seen))
    state = transform.init(variables)
    grad = tf.constant([1.0, 2.0])
    out, state = transform.update([grad], state, variables)
    assert state.accumulators == ()
    assert out[0] is grad and bool(state.emit.numpy())


def test_an_update_s_loss_is_finite_only_when_every_micro_batch_s_was():
    """The inner stages judge the whole update: a non-finite loss in any micro-batch reaches them."""
    from opt_train.optimizers.transform import report

    judged = tf.Variable(True)

    def inner_update(grads, state, variables=None, loss_is_finite=True, **extra):
        judged.assign(loss_is_finite)
        return grads, state

    transform = accumulate(2, GradientTransform(init_empty, inner_update))
    variables = [tf.Variable(tf.zeros([1]))]
    state = transform.init(variables)
    step = tf.function(lambda finite: transform.update([tf.ones([1])], state, variables, loss_is_finite=finite))
    judged_at_updates = []
    for finite in (False, True, True, True):
        step(tf.constant(finite))
        if bool(report(state)["update"]):
            judged_at_updates.append(bool(judged.numpy()))
    assert judged_at_updates == [False, True]
