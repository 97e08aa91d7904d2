"""float16 training applies the weight penalty in float32 on the master weights (OpenSeq2Seq's
mp_regularizer_wrapper), checked against the same SGD steps on a float32 twin."""

import keras
import numpy as np
import tensorflow as tf

from opt_train.optimizers.pipeline import get_regularization_loss, optimize_loss

SCALE, LR, STEPS = 1e-8, 1000.0, 3


def _model(dtype):
    layer = keras.layers.Dense(
        2, use_bias=False, dtype=dtype, kernel_regularizer=keras.regularizers.L2(SCALE),
        kernel_initializer=keras.initializers.Constant(0.5),
    )
    model = keras.Sequential([keras.Input((3,)), layer])
    return model


def _train(dtype):
    model = _model(dtype)
    batch = tf.ones([4, 3], dtype)

    def loss(batch):
        # Only the penalty moves the weights: the model term has no gradient.
        return tf.cast(tf.reduce_sum(model(batch)), tf.float32) * 0.0 + get_regularization_loss(model)

    train_op = optimize_loss(loss, keras.optimizers.SGD, {"learning_rate": LR}, var_list=model.trainable_variables,
                             dtype=dtype)
    for _ in range(STEPS):
        train_op(batch)
    return model, train_op


def test_a_1e_8_penalty_moves_float16_master_weights_as_it_moves_float32_ones():
    twin, _ = _train("float32")
    expected = twin.trainable_variables[0].numpy()
    # NumPy: each SGD step is w <- w - lr * 2 * scale * w, in float32.
    w = np.full((3, 2), 0.5, np.float32)
    for _ in range(STEPS):
        w = w - np.float32(LR) * (np.float32(2 * SCALE) * w)
    np.testing.assert_allclose(expected, w, rtol=1e-6)
    assert np.all(expected < 0.5)

    model, train_op = _train("float16")
    (master,) = train_op.optimizer.masters
    np.testing.assert_allclose(master.numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal(model.trainable_variables[0].numpy(), expected.astype(np.float16))


def test_the_penalty_is_counted_once():
    model = _model("float16")
    assert len(model.losses) == 1
    assert float(get_regularization_loss(model)) == 0.0  # left to the master weights
    twin = _model("float32")
    np.testing.assert_allclose(float(get_regularization_loss(twin)), SCALE * 6 * 0.25, rtol=1e-6)
