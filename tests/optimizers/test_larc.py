"""LARC, both modes, against OpenSeq2Seq's formula re-computed in NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.larc import larc

RNG = np.random.default_rng(0)
VALUES = [RNG.normal(size=(3, 2)).astype(np.float32), RNG.normal(size=(4,)).astype(np.float32)]
GRADS = [RNG.normal(size=(3, 2)).astype(np.float32) * 5, RNG.normal(size=(4,)).astype(np.float32) * 1e-3]


def numpy_larc(values, grads, eta, mode, lr, min_update=1e-7, eps=1e-7):
    out, ratios = [], []
    for v, g in zip(values, grads):
        v_norm, g_norm = np.linalg.norm(v), np.linalg.norm(g)
        if mode == "clip":
            r = min(max(eta * v_norm / (lr * (g_norm + eps)), min_update), 1.0)
        else:
            r = max(eta * v_norm / (g_norm + eps), min_update)
        out.append(g * r)
        ratios.append(r)
    return out, np.array(ratios, np.float32)


def _run(**params):
    lr = params.pop("lr", 0.5)
    variables = [tf.Variable(v) for v in VALUES]
    transform = larc(**params)
    state = transform.init(variables)
    out, state = transform.update([tf.constant(g) for g in GRADS], state, variables, learning_rate=lr)
    return [g.numpy() for g in out], state


@pytest.mark.parametrize("mode", ["clip", "scale"])
def test_matches_numpy(mode):
    out, state = _run(larc_eta=0.01, larc_mode=mode)
    expected, ratios = numpy_larc(VALUES, GRADS, 0.01, mode, 0.5)
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(state.ratio.numpy(), ratios, rtol=1e-5)
    np.testing.assert_array_equal(state.clip_on.numpy(), ratios < 1.0)


def test_clip_mode_never_raises_the_rate():
    # A tiny gradient gives a huge trust ratio: clip mode caps it at 1, scale mode does not.
    clipped, clip_state = _run(larc_eta=10.0, larc_mode="clip")
    scaled, _ = _run(larc_eta=10.0, larc_mode="scale")
    assert clip_state.ratio.numpy()[1] == 1.0
    np.testing.assert_array_equal(clipped[1], GRADS[1])
    assert np.linalg.norm(scaled[1]) > np.linalg.norm(GRADS[1]) * 100


def test_min_update_floors_the_ratio():
    _, state = _run(larc_eta=1e-12, larc_mode="scale", min_update=1e-3)
    np.testing.assert_allclose(state.ratio.numpy(), [1e-3, 1e-3], rtol=1e-6)


def test_errors_in_keras_wording():
    with pytest.raises(ValueError, match="`larc_eta` must be > 0. Received: larc_eta=-0.1"):
        larc(larc_eta=-0.1)
    with pytest.raises(ValueError, match="unknown larc_mode 'clipp'; did you mean 'clip'"):
        larc(larc_eta=0.1, larc_mode="clipp")


def test_clip_mode_divides_by_each_variable_s_group_rate():
    """Under optimizer groups a variable's `lr` is the run's times its group's multiplier."""
    out, state = _run(larc_eta=0.01, larc_mode="clip", rate_multipliers=lambda variables: [0.1, 1.0])
    first, ratios_first = numpy_larc(VALUES[:1], GRADS[:1], 0.01, "clip", 0.5 * 0.1)
    second, ratios_second = numpy_larc(VALUES[1:], GRADS[1:], 0.01, "clip", 0.5)
    for got, want in zip(out, first + second):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(state.ratio.numpy(), np.concatenate([ratios_first, ratios_second]), rtol=1e-5)
    unscaled, _ = _run(larc_eta=0.01, larc_mode="clip")
    assert ratios_first[0] < 1 and not np.allclose(out[0], unscaled[0])  # the first one's ratio follows its rate
