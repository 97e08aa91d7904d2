"""Pieces shared by the built-in models: the image shape of a task, inputs for it, and the float32 output head."""

from __future__ import annotations

import math


def image_shape(task):
    """(height, width, channels) an image model sees for `task`, or None when its input is not image-like.

    An example of 3 dimensions is taken as it is, one of 2 gets one channel, a flat one
    takes the dataset's `image_shape` when that holds as many values. TF-free, so the
    weight count (`models/size.py`) judges a task by the rule the builders use; each caller
    words its own error.
    """
    shape = tuple(task.input_shape)
    if len(shape) == 3:
        return shape
    if len(shape) == 2:
        return shape + (1,)
    image = task.image_shape
    if image is None or math.prod(image) != math.prod(shape):
        return None
    return tuple(image)


def task_input(task, name="inputs"):
    """A Keras Input for one batch of the task's examples (token ids stay int32)."""
    import keras

    return keras.Input(shape=tuple(task.input_shape), dtype=task.input_dtype, name=name)


def output_head(hidden, task, regularizer=None):
    """Dense to the task's output width, then cast to float32 so the loss sees float32 logits.

    The Dense computes in the policy's dtype (float16 under "mixed_float16"); the
    final linear Activation with dtype float32 is the cast.
    """
    import keras

    outputs = keras.layers.Dense(task.output_dim, kernel_regularizer=regularizer, name="logits")(hidden)
    return keras.layers.Activation("linear", dtype="float32", name="outputs")(outputs)
