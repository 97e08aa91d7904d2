"""TensorBoard histograms counted in one pass over the data, for per-variable summaries of large models.

`tf.summary.histogram` (TensorBoard's histogram plugin) counts buckets by summing a
float64 one-hot matrix of N x 30: for a variable of a million weights that is a 240 MB
temporary per histogram. `buckets` computes the same `[k, 3]` tensor (left edge,
right edge, count) with the plugin's own index formula, counting by a segment sum.
Events are written with the plugin's metadata, so TensorBoard reads them as its own.
"""

from __future__ import annotations

import tensorflow as tf
from tensorboard.plugins.histogram import metadata

BUCKET_COUNT = 30  # TensorBoard's default


def buckets(data, bucket_count=BUCKET_COUNT):
    """The `[bucket_count, 3]` float64 histogram of `data` as TensorBoard's plugin lays it out.

    Buckets split [min, max] evenly; the last edge is max itself. When every value
    is the same, all edges are that value and the last bucket holds every count;
    empty data gives all zeros. A NaN value is counted nowhere, as in the plugin.
    """
    data = tf.reshape(tf.cast(data, tf.float64), [-1])
    size = tf.size(data)

    def empty():
        return tf.zeros([bucket_count, 3], tf.float64)

    def nonempty():
        low, high = tf.reduce_min(data), tf.reduce_max(data)
        return tf.cond(tf.equal(high - low, 0), lambda: _one_value(high, size, bucket_count),
                       lambda: _spread(data, low, high, bucket_count))

    return tf.cond(tf.equal(size, 0), empty, nonempty)


def _spread(data, low, high, bucket_count):
    width = (high - low) / bucket_count
    index = tf.minimum(tf.cast(tf.floor((data - low) / width), tf.int32), bucket_count - 1)
    # A negative index (a NaN cast to int) is dropped by the segment sum, as by a one-hot.
    counts = tf.math.unsorted_segment_sum(tf.ones_like(data), index, bucket_count)
    edges = tf.concat([tf.linspace(low, high, bucket_count + 1)[:-1], [high]], 0)
    return tf.stack([edges[:-1], edges[1:], counts], axis=1)


def _one_value(value, size, bucket_count):
    edges = tf.fill([bucket_count], value)
    counts = tf.concat([tf.zeros([bucket_count - 1], tf.float64), [tf.cast(size, tf.float64)]], 0)
    return tf.stack([edges, edges, counts], axis=1)


def write_histogram(name, data, step):
    """Writes `data`'s histogram to the default summary writer, as `tf.summary.histogram` would."""
    return tf.summary.write(
        name, buckets(data), step=step, metadata=metadata.create_summary_metadata(display_name=None, description=None)
    )
