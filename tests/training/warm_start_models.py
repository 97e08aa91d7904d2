"""A model factory for the warm-start tests: the mlp's layers under other names (`encoder_0`, `head`)."""

import keras


def renamed_mlp(task, units=6):
    inputs = keras.Input(task.input_shape, name="inputs")
    hidden = keras.layers.Flatten(name="flatten")(inputs) if len(task.input_shape) > 1 else inputs
    hidden = keras.layers.Dense(units, activation="relu", name="encoder_0")(hidden)
    logits = keras.layers.Dense(task.output_dim, name="head")(hidden)
    outputs = keras.layers.Activation("linear", dtype="float32", name="outputs")(logits)
    return keras.Model(inputs, outputs, name="renamed")
