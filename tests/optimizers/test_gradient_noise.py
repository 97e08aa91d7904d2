"""gradient_noise: the noise's statistics against the paper's formula and NumPy's estimates."""

import math

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.gradient_noise import gradient_noise
from opt_train.optimizers.user_transforms import TRANSFORMS

N = 200_000  # elements: the sample variance is then within ~1 % (3 sigma) of the true one


def _noise_at_steps(transform, grads, steps):
    """The noise (output - input) the transform adds at each call t = 0 .. max(steps)."""
    variables = [tf.Variable(tf.zeros_like(tf.convert_to_tensor(g))) for g in grads]
    state = transform.init(variables)
    update = tf.function(lambda g: transform.update(g, state, variables)[0])
    found = {}
    for t in range(max(steps) + 1):
        out = update(grads)
        if t in steps:
            found[t] = [o.numpy() - tf.convert_to_tensor(g).numpy() for o, g in zip(out, grads)]
    assert int(state.count.numpy()) == max(steps) + 1
    return found


def test_annealed_variance_is_eta_over_one_plus_t_to_the_gamma():
    eta, gamma = 0.3, 0.55
    grads = [tf.fill([N // 2], 1.5), tf.zeros([N // 4, 2])]
    noise = _noise_at_steps(gradient_noise(eta=eta, gamma=gamma), grads, steps=(0, 1, 9))
    for t, per_variable in noise.items():
        sample = np.concatenate([n.ravel() for n in per_variable]).astype(np.float64)
        expected_variance = eta / (1 + t) ** gamma
        np.testing.assert_allclose(np.var(sample), expected_variance, rtol=0.02)
        assert abs(np.mean(sample)) < 5 * math.sqrt(expected_variance / sample.size)
        # Gaussian, not truncated: about 4.55 % of the draws lie beyond two standard deviations.
        beyond = np.mean(np.abs(sample) > 2 * math.sqrt(expected_variance))
        np.testing.assert_allclose(beyond, math.erfc(2 / math.sqrt(2)), rtol=0.05)


def test_returnn_stddev_is_a_constant_truncated_normal():
    stddev = 0.25
    grads = [tf.zeros([N])]
    noise = _noise_at_steps(gradient_noise(stddev=stddev), grads, steps=(0, 5))
    # The variance of a standard normal truncated at +-2 (what tf.truncated_normal draws).
    density = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    truncated_variance = 1 - 2 * 2 * density / mass
    for per_variable in noise.values():
        sample = per_variable[0].astype(np.float64)
        np.testing.assert_allclose(np.var(sample), stddev**2 * truncated_variance, rtol=0.02)
        assert np.max(np.abs(sample)) <= 2 * stddev * (1 + 1e-6)


def test_noise_is_a_function_of_seed_step_and_variable():
    grads = [tf.zeros([64]), tf.zeros([64])]
    first = _noise_at_steps(gradient_noise(eta=1.0, seed=7), grads, steps=(0, 1))
    again = _noise_at_steps(gradient_noise(eta=1.0, seed=7), grads, steps=(0, 1))
    other = _noise_at_steps(gradient_noise(eta=1.0, seed=8), grads, steps=(0,))
    np.testing.assert_array_equal(first[0][0], again[0][0])
    np.testing.assert_array_equal(first[1][1], again[1][1])
    assert not np.array_equal(first[0][0], first[1][0])  # a new draw each step
    assert not np.array_equal(first[0][0], first[0][1])  # and each variable
    assert not np.array_equal(first[0][0], other[0][0])


def test_sparse_gradient_gets_noise_on_the_whole_variable_and_none_stays_none():
    sparse = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 4]), tf.constant([6, 3]))
    transform = gradient_noise(stddev=0.1)
    variables = [tf.Variable(tf.zeros([6, 3])), tf.Variable(tf.zeros([2]))]
    out, _ = transform.update([sparse, None], transform.init(variables), variables)
    assert out[1] is None
    dense = out[0].numpy()
    assert dense.shape == (6, 3)
    assert np.all(dense[[1, 2, 3, 5]] != 0)  # rows the sparse gradient did not name get noise too


@pytest.mark.parametrize(
    "params, message",
    [
        ({}, "needs exactly one of `eta`"),
        ({"eta": 0.1, "stddev": 0.1}, "needs exactly one of `eta`"),
        ({"eta": -0.1}, "`eta` must be > 0. Received: eta=-0.1"),
        ({"stddev": 0}, "`stddev` must be > 0"),
        ({"eta": 0.1, "gamma": -1}, "`gamma` must be >= 0"),
        ({"eta": 0.1, "seed": 1.5}, "`seed` must be an integer"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ValueError, match=message):
        TRANSFORMS.check("gradient_noise", params)
    with pytest.raises(ValueError, match=message):
        gradient_noise(**params)
