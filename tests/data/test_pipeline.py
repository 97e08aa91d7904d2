"""Tests for build_data: train shards per rank, per-epoch reshuffle under a seed, eval finite and whole."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.data import build_data, registry, sources
from opt_train.data.pipeline import train_dataset
from opt_train.suggest import UnknownNameError


def _index_data(n):
    """x = the example's index, so batches show which examples they hold."""
    return np.arange(n, dtype=np.int32)[:, None], np.arange(n, dtype=np.int32)


def _indices(dataset, steps):
    return np.concatenate([x.numpy()[:, 0] for x, _ in dataset.take(steps)])


def test_shards_are_disjoint_and_cover_each_epoch():
    x, y = _index_data(48)
    size, batch = 3, 4
    seen = [_indices(train_dataset(x, y, batch_size=batch, seed=2, rank=r, size=size), 4) for r in range(size)]
    assert sorted(np.concatenate(seen)) == list(range(48))
    # the second epoch also covers everything, in a new order
    second = [_indices(train_dataset(x, y, batch_size=batch, seed=2, rank=r, size=size), 8)[16:] for r in range(size)]
    assert sorted(np.concatenate(second)) == list(range(48))
    assert not np.array_equal(np.concatenate(seen), np.concatenate(second))


def test_uneven_shards_stay_disjoint_with_equal_length():
    x, y = _index_data(50)
    size = 4  # 12 per rank, 2 dropped per epoch
    seen = [_indices(train_dataset(x, y, batch_size=3, seed=0, rank=r, size=size), 4) for r in range(size)]
    assert all(len(s) == 12 for s in seen)
    assert len(set(np.concatenate(seen))) == 48


def test_same_seed_same_order_whatever_the_global_seed():
    x, y = _index_data(32)
    tf.random.set_seed(1)
    first = _indices(train_dataset(x, y, batch_size=8, seed=9), 12)
    tf.random.set_seed(2)
    again = _indices(train_dataset(x, y, batch_size=8, seed=9), 12)
    other = _indices(train_dataset(x, y, batch_size=8, seed=10), 12)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_iterating_twice_restarts_the_same_stream():
    x, y = _index_data(20)
    dataset = train_dataset(x, y, batch_size=5, seed=4)
    np.testing.assert_array_equal(_indices(dataset, 6), _indices(dataset, 6))


def test_digits_bundle_batches_pair_x_with_its_label():
    bundle = build_data("digits", {}, batch_size=64, seed=0)
    source = sources.load_source("digits", registry.check_params("digits", {}))
    label_of = {row.tobytes(): label for row, label in zip(*source.train)}
    assert bundle.train_examples == len(source.train[0]) == 1438
    assert bundle.steps_per_epoch == 1438 // 64
    for x, y in bundle.train.take(3):
        assert x.shape == (64, 64) and y.dtype == tf.int32
        assert [label_of[row.tobytes()] for row in x.numpy()] == list(y.numpy())


def test_eval_is_finite_unsharded_and_ordered():
    bundle = build_data("reversal", {"num_examples": 100}, batch_size=8, seed=0, rank=1, size=2, eval_batch_size=7)
    batches = list(bundle.eval)
    assert [len(x) for x, _ in batches] == [7, 7, 6]
    source = sources.load_source("reversal", registry.check_params("reversal", {"num_examples": 100}))
    np.testing.assert_array_equal(np.concatenate([x for x, _ in batches]), source.eval[0])
    assert bundle.steps_per_epoch == (80 // 2) // 8


def test_train_batches_have_static_batch_size():
    bundle = build_data("synthetic_regression", {"num_examples": 50}, batch_size=16, seed=0)
    assert bundle.train.element_spec[0].shape.as_list() == [16, 10]
    assert bundle.train.element_spec[1].shape.as_list() == [16, 1]


def test_batch_larger_than_shard_is_an_error():
    with pytest.raises(ValueError, match=r"`batch_size` must be at most the train examples per rank \(40\)"):
        build_data("reversal", {"num_examples": 100}, batch_size=41, seed=0, size=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "`batch_size` must be a positive integer. Received: batch_size=0"),
    ({"batch_size": 8, "rank": 2, "size": 2}, "`rank` must be in [0, 2). Received: rank=2"),
])
def test_bad_sizes(kwargs, message):
    with pytest.raises(ValueError) as info:
        build_data("digits", {}, seed=0, **kwargs)
    assert message in str(info.value)


def test_unknown_dataset_name():
    with pytest.raises(UnknownNameError, match="did you mean 'reversal'"):
        build_data("reversl", {}, batch_size=8, seed=0)


def test_the_epoch_numbers_are_tf_data_counters():
    from opt_train.data.streams import epochs_from

    for start in (0, 3):
        ours, counter = epochs_from(start), tf.data.Dataset.counter(start=start)
        assert ours.element_spec == counter.element_spec
        assert list(ours.take(5).as_numpy_iterator()) == list(counter.take(5).as_numpy_iterator())
