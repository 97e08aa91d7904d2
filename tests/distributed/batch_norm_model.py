"""A small classifier with one BatchNormalization layer, for tests/distributed/test_batch_norm.py (`model: {factory: ...}`)."""

import keras


def build(task, synchronized=False):
    inputs = keras.Input(task.input_shape)
    hidden = keras.layers.Dense(16)(inputs)
    hidden = keras.layers.BatchNormalization(momentum=0.5, synchronized=synchronized)(hidden)
    hidden = keras.layers.Activation("relu")(hidden)
    return keras.Model(inputs, keras.layers.Dense(task.num_classes)(hidden))
