"""TFRecord files of `tf.train.Example`s streamed as a `tf.data` pipeline, sharded across ranks.

Nothing is held in memory but a shuffle buffer of serialized records. Each epoch:

1. the files of this rank (a share of whole files balanced by record count when there
   are at least as many files as ranks; else all of them) are put in an order drawn
   from `(seed, epoch)` without any random state;
2. they are read in parallel (`interleave`, deterministic), and when ranks share files
   each rank keeps every `size`-th record (`shard`);
3. they are cut to the same number on every rank (so every rank runs as many steps),
   shuffled in windows of `shuffle_buffer` (a stateless order keyed by `(seed, epoch,
   window)`), each window parsed in one vectorized call (`tf.io.parse_example`, windows in
   parallel), cut into batches (`rebatch`) and prefetched.

So the stream is a pure function of `(seed, position)`: a resume at position `p`
starts the epoch `p` falls in and skips the batches of that epoch already consumed
(`TFRecordData.train_from`); nothing of the iterator goes into the checkpoint.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from opt_train.data.counts import steps_per_epoch
from opt_train.data.streams import epoch_seed, shuffled_batches, stream_from
from opt_train.data.task import Task
from opt_train.errors import ParamError

COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
DTYPES = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}
# Files read at once per rank; beyond a few, more only adds open readers and buffers.
CYCLE_LENGTH = 8
READ_BUFFER_BYTES = 1 << 20


def compression_type(name):
    """TensorFlow's compression string ("", "GZIP", "ZLIB") for a config value (any case)."""
    return COMPRESSION[(name or "none").lower()]


def expand_files(patterns, param):
    """The sorted, de-duplicated files that `patterns` (a glob or a list of globs) name."""
    given = patterns
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    files = set()
    for pattern in patterns:
        matched = [path for path in glob.glob(os.path.expanduser(pattern)) if os.path.isfile(path)]
        if not matched:
            from opt_train.params import matching_globs

            matching_globs(param, given)  # raises the file_not_found error naming the resolved pattern
        files.update(os.path.abspath(path) for path in matched)
    return sorted(files)


