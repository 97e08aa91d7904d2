"""Tests for Task: losses and metrics against NumPy formulas, perplexity, validation."""

import math

import numpy as np
import pytest

from opt_train.data.task import Task


def _np_log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _np_cross_entropy(labels, logits):
    logp = _np_log_softmax(logits.astype(np.float64))
    return -np.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]


CLASSIFICATION = Task("classification", (5,), 4, num_classes=4)
SEQUENCE = Task("sequence", (6,), 7, input_dtype="int32", vocab_size=7)
REGRESSION = Task("regression", (3,), 2)


@pytest.fixture
def rng():
    # One generator per test: under xdist a module's tests may run on either worker, in any
    # order, and the data (and so the rounding) must not depend on which ran before.
    return np.random.default_rng(3)


def test_classification_loss_is_mean_cross_entropy_and_float32(rng):
    logits = rng.normal(size=(8, 4)).astype(np.float16)  # a float16 model output gets cast
    labels = rng.integers(4, size=8)
    loss = CLASSIFICATION.loss(labels, logits)
    assert loss.dtype.name == "float32" and loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), _np_cross_entropy(labels, logits.astype(np.float32)).mean(), rtol=1e-5)


def test_sequence_loss_is_mean_over_tokens(rng):
    logits = rng.normal(size=(3, 6, 7)).astype(np.float32)
    labels = rng.integers(7, size=(3, 6))
    np.testing.assert_allclose(SEQUENCE.loss(labels, logits).numpy(), _np_cross_entropy(labels, logits).mean(), rtol=1e-5)


def test_regression_loss_is_mse(rng):
    pred = rng.normal(size=(5, 2)).astype(np.float32)
    target = rng.normal(size=(5, 2)).astype(np.float32)
    np.testing.assert_allclose(REGRESSION.loss(target, pred).numpy(), ((pred - target) ** 2).mean(), rtol=1e-6)


def _run_metrics(task, batches):
    metrics = task.make_metrics()
    for y, pred in batches:
        for name, metric in metrics.items():
            if name == "loss":
                metric.update_state(task.loss(y, pred), sample_weight=len(y))
            else:
                metric.update_state(y, pred)
    return task.finalize({name: metric.result() for name, metric in metrics.items()})


def test_classification_metrics_over_uneven_batches_match_numpy(rng):
    logits = rng.normal(size=(10, 4)).astype(np.float32)
    labels = rng.integers(4, size=10)
    results = _run_metrics(CLASSIFICATION, [(labels[:7], logits[:7]), (labels[7:], logits[7:])])
    assert set(results) == {"loss", "accuracy"}
    np.testing.assert_allclose(results["loss"], _np_cross_entropy(labels, logits).mean(), rtol=1e-5)
    assert results["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == labels))


def test_sequence_metrics_are_per_token_and_add_perplexity(rng):
    logits = rng.normal(size=(4, 6, 7)).astype(np.float32)
    labels = rng.integers(7, size=(4, 6))
    results = _run_metrics(SEQUENCE, [(labels, logits)])
    mean_loss = _np_cross_entropy(labels, logits).mean()
    np.testing.assert_allclose(results["loss"], mean_loss, rtol=1e-5)
    assert results["accuracy"] == pytest.approx(np.mean(logits.argmax(-1) == labels))
    np.testing.assert_allclose(results["perplexity"], math.exp(mean_loss), rtol=1e-5)


def test_regression_metrics(rng):
    pred = rng.normal(size=(6, 2)).astype(np.float32)
    target = rng.normal(size=(6, 2)).astype(np.float32)
    results = _run_metrics(REGRESSION, [(target, pred)])
    assert set(results) == {"loss", "mse", "mae"}
    np.testing.assert_allclose(results["mse"], ((pred - target) ** 2).mean(), rtol=1e-5)
    # float32: the loss metric is a running weighted mean, `mse` a sum over a count; one ulp apart.
    np.testing.assert_allclose(results["loss"], results["mse"], rtol=1e-6)
    np.testing.assert_allclose(results["mae"], np.abs(pred - target).mean(), rtol=1e-5)


def test_finalize_leaves_classification_without_perplexity():
    assert CLASSIFICATION.finalize({"loss": 1.0}) == {"loss": 1.0}


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="`kind` must be one of"):
        Task("ranking", (3,), 1)
