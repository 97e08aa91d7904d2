"""`opt-train data to-tfrecord`: a user's .npz / .csv arrays written as sharded TFRecord files of tf.train.Examples.

Each example holds two features: `x` (the inputs, flattened, float32) and `y` (an int64
class id, or the float32 targets of a regression). The shapes go into the `data_params`
block this module returns, which the `tfrecord` dataset reads as it is.
"""

from __future__ import annotations

import os

import numpy as np

from opt_train.data import sources
from opt_train.data.tfrecord import compression_type
from opt_train.errors import ParamError

SUFFIX = {"": ".tfrecord", "GZIP": ".tfrecord.gz", "ZLIB": ".tfrecord.zz"}


def read_arrays(path, *, x_key="x", y_key="y", label_column=-1, header=True, delimiter=","):
    """`(x, y)` from a .npz (arrays `x_key`, `y_key`) or a .csv (one label column)."""
    if path.endswith(".npz"):
        return sources._read_npz(path, x_key, y_key, "path")
    if path.endswith(".csv"):
        return sources._read_csv(path, label_column, header, delimiter, "path")
    raise ParamError.said("path", "wrong_type", f"`path` must be a .npz or .csv file. Received: path={path!r}", path)


def _example(x_row, y_row, classification):
    import tensorflow as tf

    label = (
        tf.train.Feature(int64_list=tf.train.Int64List(value=np.ravel(y_row).astype(np.int64)))
        if classification
        else tf.train.Feature(float_list=tf.train.FloatList(value=np.ravel(y_row).astype(np.float32)))
    )
    inputs = tf.train.Feature(float_list=tf.train.FloatList(value=np.ravel(x_row).astype(np.float32)))
    return tf.train.Example(features=tf.train.Features(feature={"x": inputs, "y": label})).SerializeToString()


def write_shards(x, y, out, prefix, shards, compression, classification):
    """Writes `shards` files of consecutive examples; each appears under its name only once complete."""
    import tensorflow as tf

    options = tf.io.TFRecordOptions(compression_type=compression)
    paths = []
    for index, rows in enumerate(np.array_split(np.arange(len(x)), shards)):
        path = os.path.join(out, f"{prefix}-{index:05d}-of-{shards:05d}{SUFFIX[compression]}")
        partial = path + ".partial"
        with tf.io.TFRecordWriter(partial, options) as writer:
            for row in rows:
                writer.write(_example(x[row], y[row], classification))
        os.replace(partial, path)  # a killed conversion leaves no half file a glob would match
        paths.append(path)
    return paths


def to_tfrecord(path, out, *, shards, compression="none", eval_fraction=0.0, seed=0,
                task="classification", num_classes=None, **read_options):
    """Converts `path` into TFRecord shards under `out`; returns the `data_params` that read them.

    Args:
        path: a .npz or .csv file.
        out: the directory to write (created if missing).
        shards: train files to write; eval (when `eval_fraction` > 0) gets as many, at most
            one per eval example.
        compression: none | GZIP | ZLIB.
        eval_fraction: share of the examples written as eval files instead (a seeded split).
        seed: seed of that split.
        task: classification (labels become int64 class ids) or regression.
        num_classes: classes, default inferred from the labels.
        read_options: `x_key`, `y_key` (.npz), `label_column`, `header`, `delimiter` (.csv).
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ParamError.said("shards", "out_of_range", f"`shards` must be a positive integer. Received: shards={shards!r}",
                              shards)
    if not 0 <= eval_fraction < 1:
        raise ParamError.said("eval_fraction", "out_of_range",
                              f"`eval_fraction` must be in [0, 1). Received: eval_fraction={eval_fraction}", eval_fraction)
    kind = compression_type(compression)
    x, y = read_arrays(path, **read_options)
    if eval_fraction > 0:
        train, held_out = sources.split(x, y, eval_fraction, seed)
    else:
        train, held_out = (x, y), (x, y)  # labels mapped as for a split; the copy is not written
    source = sources._user_source(train, held_out, task, num_classes)
    (x_train, y_train), (x_eval, y_eval) = source.train, source.eval
    if eval_fraction == 0:
        x_eval = x_eval[:0]
    if shards > len(x_train):
        raise ParamError.said("shards", "out_of_range",
                              f"`shards` must be at most the train examples ({len(x_train)}). Received: shards={shards}",
                              shards)
    os.makedirs(out, exist_ok=True)
    classification = task == "classification"
    write_shards(x_train, y_train, out, "train", shards, kind, classification)
    params = {"train_files": os.path.join(out, f"train-*{SUFFIX[kind]}")}
    if len(x_eval):
        write_shards(x_eval, y_eval, out, "eval", min(shards, len(x_eval)), kind, classification)
        params["eval_files"] = os.path.join(out, f"eval-*{SUFFIX[kind]}")
    y_shape = [] if classification else [int(y_train.shape[1])]
    params.update(
        compression=kind or "none",
        features={
            "x": {"dtype": "float32", "shape": [int(d) for d in x_train.shape[1:]]},
            "y": {"dtype": "int64" if classification else "float32", "shape": y_shape},
        },
        x="x",
        y="y",
        task=task,
    )
    if classification:
        params["num_classes"] = source.task.num_classes
        if source.task.labels != tuple(range(source.task.num_classes)):  # string labels: keep their values
            params["labels"] = list(source.task.labels)
    return {"examples": {"train": len(x_train), "eval": len(x_eval)}, "data_params": params}
