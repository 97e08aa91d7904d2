"""The training side of OpenSeq2Seq's keys: `initializer` on the built-in models, `load_model` warm starts."""

from __future__ import annotations

import os

import keras
import tensorflow as tf

# Variables OpenSeq2Seq's default initializer reached: the weights made by
# tf.get_variable with no initializer of their own, i.e. the layers' kernels.
_INITIALIZED = ("kernel", "embeddings")


def keras_initializer(config):
    """The Keras initializer `initializer` / `initializer_params` name (seeded), or None."""
    if config.initializer is None:
        return None
    params = dict(config.initializer_params)
    if config.initializer not in ("zeros", "ones", "constant"):
        params.setdefault("seed", config.random_seed)
    try:
        return keras.initializers.get({"class_name": config.initializer, "config": params})
    except TypeError as error:
        raise ValueError(f"`initializer_params` do not fit {config.initializer}: {error}") from None


def apply_initializer(model, config):
    """Draws every kernel of `model` again from the config's initializer (none given: unchanged).

    The built-in models create their weights with Keras' defaults; drawing them again
    after the build gives the whole model OpenSeq2Seq's one default initializer.
    Returns the number of variables drawn.
    """
    initializer = keras_initializer(config)
    if initializer is None:
        return 0
    drawn = 0
    for variable in model.trainable_variables:
        if variable.path.rsplit("/", 1)[-1] in _INITIALIZED:
            variable.assign(tf.cast(initializer(tuple(variable.shape), dtype="float32"), variable.dtype))
            drawn += 1
    return drawn


def tf1_l2(scale):
    """TF1's `tf.contrib.layers.l2_regularizer(scale)`: scale * sum(w^2) / 2, as a Keras regularizer."""
    return keras.regularizers.L2(0.5 * float(scale))


def latest_checkpoint(path):
    """The newest checkpoint under `path`: a run's logdir, its `checkpoints/` folder, or a prefix."""
    for directory in (os.path.join(path, "checkpoints"), path):
        if os.path.isdir(directory):
            found = tf.train.latest_checkpoint(directory)
            if found:
                return found
    if tf.io.gfile.exists(path + ".index"):
        return path
    return None


def warm_start(model, path):
    """Loads the model weights (not the optimizer state, not the step) of another run's checkpoint.

    OpenSeq2Seq's `load_model`: the run starts at step 0 from those weights. Raises
    ValueError naming the path when it holds no checkpoint. Returns the checkpoint read.
    """
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise ValueError(f"`load_model` has no checkpoint to warm-start from. Received: load_model={path!r}")
    # Only the model's entry is listed, so optimizer slots and the step in the file stay unread.
    tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
    return checkpoint


def warm_start_run(config, run, say):
    """`warm_start` for a fresh run of `config`; a path with no checkpoint is a ConfigError at `load_model`."""
    from opt_train.config import ConfigError
    from opt_train.training.warm_start import refresh_masters

    try:
        path = warm_start(run.model, config.load_model)
        refresh_masters(run.train_op)  # dtype float16: the float32 masters start from the loaded weights too
    except ValueError:
        raise ConfigError([config.issue(
            "load_model", "holds no checkpoint to warm-start from", "file_not_found", config.load_model
        )]) from None
    say(f"warm start: model weights from {path} (load_model)")
    return path
