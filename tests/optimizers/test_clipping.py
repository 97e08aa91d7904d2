"""Clipping by global norm: invariants, and the formula re-computed in NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.clipping import clip_by_global_norm


def _grads():
    return [tf.constant([[3.0, -4.0], [1.0, 2.0]]), tf.constant([0.5, -6.0])]


def _run(max_norm, grads):
    variables = [tf.Variable(tf.zeros_like(g)) for g in grads]
    transform = clip_by_global_norm(max_norm)
    state = transform.init(variables)
    out, state = transform.update(grads, state, variables)
    return [g.numpy() for g in out], state


def test_matches_numpy_formula_and_cap():
    grads = _grads()
    out, state = _run(2.0, grads)
    norm = np.sqrt(sum(np.sum(g.numpy() ** 2) for g in grads))
    expected = [g.numpy() * 2.0 / max(norm, 2.0) for g in grads]
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(np.sqrt(sum(np.sum(g**2) for g in out)), 2.0, rtol=1e-6)
    np.testing.assert_allclose(state.norm.numpy(), norm, rtol=1e-6)
    np.testing.assert_allclose(state.clipped_norm.numpy(), 2.0, rtol=1e-6)


def test_below_cap_is_untouched():
    grads = _grads()
    out, _ = _run(100.0, grads)
    for got, g in zip(out, grads):
        np.testing.assert_array_equal(got, g.numpy())


def test_clipping_twice_equals_clipping_once():
    once, _ = _run(1.5, _grads())
    twice, _ = _run(1.5, [tf.constant(g) for g in once])
    for a, b in zip(once, twice):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_sparse_gradient_stays_sparse_and_none_passes():
    sparse = tf.IndexedSlices(tf.constant([[3.0, 4.0]]), tf.constant([1]), tf.constant([3, 2]))
    variables = [tf.Variable(tf.zeros([3, 2])), tf.Variable(0.0)]
    transform = clip_by_global_norm(1.0)
    out, _ = transform.update([sparse, None], transform.init(variables), variables)
    assert isinstance(out[0], tf.IndexedSlices) and out[1] is None
    np.testing.assert_allclose(out[0].values.numpy(), [[0.6, 0.8]], rtol=1e-6)


def test_rejects_non_positive_cap():
    with pytest.raises(ValueError, match="`max_grad_norm` must be > 0. Received: max_grad_norm=0"):
        clip_by_global_norm(0)
