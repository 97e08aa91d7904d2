"""A dataset held in memory (`Source`) and the seeded train/eval split every built-in dataset uses."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from opt_train.data.counts import eval_count
from opt_train.data.task import Task


class Source(NamedTuple):
    """A dataset in memory: `(x, y)` for train and for eval, and the task they pose."""

    train: tuple
    eval: tuple
    task: Task


def split_indices(num_examples, eval_fraction, seed):
    """(train_idx, eval_idx): a seeded permutation cut so eval holds `eval_fraction` of it."""
    num_eval = eval_count(num_examples, eval_fraction)
    order = np.random.default_rng(seed).permutation(num_examples)
    return np.sort(order[num_eval:]), np.sort(order[:num_eval])


def split(x, y, eval_fraction, seed):
    """`((x, y) train, (x, y) eval)` cut by `split_indices`."""
    train_idx, eval_idx = split_indices(len(x), eval_fraction, seed)
    return (x[train_idx], y[train_idx]), (x[eval_idx], y[eval_idx])
