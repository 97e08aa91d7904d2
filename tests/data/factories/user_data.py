"""Data factories for tests/data/test_factory.py: good ones, and each way a user's may go wrong."""

import numpy as np
import tensorflow as tf

CALLS = []


def examples(n=40, features=3):
    x = np.arange(n * features, dtype=np.float32).reshape(n, features)
    x[:, 0] = np.arange(n)  # x[0] is the example id
    return x, (np.arange(n) % 4).astype(np.int64)


def make(split, n=40, scale=1.0):
    CALLS.append({"split": split, "n": n, "scale": scale})
    if split == "eval":
        return None
    x, y = examples(n)
    return tf.data.Dataset.from_tensor_slices((x * np.float32(scale) if scale != 1.0 else x, y))


def make_weighted(split, rank, size, seed):
    """Shards itself (declares rank and size) and adds a weight per example."""
    CALLS.append({"split": split, "rank": rank, "size": size, "seed": seed})
    x, y = examples(40)
    weights = np.linspace(0.5, 2.0, 40).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y, weights)).shard(size, rank)


def make_filtered(split):
    """Unknown cardinality: opt-train has to count it."""
    x, y = examples(50)
    return tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda x, y: x[0] < 30)


def returns_a_list(split):
    return [1, 2, 3]


def yields_dicts(split):
    return tf.data.Dataset.from_tensor_slices({"a": [1.0, 2.0]})


def raises(split):
    return helper_that_fails(split)


def helper_that_fails(split):
    raise KeyError(f"no column 'pixels' in {split}")
