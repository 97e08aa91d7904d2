"""`cnn`: a small conv net for image-like inputs; a flat input is reshaped to the task's image shape."""

from __future__ import annotations

import keras

from opt_train.errors import ParamError
from opt_train.models.layers import image_shape, output_head, task_input


def image_shape_of(task):
    """(height, width, channels) the model convolves over; a `ParamError` at `model` when the task has none."""
    image = image_shape(task)
    if image is None:
        raise ParamError.at(
            "model", "conflict",
            "Model `cnn` needs image-like inputs: (height, width[, channels]) per example, or a flat input the "
            f"dataset gives an image shape for. Received: input_shape={tuple(task.input_shape)}, "
            f"image_shape={task.image_shape}",
        )
    return image


def build_cnn(task, *, filters, kernel_size, dense_units, activation, dropout, regularizer=None):
    """[Conv2D(f, kernel_size, same) -> MaxPool 2x2] per entry of `filters` -> Dense -> logits.

    A pooling step is left out once the feature map is 1 pixel wide, so an 8x8 digit
    can take any number of conv blocks.

    Args:
        task: the dataset's `Task`; its input must be image-like (see `image_shape_of`).
        filters: channels of each conv block, e.g. `[16, 32]`.
        kernel_size: square kernel size of every conv.
        dense_units: width of the hidden Dense layer.
        activation: activation of convs and the hidden Dense.
        dropout: rate before the output layer (0 leaves Dropout out).
        regularizer: a Keras regularizer for every kernel, or None.
    """
    image = image_shape_of(task)
    inputs = task_input(task)
    hidden = inputs if tuple(task.input_shape) == image else keras.layers.Reshape(image, name="to_image")(inputs)
    height, width = image[0], image[1]
    for index, channels in enumerate(filters):
        hidden = keras.layers.Conv2D(
            channels, kernel_size, padding="same", activation=activation,
            kernel_regularizer=regularizer, name=f"conv_{index}",
        )(hidden)
        if min(height, width) >= 2:
            hidden = keras.layers.MaxPooling2D(2, name=f"pool_{index}")(hidden)
            height, width = height // 2, width // 2
    hidden = keras.layers.Flatten(name="flatten")(hidden)
    hidden = keras.layers.Dense(
        dense_units, activation=activation, kernel_regularizer=regularizer, name="dense"
    )(hidden)
    if dropout:
        hidden = keras.layers.Dropout(dropout, name="dropout")(hidden)
    return keras.Model(inputs, output_head(hidden, task, regularizer), name="cnn")
