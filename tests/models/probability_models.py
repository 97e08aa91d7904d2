"""Model factories whose last layer already outputs probabilities, as Keras users write them."""

import keras


def softmax_mlp(task):
    inputs = keras.Input(task.input_shape)
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(task.output_dim, activation="softmax", name="probs")(hidden))


def sigmoid_mlp(task):
    return keras.Sequential([keras.Input(task.input_shape), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(task.output_dim, activation="sigmoid", name="scores")])
