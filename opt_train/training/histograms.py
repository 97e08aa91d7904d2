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

    A straight graph of about 50 ops: each case is computed and the right one selected,
    instead of the plugin's `tf.cond`s around `tf.linspace` (branch graphs, and dozens of
    ops for the edges alone). A model's per-variable summaries trace one histogram per
    tensor: for a small transformer's 44 that way took longer than tracing its update.
    """
    data = tf.reshape(tf.cast(data, tf.float64), [-1])
    size = tf.size(data)
    low, high = tf.reduce_min(data), tf.reduce_max(data)
    one_value = tf.equal(high - low, 0)
    histogram = tf.where(
        one_value, _one_value(high, size, bucket_count), _spread(data, low, high, one_value, bucket_count)
    )
    return tf.where(tf.equal(size, 0), tf.zeros([bucket_count, 3], tf.float64), histogram)


def _spread(data, low, high, one_value, bucket_count):
    # Where every value is the same this case is not the one selected: a width of 1 only
    # keeps its division finite. Otherwise (NaN and inf included) the plugin's width.
    width = tf.where(one_value, tf.ones_like(high), high - low) / bucket_count
    index = tf.minimum(tf.cast(tf.floor((data - low) / width), tf.int32), bucket_count - 1)
    # A negative index (a NaN cast to int) is dropped by the segment sum, as by a one-hot.
    counts = tf.math.unsorted_segment_sum(tf.ones_like(data), index, bucket_count)
    # The plugin's edges, linspace(low, high, bucket_count + 1) with max itself last: LinSpace
    # is that one op (low + i * step); its first edge is low itself, as linspace's is.
    inner = tf.raw_ops.LinSpace(start=low, stop=high, num=bucket_count + 1)[1:bucket_count]
    return tf.stack([tf.concat([[low], inner], 0), tf.concat([inner, [high]], 0), counts], axis=1)


def _one_value(value, size, bucket_count):
    edges = tf.fill([bucket_count], value)
    counts = tf.concat([tf.zeros([bucket_count - 1], tf.float64), [tf.cast(size, tf.float64)]], 0)
    return tf.stack([edges, edges, counts], axis=1)


# One graph for every histogram a process writes, traced once; each summarized tensor, flattened, is a call of
# it. Traced into each summary graph instead, its ~50 ops were built again for every tensor, and
# grappler optimized every copy at the graph's first run: ResNet-50's 214 per-variable histograms took
# 8.7 s of CPU to trace and first run, 2.7 s this way (each later write 0.49 s against 0.42; 2026-11-29).
# Not inlined (`_noinline`): inlined at the first run, the calls were as costly as the copies.
_flat_buckets = tf.function(buckets, input_signature=[tf.TensorSpec([None], tf.float64)], autograph=False,
                            experimental_attributes={"_noinline": True})


def write_histogram(name, data, step):
    """Writes `data`'s histogram to the default summary writer, as `tf.summary.histogram` would."""
    flat = tf.reshape(tf.cast(data, tf.float64), [-1])
    plugin = metadata.create_summary_metadata(display_name=None, description=None)
    return tf.summary.write(name, _flat_buckets(flat), step=step, metadata=plugin)
