"""Loss scalers: Backoff and LogMax trajectories against NumPy re-implementations of OpenSeq2Seq's
algorithms, Dynamic against Keras's LossScaleOptimizer, on a gradient stream with injected inf/NaN."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.loss_scaling import AutomaticLossScaler, StaticLossScale, get_loss_scaler, unscale
from opt_train.suggest import UnknownNameError


def amax_stream(n=40, seed=3):
    """Largest |unscaled gradient| per update, drifting in magnitude, with inf and NaN injected."""
    rng = np.random.default_rng(seed)
    stream = list(2.0 ** rng.normal(loc=-6.0, scale=3.0, size=n))
    for position, value in ((4, np.inf), (5, np.nan), (17, np.inf), (18, np.inf), (31, np.nan)):
        stream[position] = value
    return stream


def numpy_backoff(stream, scale_min, scale_max, step_factor, step_window):
    """OpenSeq2Seq BackoffScaler: start at scale_max; /factor on overflow; *factor every window finite steps."""
    scale, last_overflow, trajectory = scale_max, -1, []
    for iteration, amax in enumerate(stream):
        if not math.isfinite(amax):
            scale = min(max(scale / step_factor, scale_min), scale_max)
            last_overflow = iteration
        elif (iteration - last_overflow) % step_window == 0:
            scale = min(max(scale * step_factor, scale_min), scale_max)
        trajectory.append(scale)
    return trajectory


def numpy_logmax(stream, scale_min, scale_max, log_max, beta1, beta2, overflow_std_dev):
    """OpenSeq2Seq LogMaxScaler, including its 2**log_max overflow value and constant 16 headroom."""
    x_hat = slow_x_hat = xsquared_hat = 0.0
    b1_corr = b2_corr = 1.0
    trajectory = []
    for amax in stream:
        x = 2.0**log_max if not math.isfinite(amax) else math.log2(amax)
        x_hat = beta1 * x_hat + (1 - beta1) * x
        b1_corr *= beta1
        mu = x_hat / (1 - b1_corr)
        slow_x_hat = beta2 * slow_x_hat + (1 - beta2) * x
        xsquared_hat = beta2 * xsquared_hat + (1 - beta2) * x * x
        b2_corr *= beta2
        e_xsquared = xsquared_hat / (1 - b2_corr)
        slow_mu = slow_x_hat / (1 - b2_corr)
        sigma = math.sqrt(max(e_xsquared - slow_mu * slow_mu, 0.0))
        log_cutoff = sigma * overflow_std_dev + mu
        trajectory.append(min(max(2.0 ** (16 - log_cutoff), scale_min), scale_max))
    return trajectory


def run_scaler(scaler, stream):
    @tf.function
    def step(amax):
        scaler.update(tf.math.is_finite(amax), amax)
        return tf.identity(scaler.loss_scale)

    return [float(step(tf.constant(a, tf.float32))) for a in stream]


def test_backoff_defaults_are_openseq2seq():
    scaler = AutomaticLossScaler("backoff")
    inner = scaler.scaler
    # NVIDIA/OpenSeq2Seq@8681d38 automatic_loss_scaler.py: BackoffScaler's params.get('scale_max', 2.**14),
    # scale_min 1.0, step_factor 2.0, step_window 2000; its scale starts at scale_max.
    assert (inner.scale_min, inner.scale_max, inner.step_factor, inner.step_window) == (1.0, 16384.0, 2.0, 2000)
    assert float(scaler.loss_scale) == 16384.0


def test_logmax_defaults_are_openseq2seq():
    # The same file's LogMaxScaler: scale_max 2.**14, log_max 16., beta1 0.99, beta2 0.999,
    # overflow_std_dev 3.09; its scale starts at 1.0.
    inner = AutomaticLossScaler("logmax").scaler
    assert (inner.scale_min, inner.scale_max, inner.log_max, inner.beta1, inner.beta2, inner.overflow_std_dev) == (
        1.0, 16384.0, 16.0, 0.99, 0.999, 3.09)
    assert float(inner.loss_scale) == 1.0


def test_backoff_trajectory_matches_reference():
    params = {"scale_min": 4.0, "scale_max": 2.0**10, "step_factor": 2.0, "step_window": 3}
    stream = amax_stream()
    ours = run_scaler(AutomaticLossScaler("Backoff", params), stream)
    expected = numpy_backoff(stream, **params)
    np.testing.assert_allclose(ours, expected, rtol=0)
    assert min(expected) < max(expected)  # the stream really moves the scale both ways


def test_logmax_trajectory_matches_reference():
    params = {"scale_min": 1.0, "scale_max": 2.0**24, "log_max": 16.0, "beta1": 0.9, "beta2": 0.99,
              "overflow_std_dev": 3.09}
    stream = amax_stream()
    ours = run_scaler(AutomaticLossScaler("LogMax", params), stream)
    expected = numpy_logmax(stream, **params)
    np.testing.assert_allclose(ours, expected, rtol=2e-4)


def test_logmax_defaults_on_finite_stream():
    stream = [a for a in amax_stream() if math.isfinite(a)][:20]
    ours = run_scaler(AutomaticLossScaler("logmax"), stream)
    expected = numpy_logmax(stream, 1.0, 2.0**14, 16.0, 0.99, 0.999, 3.09)
    np.testing.assert_allclose(ours, expected, rtol=2e-4)


def test_dynamic_matches_keras_loss_scale_optimizer():
    stream = amax_stream()[:25]
    ours = run_scaler(AutomaticLossScaler("Dynamic", {"initial_scale": 2.0**8, "dynamic_growth_steps": 3}),
                      stream)
    variable = keras.Variable(np.zeros(2, np.float32))
    keras_optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(0.0), initial_scale=2.0**8, dynamic_growth_steps=3
    )
    keras_optimizer.build([variable])
    expected = []
    for amax in stream:
        keras_optimizer.apply([tf.constant([amax, 0.0], tf.float32)], [variable])
        expected.append(float(keras_optimizer.dynamic_scale.numpy()))
    np.testing.assert_allclose(ours, expected, rtol=0)


def test_unscale_divides_in_float32_and_poisons_non_finite_loss():
    scaler = StaticLossScale(8.0)
    transform = unscale(scaler)
    grads = [tf.constant([8.0, 16.0], tf.float16), tf.IndexedSlices(tf.constant([[4.0]]), tf.constant([0]),
                                                                     tf.constant([2, 1]))]
    out, _ = transform.update(grads, transform.init([]))
    assert out[0].dtype == tf.float32
    np.testing.assert_array_equal(out[0].numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(out[1].values.numpy(), [[0.5]])
    poisoned, _ = transform.update(grads, transform.init([]), loss_is_finite=tf.constant(False))
    assert np.isnan(poisoned[0].numpy()).all()


def test_unscale_with_unit_scale_poisons_only_one_gradient():
    transform = unscale(StaticLossScale(1.0))
    grads = [tf.constant([1.0]), tf.constant([2.0])]
    out, _ = transform.update(grads, transform.init([]), loss_is_finite=tf.constant(False))
    assert np.isnan(out[0].numpy()).all() and out[1] is grads[1]


def test_get_loss_scaler_and_errors():
    assert isinstance(get_loss_scaler(128), StaticLossScale)
    assert get_loss_scaler("LOGMAX").algorithm == "LogMax"
    with pytest.raises(UnknownNameError, match="did you mean 'Backoff'"):
        get_loss_scaler("Backof")
    with pytest.raises(UnknownNameError, match="did you mean 'step_window'"):
        get_loss_scaler("Backoff", {"step_windw": 3})
    with pytest.raises(ValueError, match="`scale_min` must be > 0. Received: scale_min=0"):
        get_loss_scaler("Backoff", {"scale_min": 0})
    with pytest.raises(ValueError, match="`loss_scaling_params` needs an automatic"):
        get_loss_scaler(2.0, {"scale_min": 1.0})


@pytest.mark.parametrize(
    "params",
    [
        {"scale_min": 1.0, "scale_max": 3.0**12, "step_factor": 3.0, "step_window": 1},
        {"scale_min": 0.5, "scale_max": 1e6, "step_factor": 1.7, "step_window": 5},
    ],
)
def test_backoff_long_stream_any_factor_and_window(params):
    rng = np.random.default_rng(11)
    stream = [float(a) for a in 2.0 ** rng.normal(-6.0, 3.0, size=200)]
    for position in rng.choice(200, 40, replace=False):
        stream[position] = math.inf
    ours = run_scaler(AutomaticLossScaler("Backoff", params), stream)
    # float32 state against the float64 reference: one rounding per step at most.
    np.testing.assert_allclose(ours, numpy_backoff(stream, **params), rtol=2e-6)


def test_backoff_resumes_exactly_mid_window(tmp_path):
    params = {"scale_min": 1.0, "scale_max": 2.0**10, "step_factor": 2.0, "step_window": 4}
    stream = amax_stream()
    whole = run_scaler(AutomaticLossScaler("Backoff", params), stream)
    first = AutomaticLossScaler("Backoff", params)
    head = run_scaler(first, stream[:22])
    path = tf.train.Checkpoint(scaler=first).write(str(tmp_path / "ckpt"))
    second = AutomaticLossScaler("Backoff", params)
    tf.train.Checkpoint(scaler=second).read(path).assert_consumed()
    assert head + run_scaler(second, stream[22:]) == whole


def test_backoff_without_parameters_follows_openseq2seq_s_defaults():
    """automatic_loss_scaler.py: scale_min 1.0, scale_max 2.**14 (also the first scale), factor 2.0, window 2000."""
    stream = [float(a) for a in 2.0 ** np.random.default_rng(2).normal(-6.0, 3.0, size=60)]
    for position in (0, 1, 2, 7, 30, 31):
        stream[position] = math.inf
    ours = run_scaler(get_loss_scaler("Backoff"), stream)
    expected = numpy_backoff(stream, scale_min=1.0, scale_max=16384.0, step_factor=2.0, step_window=2000)
    np.testing.assert_array_equal(ours, expected)
    assert ours[0] == 8192.0  # started at 2**14, halved by the first overflow
