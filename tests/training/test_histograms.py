"""Histogram buckets against TensorBoard's own bucketing (its histogram plugin), on every case it handles."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.histogram import summary_v2

from opt_train.training.histograms import buckets, write_histogram

RNG = np.random.default_rng(3)
CASES = {
    "normal": RNG.normal(size=(64, 128)).astype(np.float32),
    "skewed": RNG.exponential(size=5000).astype(np.float32) ** 3,
    "integers": RNG.integers(-4, 5, size=(7, 9)).astype(np.float32),
    "one_value": np.full((3, 4), 0.25, np.float32),
    "one_element": np.array([2.5], np.float32),
    "empty": np.zeros((0, 5), np.float32),
    "with_nan": np.array([1.0, np.nan, -2.0, 3.0, 0.5], np.float32),
    # An overflowing float16 gradient, summarized before its update is skipped.
    "with_inf": np.array([1.0, np.inf, -2.0, -np.inf], np.float32),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_buckets_equal_tensorboards(case):
    data = tf.constant(CASES[case])
    expected = summary_v2._buckets(data, summary_v2.DEFAULT_BUCKET_COUNT).numpy()
    got = tf.function(buckets)(data).numpy()
    assert got.shape == expected.shape == (30, 3)
    np.testing.assert_array_equal(got[:, 2], expected[:, 2])
    # linspace's edges may differ in the last bit between graph and eager execution; from a NaN or an infinity
    # in the data TensorBoard's edges are NaN, and ours must be too.
    np.testing.assert_allclose(got[:, :2], expected[:, :2], rtol=1e-12, atol=0,
                               equal_nan=case in ("with_nan", "with_inf"))


def test_counts_add_up_to_the_finite_values_and_edges_span_min_to_max():
    data = CASES["normal"]
    got = buckets(tf.constant(data)).numpy()
    assert got[:, 2].sum() == data.size
    assert got[0, 0] == data.min() and got[-1, 1] == data.max()
    np.testing.assert_array_equal(got[1:, 0], got[:-1, 1])  # buckets are contiguous


def test_tensorboard_reads_the_event_as_a_histogram(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        tf.function(write_histogram)("weights", tf.constant(CASES["normal"]), tf.constant(7, tf.int64))
    writer.flush()
    accumulator = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    accumulator.Reload()
    assert accumulator.SummaryMetadata("weights").plugin_data.plugin_name == "histograms"
    (event,) = accumulator.Tensors("weights")
    assert event.step == 7
    written, expected = tf.make_ndarray(event.tensor_proto), buckets(tf.constant(CASES["normal"])).numpy()
    np.testing.assert_array_equal(written[:, 2], expected[:, 2])
    np.testing.assert_allclose(written, expected, rtol=1e-12, atol=0)


def test_a_histogram_is_a_straight_graph_of_a_few_ops():
    """Per-variable summaries trace one histogram per tensor: each is a few ops and no control flow
    (the plugin's tf.conds, with tf.linspace inside one, made each several graphs to trace)."""
    graph = tf.function(buckets).get_concrete_function(tf.TensorSpec([None, None], tf.float32)).graph
    operations = graph.get_operations()
    assert not {op.type for op in operations} & {"If", "StatelessIf", "While", "StatelessWhile"}
    assert len(operations) <= 60, sorted(op.type for op in operations)


def test_histograms_of_tensors_of_every_shape_share_one_traced_graph(tmp_path):
    """A model's per-variable summaries are one histogram per tensor, each of its own shape: each is a call of
    one graph, traced once in the process, not ~50 ops traced again for every tensor."""
    from opt_train.training import histograms

    writer = tf.summary.create_file_writer(str(tmp_path))
    shapes = [(64, 128), (128,), (3, 3, 8, 16), (0, 5)]
    summaries = tf.function(lambda step: [write_histogram(f"h{i}", tf.zeros(shape), step)
                                          for i, shape in enumerate(shapes)])
    with writer.as_default():
        graph = summaries.get_concrete_function(tf.constant(1, tf.int64)).graph
        summaries(tf.constant(1, tf.int64))
        write_histogram("eager", tf.ones([2, 2]), tf.constant(2, tf.int64))
    assert histograms._flat_buckets.experimental_get_tracing_count() == 1
    assert [op.type for op in graph.get_operations()].count("PartitionedCall") == len(shapes)
    assert len(graph.get_operations()) <= 16 * len(shapes)  # not the buckets' ~50 ops each
