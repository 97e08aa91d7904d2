"""Standardisation of numeric inputs: statistics of the train split (in memory or streamed), applied alike in training and in the export.

The statistics are per input element (each feature of a table, each position of an
array input), over the train split only, as Keras's `Normalization.adapt` computes them:
the mean and the population variance. A constant element has variance 0; it is stored
as 1, so that element is only centred, in training and in the exported layer alike
(Keras's layer would divide by its epsilon instead and blow up any other value).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from opt_train.errors import ParamError


# Rows standardised at once: float64 temporaries of a chunk, never of a whole 1 GiB array.
CHUNK_ROWS = 16384


class Statistics(NamedTuple):
    """Mean and variance (float64 arrays of the input shape) over `count` train examples."""

    mean: np.ndarray
    variance: np.ndarray
    count: int

    def apply(self, x, out=None):
        """`(x - mean) / sqrt(variance)` in float32 (NumPy), a chunk of rows at a time (no float64 copy of `x`).

        `out` (a float32 array of x's shape, `x` itself included) receives the result in place.
        """
        x = np.asarray(x)
        out = np.empty(x.shape, np.float32) if out is None else out
        scale = 1.0 / np.sqrt(self.variance)
        for start in range(0, len(x), CHUNK_ROWS):
            stop = start + CHUNK_ROWS
            out[start:stop] = (x[start:stop].astype(np.float64) - self.mean) * scale
        return out

    def to_json(self):
        return {"mean": self.mean.tolist(), "variance": self.variance.tolist(), "count": int(self.count)}

    @classmethod
    def from_json(cls, data):
        return cls(np.asarray(data["mean"], np.float64), np.asarray(data["variance"], np.float64), int(data["count"]))


def _finish(mean, m2, count):
    variance = m2 / max(count, 1)
    variance = np.where(variance > 0, variance, 1.0)  # a constant element is only centred
    return Statistics(mean, variance, int(count))


def from_array(x):
    """The Statistics of `x` (examples on axis 0), computed in float64 a chunk of rows at a time."""
    x = np.asarray(x)
    return from_batches(x[start:start + CHUNK_ROWS] for start in range(0, len(x), CHUNK_ROWS))


def from_batches(batches):
    """The Statistics of a stream of arrays (examples on axis 0), one batch in memory at a time.

    Batches are merged with Chan et al.'s pairwise update of (count, mean, sum of squared
    deviations), which keeps float64 precision where a running sum of squares would not.
    """
    count, mean, m2 = 0, None, None
    for batch in batches:
        batch = np.asarray(batch, dtype=np.float64)
        n = len(batch)
        if n == 0:
            continue
        batch_mean = batch.mean(axis=0)
        batch_m2 = ((batch - batch_mean) ** 2).sum(axis=0)
        if mean is None:
            count, mean, m2 = n, batch_mean, batch_m2
            continue
        total = count + n
        delta = batch_mean - mean
        mean = mean + delta * (n / total)
        m2 = m2 + batch_m2 + delta ** 2 * (count * n / total)
        count = total
    if mean is None:
        raise ParamError.at("data_params.normalize", "conflict",
                            "no train examples to compute the normalization statistics from")
    return _finish(mean, m2, count)


def keras_layer(statistics, input_shape):
    """A `keras.layers.Normalization` that computes `statistics.apply` (float32), for the export."""
    import keras

    axis = tuple(range(1, len(input_shape) + 1)) if len(input_shape) > 1 else -1
    return keras.layers.Normalization(
        axis=axis, mean=statistics.mean.astype(np.float32), variance=statistics.variance.astype(np.float32),
        dtype="float32", name="normalization",
    )
