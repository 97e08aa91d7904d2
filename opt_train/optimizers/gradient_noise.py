"""Gradient noise (RETURNN's `gradient_noise`; Neelakantan et al., 2015), a transform written as a user would.

Two forms, picked by which parameter is given:

- the paper's annealed Gaussian noise, `eta` and `gamma`: at the transform's
  t-th update (t from 0)

  .. math::

      g \\leftarrow g + \\mathcal{N}\\left(0, \\sigma_t^2\\right), \\qquad
      \\sigma_t^2 = \\frac{\\eta}{(1 + t)^{\\gamma}}

  (the paper recommends eta in {0.01, 0.3, 1.0} and gamma = 0.55);
- RETURNN's form, `stddev` (the value of RETURNN's `gradient_noise: 0.3`):
  a constant standard deviation, drawn from `tf.truncated_normal` as RETURNN's
  `add_scaled_noise_to_gradients` does (values beyond two standard deviations
  are redrawn, so the variance is about 0.774 * stddev**2).

Noise is drawn for the whole variable, a sparse gradient included (RETURNN's
default). It is a function of `(seed, t, variable index)` only: every Horovod
rank adds the same noise, and a resumed run adds what an uninterrupted one
would have. `t` counts the calls this transform has seen: updates when it
sits after `accumulate` (the default place, after the last stage), micro-batches
when it sits after `unscale`.

YAML:

    gradient_transforms:
      - {factory: gradient_noise, params: {eta: 0.01, gamma: 0.55}, after: allreduce}

References:
    Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep
    Networks", 2015 (arXiv:1511.06807), equation 1.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class GradientNoiseState(NamedTuple):
    """`count`: calls so far, the t of the schedule (int64)."""

    count: Any


def gradient_noise(eta=None, gamma=0.55, stddev=None, seed=0):
    """Adds Gaussian noise to every gradient.

    Args:
        eta: the variance at t = 0 of the annealed noise (the paper's eta).
        gamma: the decay exponent of the variance. Defaults to `0.55`.
        stddev: a constant standard deviation instead (RETURNN's `gradient_noise`),
            truncated normal. Give `eta` or `stddev`, not both.
        seed: the noise's seed. Defaults to `0`.

    Returns:
        A `GradientTransform` whose state is a `GradientNoiseState`.
    """
    from opt_train.optimizers.user_transforms import TRANSFORMS

    params = TRANSFORMS.check("gradient_noise", {"eta": eta, "gamma": gamma, "stddev": stddev, "seed": seed})
    import tensorflow as tf

    from opt_train.optimizers.transform import GradientTransform

    def init(variables):
        del variables
        return GradientNoiseState(count=tf.Variable(0, dtype=tf.int64, trainable=False, name="noise_count"))

    def scale(t):
        if params["stddev"] is not None:
            return tf.constant(params["stddev"], tf.float32)
        variance = params["eta"] / tf.pow(1.0 + tf.cast(t, tf.float32), params["gamma"])
        return tf.sqrt(variance)

    def update(grads, state, variables=None, **extra):
        del variables, extra
        t = state.count.read_value()
        sigma = scale(t)
        base = tf.stack([tf.constant(params["seed"], tf.int64), t])
        out = []
        for index, gradient in enumerate(grads):
            if gradient is None:
                out.append(None)
                continue
            dense = tf.convert_to_tensor(gradient)
            seed_i = tf.random.experimental.stateless_fold_in(base, index)
            draw = tf.random.stateless_truncated_normal if params["stddev"] is not None else tf.random.stateless_normal
            noise = draw(tf.shape(dense), seed=seed_i, dtype=tf.float32) * sigma
            out.append(dense + tf.cast(noise, dense.dtype))
        state.count.assign_add(1)
        return out, state

    return GradientTransform(init, update)
