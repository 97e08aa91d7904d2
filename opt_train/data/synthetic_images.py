"""`synthetic_images`: seeded random images, one coarse pattern per class plus noise (any size, no download).

Its row in `opt_train.data.registry.DATASETS` holds its parameters and summary; `source`
is its loader, which needs only NumPy. The class patterns are drawn on a
coarse grid and scaled up, so ImageNet-shaped data (224x224x3, 1000 classes) costs the
memory of its examples, not of 1000 full-size patterns.
"""

from __future__ import annotations

import numpy as np

from opt_train.data.arrays import Source, split_indices

PATTERN_CELLS = 8  # the class patterns' grid: each is PATTERN_CELLS x PATTERN_CELLS x channels



def _upsample(patterns, height, width):
    """Nearest-neighbour scaling of (n, cells, cells, c) patterns to (n, height, width, c)."""
    rows = np.arange(height) * PATTERN_CELLS // height
    cols = np.arange(width) * PATTERN_CELLS // width
    return patterns[:, rows][:, :, cols]


def source(num_examples, height, width, channels, num_classes, noise, eval_fraction, seed):
    """Image of class k = pattern_k (N(0, 1) on a coarse grid, scaled up) + noise * N(0, 1), float32 NHWC."""
    from opt_train.data.task import Task

    rng = np.random.default_rng(seed)
    patterns = rng.standard_normal((num_classes, PATTERN_CELLS, PATTERN_CELLS, channels), dtype=np.float32)
    y = rng.integers(num_classes, size=num_examples).astype(np.int32)
    x = np.empty((num_examples, height, width, channels), dtype=np.float32)
    for start in range(0, num_examples, 64):  # bounded temporaries at ImageNet sizes
        stop = min(start + 64, num_examples)
        x[start:stop] = _upsample(patterns[y[start:stop]], height, width)
        x[start:stop] += noise * rng.standard_normal((stop - start, height, width, channels), dtype=np.float32)
    train_idx, eval_idx = split_indices(num_examples, eval_fraction, seed)
    task = Task(
        "classification", (height, width, channels), num_classes,
        num_classes=num_classes, image_shape=(height, width, channels),
    )
    return Source((x[train_idx], y[train_idx]), (x[eval_idx], y[eval_idx]), task)
