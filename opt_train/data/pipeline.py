"""`build_data`: a dataset by name as `tf.data` pipelines, train sharded per rank and repeating, eval finite.

The train stream is built per epoch from a stateless, seeded permutation of the
example indices, so every rank computes the same permutation without sharing a
random state (whatever global seed each process set), takes its own strided slice
of it, and batches that slice with `drop_remainder=True`. Each rank keeps exactly
`num_examples // size` examples per epoch, so all ranks run the same number of
steps. Examples live in memory; a batch is a `tf.gather` of its indices.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import tensorflow as tf

from opt_train.data import counts, registry, sources
from opt_train.data.streams import epochs_from
from opt_train.data.task import Task
from opt_train.errors import ParamError


class DataBundle(NamedTuple):
    """What the training loop needs from a dataset.

    Attributes:
        train: `tf.data.Dataset` of `(x, y)` batches, repeating forever, this rank's shard.
        eval: finite `tf.data.Dataset` of `(x, y)` batches over the whole eval split.
        task: the `Task` (loss, metrics, shapes).
        train_examples: examples in the whole train split (all ranks).
        steps_per_epoch: batches per epoch on each rank.
        resume: `position -> Dataset`, the train stream from batch `position` on, for
            sources that can start there faster than skipping (None: `train.skip`).
    """

    train: tf.data.Dataset
    eval: tf.data.Dataset
    task: Task
    train_examples: int
    steps_per_epoch: int
    resume: object = None

    def train_from(self, position):
        """The train stream from batch `position` on, equal to `train.skip(position)`."""
        if self.resume is None:
            return self.train.skip(position)
        return self.resume(position)


def epoch_indices(num_examples, epoch, seed, rank, size):
    """This rank's example indices for `epoch`: a strided slice of a seeded permutation."""
    key = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    order = tf.argsort(tf.random.stateless_uniform([num_examples], seed=key))
    per_rank = num_examples // size
    return order[rank::size][:per_rank]


def train_dataset(x, y, *, batch_size, seed, rank=0, size=1):
    """Batches of `(x, y)` forever: reshuffled every epoch, sharded, `drop_remainder=True`."""
    num_examples = len(x)
    x, y = tf.constant(x), tf.constant(y)

    # tf.data traces these as written, without AutoGraph (opt_train.data.streams says why).
    @tf.autograph.experimental.do_not_convert
    def one_epoch(epoch):
        indices = epoch_indices(num_examples, epoch, seed, rank, size)
        return tf.data.Dataset.from_tensor_slices(indices).batch(batch_size, drop_remainder=True)

    @tf.autograph.experimental.do_not_convert
    def gather(indices):
        return tf.gather(x, indices), tf.gather(y, indices)

    batches = epochs_from(0).flat_map(one_epoch).map(gather)
    return batches.prefetch(tf.data.AUTOTUNE)


