"""`synthetic_images`: seeded images of a coarse class pattern plus noise, any size (NumPy is the reference)."""

import numpy as np
import pytest

from opt_train.data import registry
from opt_train.data.synthetic_images import PATTERN_CELLS, source


def _source(**overrides):
    return source(**{**registry.check_params("synthetic_images", {}), **overrides})


def test_registered_as_a_classification_dataset():
    assert "synthetic_images" in registry.DATASET_NAMES
    assert registry.task_kind("synthetic_images") == "classification"
    with pytest.raises(ValueError, match="`height` must be a positive integer"):
        registry.check_params("synthetic_images", {"height": 0})


def test_shapes_task_and_split():
    source = _source(num_examples=50, height=20, width=12, channels=2, num_classes=4)
    (x_train, y_train), (x_eval, y_eval) = source.train, source.eval
    assert x_train.shape == (40, 20, 12, 2) and x_eval.shape == (10, 20, 12, 2) and x_train.dtype == np.float32
    assert source.task.input_shape == (20, 12, 2) and source.task.output_dim == 4
    assert set(np.concatenate([y_train, y_eval])) <= set(range(4))


def test_without_noise_every_image_is_its_class_pattern_scaled_up():
    source = _source(num_examples=60, height=16, width=24, num_classes=3, noise=0.0)
    x, y = source.train
    for label in range(3):
        images = x[y == label]
        assert np.all(images == images[0])
    # Nearest-neighbour scaling: each pattern cell is a constant block of (16/8) x (24/8) pixels.
    coarse = x[0][:: 16 // PATTERN_CELLS, :: 24 // PATTERN_CELLS]
    np.testing.assert_array_equal(np.repeat(np.repeat(coarse, 2, axis=0), 3, axis=1), x[0])
    assert len({x[y == label][0].tobytes() for label in range(3)}) == 3


def test_seeded():
    a, b, c = _source(seed=1), _source(seed=1), _source(seed=2)
    np.testing.assert_array_equal(a.train[0], b.train[0])
    assert not np.array_equal(a.train[0], c.train[0])


def test_noise_has_the_asked_std():
    x, y = _source(num_examples=200, noise=0.5, height=8, width=8).train
    clean = _source(num_examples=200, noise=0.0, height=8, width=8).train[0]
    assert np.std(x - clean) == pytest.approx(0.5, rel=0.02)