def count_records(files, compression, param):
    """Records in each file, counted in parallel without parsing them."""

    @tf.autograph.experimental.do_not_convert  # see opt_train.data.streams
    def count(path):
        records = tf.data.TFRecordDataset(path, compression, buffer_size=READ_BUFFER_BYTES)
        return records.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1)

    counts = tf.data.Dataset.from_tensor_slices(files).map(
        count, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    try:
        return [int(n) for n in counts.as_numpy_iterator()]
    except tf.errors.DataLossError:
        kind = compression or "uncompressed"
        raise ParamError(param, "wrong_type", f"must be {kind} TFRecord files (check `compression`); one of them "
                         f"is not. Received: {len(files)} files", text=f"`{param}` must be {kind} TFRecord files "
                         f"(check `compression`); one of them is not. Received: {len(files)} files") from None


class Shard(NamedTuple):
    """What one rank reads per epoch: its files, whether it keeps every size-th record of them, how many."""

    files: tuple
    by_record: bool
    records_per_epoch: int


def plan_shard(files, counts, rank, size):
    """By file when there are at least `size` files, else by record; equal record counts on every rank.

    Files go to ranks largest first, each to the rank holding the fewest records so far,
    so shares are as even as whole files allow; every rank then reads as many records per
    epoch as the smallest share (which ones are left out changes with the epoch's shuffle).
    """
    if len(files) < size:
        return Shard(tuple(files), True, sum(counts) // size)
    totals, owned = [0] * size, [[] for _ in range(size)]
    for count, path in sorted(zip(counts, files), key=lambda pair: (-pair[0], pair[1])):
        target = totals.index(min(totals))
        totals[target] += count
        owned[target].append(path)
    return Shard(tuple(sorted(owned[rank])), False, min(totals))


def epoch_records(shard, epoch, *, seed, compression, rank, size):
    """This rank's serialized records of `epoch` in read order (unshuffled, unparsed)."""
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    order = tf.argsort(tf.random.stateless_uniform([len(shard.files)], seed=key))
    files = tf.gather(tf.constant(shard.files), order)
    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.autograph.experimental.do_not_convert(
            lambda path: tf.data.TFRecordDataset(path, compression, buffer_size=READ_BUFFER_BYTES)),
        cycle_length=min(len(shard.files), CYCLE_LENGTH),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if shard.by_record:
        records = records.shard(size, rank)
    return records.take(shard.records_per_epoch)


def feature_spec(features, names):
    """`tf.io.FixedLenFeature`s for the features `names` of the config's `features` block."""
    return {
        name: tf.io.FixedLenFeature(tuple(features[name]["shape"]), DTYPES[features[name]["dtype"]])
        for name in names
    }


def make_parser(features, x, y, weight, task, statistics=None):
    """A function from a batch of serialized Examples to `(x, y)` or `(x, y, weight)` tensors.

    With `statistics` (float inputs) the inputs come out standardised by them.
    """
    names = [x, y] + ([weight] if weight else [])
    spec = feature_spec(features, dict.fromkeys(names))
    if statistics is not None:
        shift = tf.constant(statistics.mean, tf.float32)
        scale = tf.constant(1.0 / np.sqrt(statistics.variance), tf.float32)

    @tf.autograph.experimental.do_not_convert
    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        inputs = parsed[x]
        inputs = tf.cast(inputs, tf.int32 if inputs.dtype == tf.int64 else tf.float32)
        if statistics is not None:
            inputs = (inputs - shift) * scale
        if task.kind == "regression":
            labels = tf.reshape(tf.cast(parsed[y], tf.float32), [-1, task.output_dim])
        else:
            labels = tf.cast(parsed[y], tf.int32)
        if weight:
            return inputs, labels, tf.cast(parsed[weight], tf.float32)
        return inputs, labels

    return parse


# Records parsed at once while the statistics are streamed: large enough that the parse
# is vectorised, small enough that memory stays flat whatever the files hold (2048 records
# of 1024 floats are 8 MiB, 16 MiB in the float64 the statistics take).
STATISTICS_BATCH = 2048


def stream_statistics(files, compression, features, x):
    """The normalization Statistics of feature `x` over every record of `files`, read once, a batch at a time."""
    from opt_train.data import normalization

    spec = feature_spec(features, [x])
    records = tf.data.TFRecordDataset(files, compression, buffer_size=READ_BUFFER_BYTES,
                                      num_parallel_reads=min(len(files), CYCLE_LENGTH))
    inputs = records.batch(STATISTICS_BATCH).map(
        tf.autograph.experimental.do_not_convert(
            lambda serialized: tf.cast(tf.io.parse_example(serialized, spec)[x], tf.float32)),
        num_parallel_calls=2,  # a bound, not AUTOTUNE: each batch in flight is memory
    ).prefetch(1)
    return normalization.from_batches(inputs.as_numpy_iterator())


def make_task(features, x, y, task, num_classes):
    """The Task of the records: input shape and dtype from `x`'s feature, outputs from `y` or `num_classes`."""
    input_shape = tuple(int(d) for d in features[x]["shape"])
    input_dtype = "int32" if features[x]["dtype"] == "int64" else "float32"
    image_shape = input_shape + (1,) if len(input_shape) == 2 else (input_shape if len(input_shape) == 3 else None)
    if task == "regression":
        outputs = int(np.prod(features[y]["shape"], dtype=np.int64))
        return Task("regression", input_shape, outputs, input_dtype=input_dtype, image_shape=image_shape)
    return Task("classification", input_shape, num_classes, input_dtype=input_dtype,
                num_classes=num_classes, image_shape=image_shape)


class TFRecordData:
    """The train stream of one rank and the eval stream, built from the `tfrecord` dataset's params."""

    def __init__(self, params, *, batch_size, seed, rank, size, eval_batch_size, statistics=None, replicas=1):
        self.compression = compression_type(params["compression"])
        self.train_files = expand_files(params["train_files"], "train_files")
        self.counts = count_records(self.train_files, self.compression, "train_files")
        self.shard = plan_shard(self.train_files, self.counts, rank, size)
        self.task = make_task(params["features"], params["x"], params["y"], params["task"], params["num_classes"])
        if params.get("labels") is not None and self.task.kind == "classification":
            self.task = dataclasses.replace(self.task, labels=tuple(params["labels"]))
        if params.get("normalize") and self.task.input_dtype == "float32":
            if statistics is None or statistics.mean.shape != tuple(self.task.input_shape):
                # Every rank reads the whole train split once, so all standardise alike.
                statistics = stream_statistics(self.train_files, self.compression, params["features"], params["x"])
            self.task = dataclasses.replace(self.task, normalization=statistics)
        self.parse = make_parser(params["features"], params["x"], params["y"], params["weight"], self.task,
                                 self.task.normalization)
        self.batch_size, self.seed, self.rank, self.size = batch_size, seed, rank, size
        self.shuffle_buffer = params["shuffle_buffer"]
        self.steps_per_epoch = steps_per_epoch(self.shard.records_per_epoch, batch_size, "records", replicas)
        self.eval_files = (
            None if params["eval_files"] is None else expand_files(params["eval_files"], "eval_files")
        )
        self.eval_batch_size = eval_batch_size

    @property
    def train_examples(self):
        return sum(self.counts)

    @tf.autograph.experimental.do_not_convert
    def _epoch(self, epoch):
        records = epoch_records(self.shard, epoch, seed=self.seed, compression=self.compression,
                                rank=self.rank, size=self.size)
        return shuffled_batches(records, window=self.shuffle_buffer, batch_size=self.batch_size,
                                seed=epoch_seed(self.seed, epoch), parse=self.parse).take(self.steps_per_epoch)

    def train_from(self, position):
        """Batches from batch number `position` of the stream on: the epoch it falls in, its first batches skipped."""
        return stream_from(self._epoch, position, steps_per_epoch=self.steps_per_epoch)

    def eval_dataset(self):
        """Every eval record once, in file order, in batches (the last may be short); None without eval_files."""
        if self.eval_files is None:
            return None
        records = tf.data.TFRecordDataset(self.eval_files, self.compression, buffer_size=READ_BUFFER_BYTES)
        batches = records.batch(self.eval_batch_size).map(self.parse, num_parallel_calls=tf.data.AUTOTUNE)
        return batches.prefetch(tf.data.AUTOTUNE)
