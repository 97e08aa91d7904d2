"""Epoch streams for sources that are not in memory: stateless window shuffles and starting at a batch position."""

from __future__ import annotations

import tensorflow as tf


def epoch_seed(seed, epoch):
    """One int64 from (seed, epoch), the key of an epoch's random order."""
    return tf.cast(seed, tf.int64) * 1_000_003 + tf.cast(epoch, tf.int64)


def shuffle_windows(elements, window, seed):
    """Each run of `window` elements put in a stateless random order keyed by (seed, window index).

    `Dataset.shuffle` would mix its op seed with the process's global seed; this order
    depends on nothing but its arguments, on every rank and after every restart.
    """

    def permute(index, block):
        first = tf.nest.flatten(block)[0]
        key = tf.stack([tf.cast(seed, tf.int64), index])
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(first)[:1], seed=key))
        return tf.nest.map_structure(lambda part: tf.gather(part, order), block)

    return elements.batch(window).enumerate().map(permute).unbatch()


def stream_from(one_epoch, position, *, steps_per_epoch, batch_size, parse=None):
    """Batches of the epochs `one_epoch(epoch)` yields, from batch number `position` on.

    `one_epoch` returns exactly `steps_per_epoch * batch_size` elements, so batches never
    cross an epoch edge, and a start at `position` equals the whole stream with
    `position` batches skipped: it starts at the epoch `position` falls in and skips
    that epoch's first elements before `parse` (e.g. `tf.io.parse_example`) runs.
    """
    epoch, offset = divmod(int(position), steps_per_epoch)
    first = one_epoch(tf.constant(epoch, tf.int64)).skip(offset * batch_size)
    rest = tf.data.Dataset.counter(start=epoch + 1).flat_map(one_epoch)
    batches = first.concatenate(rest).batch(batch_size, drop_remainder=True)
    if parse is not None:
        batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return batches.prefetch(tf.data.AUTOTUNE)