def eval_dataset(x, y, *, batch_size):
    """Every eval example once, in order, in batches (the last may be short)."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    return dataset.cache().prefetch(tf.data.AUTOTUNE)


def _check_sizes(batch_size, eval_batch_size, rank, size):
    for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ParamError.said(name, "out_of_range", f"`{name}` must be a positive integer. Received: {name}={value!r}",
                                  value)
    if not 0 <= rank < size:
        raise ParamError.said("rank", "out_of_range", f"`rank` must be in [0, {size}). Received: rank={rank}", rank)


def build_data(name, params, *, batch_size, seed, rank=0, size=1, eval_batch_size=None, statistics=None,
               replicas=1):
    """Dataset `name` with `params` as a `DataBundle` for rank `rank` of `size`.

    Args:
        name: a dataset of `DATASET_NAMES` (case-insensitive).
        params: its parameters (`data_params` in YAML); missing ones take defaults.
        batch_size: examples per train batch on this rank (`batch_size_per_gpu`).
        seed: shuffle seed; give every rank the same one.
        rank, size: this process's place among the data-parallel workers.
        eval_batch_size: examples per eval batch. Defaults to `batch_size`.
        replicas: the replicas that share each of this rank's batches (tf.distribute's), for
            the error of a batch that does not fit, which names one replica's share.
        statistics: the `normalization.Statistics` to standardise with (those a run saved),
            instead of computing them from the train split. Used only where
            `normalize` is on (csv, npz, tfrecord with float inputs).

    Raises:
        UnknownNameError: for an unknown dataset or parameter name.
        ValueError: for a bad parameter value; `ParamError` at `batch_size_per_gpu` for a
            train split too small for one batch on every rank.
    """
    eval_batch_size = batch_size if eval_batch_size is None else eval_batch_size
    _check_sizes(batch_size, eval_batch_size, rank, size)
    if registry.is_factory(name):
        return _factory_bundle(name, registry.check_params(name, params), batch_size, seed, rank, size, eval_batch_size,
                               replicas)
    canonical = registry.resolve(name)
    params = registry.check_params(canonical, params)
    if registry.DATASETS[canonical].streamed:
        return registry.DATASETS.load(canonical)(
            params, batch_size=batch_size, seed=seed, rank=rank, size=size, eval_batch_size=eval_batch_size,
            statistics=statistics, replicas=replicas,
        )
    normalize = params.get("normalize", False)
    source = sources.load_source(canonical, params)
    (x_train, y_train), (x_eval, y_eval) = source.train, source.eval
    if normalize and source.task.input_dtype == "float32":
        x_train, x_eval, task = _standardised(x_train, x_eval, source.task, statistics)
        source = source._replace(task=task)
    steps_per_epoch = counts.steps_per_epoch(len(x_train) // size, batch_size, replicas=replicas)
    return DataBundle(
        train=train_dataset(x_train, y_train, batch_size=batch_size, seed=seed, rank=rank, size=size),
        eval=eval_dataset(x_eval, y_eval, batch_size=eval_batch_size),
        task=source.task,
        train_examples=len(x_train),
        steps_per_epoch=steps_per_epoch,
    )


def _standardised(x_train, x_eval, task, statistics):
    """Both splits standardised with the train split's statistics (or `statistics`), and the Task saying so."""
    from opt_train.data import normalization

    if statistics is None or statistics.mean.shape != tuple(task.input_shape):
        statistics = normalization.from_array(x_train)
    # In place: the loaders' arrays are their own copies, and a second 1 GiB array would double the peak.
    def standardise(x):
        return statistics.apply(x, out=x) if x.flags.writeable else statistics.apply(x)

    same = x_eval is x_train
    x_train = standardise(x_train)
    x_eval = x_train if same else standardise(x_eval)
    return x_train, x_eval, dataclasses.replace(task, normalization=statistics)


def tfrecord_bundle(params, *, batch_size, seed, rank, size, eval_batch_size, statistics=None, replicas=1):
    """The `tfrecord` dataset's pipelines (its row's code): records streamed from files, sharded per rank."""
    from opt_train.data.tfrecord import TFRecordData

    data = TFRecordData(
        params, batch_size=batch_size, seed=seed, rank=rank, size=size, eval_batch_size=eval_batch_size,
        statistics=statistics, replicas=replicas,
    )
    return DataBundle(
        train=data.train_from(0),
        eval=data.eval_dataset(),
        task=data.task,
        train_examples=data.train_examples,
        steps_per_epoch=data.steps_per_epoch,
        resume=data.train_from,
    )


def _factory_bundle(spec, params, batch_size, seed, rank, size, eval_batch_size, replicas=1):
    from opt_train.data.factory import FactoryData

    data = FactoryData(
        spec, params, batch_size=batch_size, seed=seed, rank=rank, size=size, eval_batch_size=eval_batch_size,
        replicas=replicas,
    )
    return DataBundle(
        train=data.train_from(0),
        eval=data.eval,
        task=data.task,
        train_examples=data.train_examples,
        steps_per_epoch=data.steps_per_epoch,
        resume=data.train_from,
    )
