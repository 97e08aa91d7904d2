"""A user loss for `loss: {factory: "tests.data.losses_fixture:scaled_absolute"}`."""

import tensorflow as tf


def scaled_absolute(y_true, y_pred, scale=1.0):
    return scale * tf.reduce_mean(tf.abs(tf.cast(y_true, y_pred.dtype) - y_pred), axis=-1)
