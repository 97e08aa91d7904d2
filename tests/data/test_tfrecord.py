"""The `tfrecord` dataset: files written by tf.io.TFRecordWriter read back exactly, sharded, seeded, resumable."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.data import build_data, registry
from opt_train.data.tfrecord import plan_shard

FEATURES = {"image": {"dtype": "float32", "shape": [2, 3]}, "label": {"dtype": "int64", "shape": []}}


def write_records(directory, files, per_file, compression="GZIP", seed=0):
    """`files` files of `per_file` Examples with TF's own writer; returns (images, labels) by example id.

    Example `i` has `image[0, 0] == i`, so a parsed batch tells which examples it holds.
    """
    rng = np.random.default_rng(seed)
    total = files * per_file
    images = rng.normal(size=(total, 2, 3)).astype(np.float32)
    images[:, 0, 0] = np.arange(total)
    labels = rng.integers(0, 5, size=total)
    options = tf.io.TFRecordOptions(compression_type=compression)
    for f in range(files):
        with tf.io.TFRecordWriter(str(directory / f"part-{f}.tfrecord"), options) as writer:
            for i in range(f * per_file, (f + 1) * per_file):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(float_list=tf.train.FloatList(value=images[i].ravel())),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[labels[i]])),
                }))
                writer.write(example.SerializeToString())
    return images, labels


def params(directory, **extra):
    # The inputs carry record ids, read back as written: standardisation (tested in test_normalization.py) off.
    return {"train_files": str(directory / "part-*.tfrecord"), "compression": "GZIP", "features": FEATURES,
            "x": "image", "y": "label", "num_classes": 5, "shuffle_buffer": 32, "normalize": False, **extra}


def ids(dataset, batches):
    return [int(v) for x, _ in dataset.take(batches) for v in x.numpy()[:, 0, 0]]


@pytest.mark.parametrize("compression", ["GZIP", "none"])
def test_records_written_by_tf_read_back_exactly(tmp_path, compression):
    images, labels = write_records(tmp_path, files=3, per_file=8, compression="" if compression == "none" else compression)
    data = build_data("tfrecord", params(tmp_path, compression=compression, eval_files=str(tmp_path / "part-*")),
                      batch_size=4, seed=0, eval_batch_size=5)
    assert (data.train_examples, data.steps_per_epoch) == (24, 6)
    assert data.task.input_shape == (2, 3) and data.task.num_classes == 5
    seen = {}
    for x, y in data.train.take(data.steps_per_epoch):
        assert x.dtype == tf.float32 and y.dtype == tf.int32
        for image, label in zip(x.numpy(), y.numpy()):
            seen[int(image[0, 0])] = (image, label)
    assert sorted(seen) == list(range(24))
    for i, (image, label) in seen.items():
        np.testing.assert_array_equal(image, images[i])
        assert label == labels[i]
    # eval: every record once, in file order, the last batch short
    batches = list(data.eval)
    assert [len(y) for _, y in batches] == [5, 5, 5, 5, 4]
    np.testing.assert_array_equal(np.concatenate([x.numpy() for x, _ in batches]), images)
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in batches]), labels)


@pytest.mark.parametrize("files, by_record", [(4, False), (1, True)], ids=["by_file", "by_record"])
def test_every_record_once_per_epoch_across_ranks(tmp_path, files, by_record):
    write_records(tmp_path, files=files, per_file=48 // files)
    size, epochs = 2, 2
    shards = [build_data("tfrecord", params(tmp_path), batch_size=4, seed=3, rank=r, size=size) for r in range(size)]
    assert all(d.steps_per_epoch == 6 for d in shards)
    streams = [ids(d.train, epochs * d.steps_per_epoch) for d in shards]
    for epoch in range(epochs):
        parts = [stream[epoch * 24:(epoch + 1) * 24] for stream in streams]
        assert sorted(parts[0] + parts[1]) == list(range(48))
    assert streams[0][:24] != streams[0][24:]  # each epoch is reshuffled
    if not by_record:  # whole files per rank: a rank's ids come from its own files
        assert len({i // 12 for i in streams[0]}) == 2


def test_shares_of_unequal_files_are_balanced_and_equal():
    shard = [plan_shard(["a", "b", "c", "d"], [30, 10, 10, 10], rank, 2) for rank in range(2)]
    assert shard[0].files == ("a",) and shard[1].files == ("b", "c", "d")
    assert shard[0].records_per_epoch == shard[1].records_per_epoch == 30
    by_record = plan_shard(["a"], [9], 1, 2)
    assert by_record.by_record and by_record.records_per_epoch == 4


def test_order_is_a_function_of_seed_and_epoch_alone(tmp_path):
    write_records(tmp_path, files=3, per_file=10)
    tf.random.set_seed(1)
    first = ids(build_data("tfrecord", params(tmp_path), batch_size=5, seed=7).train, 12)
    tf.random.set_seed(2)
    again = ids(build_data("tfrecord", params(tmp_path), batch_size=5, seed=7).train, 12)
    other = ids(build_data("tfrecord", params(tmp_path), batch_size=5, seed=8).train, 12)
    assert first == again
    assert first != other


@pytest.mark.slow  # 3 s on 2 cores
def test_a_resumed_stream_equals_the_skipped_stream(tmp_path):
    write_records(tmp_path, files=3, per_file=10)
    data = build_data("tfrecord", params(tmp_path), batch_size=4, seed=5)  # 7 batches per epoch, 2 dropped
    whole = [x.numpy() for x, _ in data.train.take(24)]
    for position in (1, 6, 7, 8, 15):
        resumed = [x.numpy() for x, _ in data.train_from(position).take(24 - position)]
        for expected, actual in zip(whole[position:], resumed):
            np.testing.assert_array_equal(actual, expected, err_msg=f"position {position}")


def test_sample_weights_and_regression_targets(tmp_path):
    options = tf.io.TFRecordOptions(compression_type="ZLIB")
    with tf.io.TFRecordWriter(str(tmp_path / "r.tfrecord"), options) as writer:
        for i in range(6):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i, 1.0])),
                "t": tf.train.Feature(float_list=tf.train.FloatList(value=[2.0 * i, -i])),
                "w": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5 * i])),
            })).SerializeToString())
    features = {"x": {"dtype": "float32", "shape": [2]}, "t": {"dtype": "float32", "shape": [2]},
                "w": {"dtype": "float32", "shape": []}}
    data = build_data("tfrecord", {"train_files": str(tmp_path / "*.tfrecord"), "compression": "zlib",
                                   "features": features, "x": "x", "y": "t", "weight": "w", "task": "regression",
                                   "shuffle_buffer": 1, "normalize": False}, batch_size=6, seed=0)
    x, t, w = next(iter(data.train))
    assert data.task.kind == "regression" and data.task.output_dim == 2
    order = x.numpy()[:, 0].astype(int)
    np.testing.assert_array_equal(t.numpy(), np.stack([2.0 * order, -order], axis=1))
    np.testing.assert_array_equal(w.numpy(), 0.5 * order)


@pytest.mark.parametrize("change, param, needle", [
    ({"x": "imag"}, "x", "did you mean 'image'"),
    ({"num_classes": None}, "num_classes", "required"),
    ({"compression": "gzipp"}, "compression", "did you mean 'GZIP'"),
    ({"features": {"image": {"dtype": "float64", "shape": [3]}, "label": {"dtype": "int64"}}},
     "features.image.dtype", "did you mean 'float32'"),
])
def test_bad_params_name_the_key(tmp_path, change, param, needle):
    given = {**params(tmp_path), **change}
    errors = registry.param_errors("tfrecord", {k: v for k, v in given.items() if v is not None})[1]
    assert errors and errors[0].param == param and needle in str(errors[0])


def test_files_that_are_not_records_are_a_clear_error(tmp_path):
    (tmp_path / "part-0.tfrecord").write_bytes(b"not a record file at all" * 10)
    with pytest.raises(ValueError, match="`train_files` must be GZIP TFRecord files"):
        build_data("tfrecord", params(tmp_path), batch_size=2, seed=0)
    with pytest.raises(ValueError, match="matches none"):
        build_data("tfrecord", params(tmp_path / "missing"), batch_size=2, seed=0)
