"""The training side of OpenSeq2Seq's keys: `initializer` on the built-in models, `load_model` warm starts."""

from __future__ import annotations

import keras
import tensorflow as tf

from opt_train.errors import ParamError

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
        raise ParamError.at("initializer_params", "unknown_key", f"do not fit {config.initializer}: {error}") from None


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


def warm_start_run(config, run, say):
    """OpenSeq2Seq's `load_model` for a fresh run: `init_from: {path: load_model}` (training/warm_start.py).

    The model's weights found in that run's (or folder's) latest checkpoint, cast to this
    run's dtype; neither the step nor the optimizer state. A path with no checkpoint, or
    nothing of this model in it, is a ConfigError at `load_model`.
    """
    from opt_train.training import warm_start

    return warm_start.warm_start_run(config, run, say, spec={"path": config.load_model}, key="load_model")
