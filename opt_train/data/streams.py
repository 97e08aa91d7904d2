"""Epoch streams: stateless window shuffles, and starting at a batch position (batches per epoch: data/counts.py).

Every function opt-train hands to tf.data (`map`, `flat_map`, `interleave`) is marked
`tf.autograph.experimental.do_not_convert`: none has Python control flow over tensors,
and AutoGraph's conversion of them cost every run ~0.35 s of CPU (its first conversion
also imports AutoGraph's transformer). A user's own factory functions keep AutoGraph:
they are traced as tf.data traces them by default.
"""

from __future__ import annotations

import sys

import tensorflow as tf


def epoch_seed(seed, epoch):
    """One int64 from (seed, epoch), the key of an epoch's random order."""
    return tf.cast(seed, tf.int64) * 1_000_003 + tf.cast(epoch, tf.int64)


def shuffled_batches(elements, *, window, batch_size, seed, parse=None):
    """Batches of `elements`, each run of `window` elements first put in a stateless random order.

    The order is keyed by (seed, window index) alone: `Dataset.shuffle` would mix its op
    seed with the process's global seed. Windows are permuted whole, `parse`d whole (one
    vectorized call for `window` records instead of one per batch) and cut into batches
    with `rebatch`, so no per-element step is added to the pipeline. The last short
    batch is dropped.
    """

    @tf.autograph.experimental.do_not_convert
    def permute(index, block):
        first = tf.nest.flatten(block)[0]
        key = tf.stack([tf.cast(seed, tf.int64), index])
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(first)[:1], seed=key))
        shuffled = tf.nest.map_structure(lambda part: tf.gather(part, order), block)
        return shuffled if parse is None else parse(shuffled)

    if window <= 1:
        batches = elements.batch(batch_size, drop_remainder=True)
        return batches if parse is None else batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    windows = elements.batch(window).enumerate().map(permute, num_parallel_calls=tf.data.AUTOTUNE)
    return windows.rebatch(batch_size, drop_remainder=True)


def epochs_from(epoch):
    """The epoch numbers `epoch`, `epoch + 1`, ... (int64), without end.

    `tf.data.Dataset.counter`'s elements, as one native op: `counter` is a `scan` whose
    function tf.data traces at every run's start (12 ms of CPU, 2026-11-29).
    """
    return tf.data.Dataset.range(epoch, sys.maxsize)


def stream_from(one_epoch, position, *, steps_per_epoch, parse=None):
    """The batches of the epochs `one_epoch(epoch)` yields, from batch number `position` on.

    `one_epoch` returns exactly `steps_per_epoch` batches, so a start at `position`
    equals the whole stream with `position` batches skipped: it begins at the epoch
    `position` falls in and skips that epoch's first batches before `parse` (e.g.
    `tf.io.parse_example`) runs on them.
    """
    epoch, offset = divmod(int(position), steps_per_epoch)
    first = one_epoch(tf.constant(epoch, tf.int64)).skip(offset)
    rest = epochs_from(epoch + 1).flat_map(one_epoch)
    batches = first.concatenate(rest)
    if parse is not None:
        batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return batches.prefetch(tf.data.AUTOTUNE)
