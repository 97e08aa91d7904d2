"""A two-group run on 2 replicas (logical CPUs) with dtype mixed + Backoff, iter_size 2 and max_grad_norm, and the
same run computed group by group with Keras optimizers by hand; prints the largest differences as JSON.

Run in a fresh process: the CPU is split into logical devices before TensorFlow starts its runtime.
"""

import json
import sys

import numpy as np

from opt_train import quiet
from opt_train.cli.main import _exit_without_teardown

quiet.import_tensorflow()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from opt_train.distributed import get_backend  # noqa: E402
from opt_train.optimizers.pipeline import optimize_loss  # noqa: E402

PER_REPLICA, REPLICAS, ITER_SIZE, UPDATES = 4, 2, 2, 5
MAX_NORM, SCALE = 0.5, 2.0**14  # SCALE: Backoff's first scale (its scale_max)
POISONED = (2, 0)  # (update, micro-batch) holding a target that overflows float16's backward pass


def make_model():
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(6, activation="tanh", name="encoder")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))


def loss_of(model):
    def loss(batch):
        x, y = batch
        return tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y))

    return loss


def data():
    rng = np.random.default_rng(0)
    micro = PER_REPLICA * REPLICAS
    x = rng.normal(size=(UPDATES * ITER_SIZE * micro, 5)).astype(np.float32)
    y = rng.normal(size=(UPDATES * ITER_SIZE * micro, 1)).astype(np.float32)
    update, micro_batch = POISONED
    y[(update * ITER_SIZE + micro_batch) * micro] = 1e5
    return x, y


def main():
    backend = get_backend("tf", num_gpus=REPLICAS)
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    x, y = data()
    with backend.scope():
        model = make_model()
    initial = model.get_weights()
    train_op = optimize_loss(
        loss_of(model), "SGD", {"learning_rate": 0.1, "momentum": 0.9}, var_list=model.trainable_variables,
        distributed=backend, dtype="mixed", loss_scaling="Backoff", iter_size=ITER_SIZE, clip_gradients=MAX_NORM,
        count_skipped_updates=True,
        optimizer_groups=[{"variables": "^encoder/", "optimizer": "KerasAdam", "lr_multiplier": 0.5}],
    )
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(PER_REPLICA * REPLICAS)
    iterator = iter(backend.distribute(dataset, PER_REPLICA))
    applied = [bool(train_op.update(iterator)["applied"]) for _ in range(UPDATES)]

    # The reference: the same run, group by group, in one replica-less loop. Its gradients are
    # traced as the train op's are: eager float16 kernels round apart from traced ones.
    reference = make_model()
    reference.set_weights(initial)
    variables = reference.trainable_variables
    encoder = [v.path.startswith("encoder/") for v in variables]
    adam = keras.optimizers.Adam(learning_rate=0.05)
    sgd = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    loss, scale, expected = loss_of(reference), SCALE, []
    micro = PER_REPLICA * REPLICAS

    @tf.function(autograph=False)
    def gradients(xs, ys, scale):
        with tf.GradientTape() as tape:
            scaled = loss((xs, ys)) * scale
        return [tf.cast(g, tf.float32) / scale for g in tape.gradient(scaled, variables)]

    for update in range(UPDATES):
        total = [tf.zeros_like(v) for v in variables]
        for micro_batch in range(ITER_SIZE):
            start = (update * ITER_SIZE + micro_batch) * micro
            for replica in range(REPLICAS):  # each replica's slice, its scaled loss, unscaled in float32
                part = slice(start + replica * PER_REPLICA, start + (replica + 1) * PER_REPLICA)
                grads = gradients(tf.constant(x[part]), tf.constant(y[part]), tf.constant(scale, tf.float32))
                total = [t + g for t, g in zip(total, grads)]
        grads = [t / (ITER_SIZE * REPLICAS) for t in total]  # the replicas' mean of the micro-batches' mean
        finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in grads)
        expected.append(finite)
        if not finite:
            scale = max(scale / 2.0, 1.0)  # Backoff: halve on an overflow, skip the update
            continue
        grads, _ = tf.clip_by_global_norm(grads, MAX_NORM)  # one norm over both groups
        adam.apply([g for g, e in zip(grads, encoder) if e], [v for v, e in zip(variables, encoder) if e])
        sgd.apply([g for g, e in zip(grads, encoder) if not e], [v for v, e in zip(variables, encoder) if not e])

    differences = {v.path: float(np.max(np.abs(np.asarray(v.numpy()) - np.asarray(w.numpy()))))
                   for v, w in zip(model.trainable_variables, variables)}
    moved = {v.path: float(np.max(np.abs(np.asarray(v.numpy()) - i))) for v, i in zip(variables, initial)}
    json.dump({"applied": applied, "expected": expected, "differences": differences, "moved": moved,
               "loss_scale": float(train_op.loss_scaler.loss_scale), "reference_scale": scale, "counts": list(train_op.optimizer.counts)}, sys.stdout)


if __name__ == "__main__":
    main()
    _exit_without_teardown(0)  # as `opt-train` itself ends: exit hooks run, output flushed, no teardown
