"""OpenSeq2Seq keys at training time: tf1_l2, TF1 initializers, load_model warm starts, bench_start."""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.config import ConfigError, load_config
from opt_train.distributed import get_backend
from opt_train.training.builder import build_run

TINY = "model: mlp\nmodel_params: {hidden_units: [6]}\ndata: digits\nbatch_size_per_gpu: 16\nmax_steps: 2\n"


def config_at(tmp_path, text, name="run", overrides=()):
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY + text + f"logdir: {tmp_path / name}\n")
    return load_config([path], overrides)


def test_openseq2seq_l2_regularizer_is_tf1s_half_sum_of_squares(tmp_path):
    """`tf.contrib.layers.l2_regularizer(scale)` = scale * tf.nn.l2_loss(w) (TF's L2Loss kernel: sum(w^2)/2)."""
    config = config_at(tmp_path, "regularizer: tf.contrib.layers.l2_regularizer\nregularizer_params: {scale: 0.01}\n")
    model = build_run(config, get_backend(), with_train_op=False).model
    kernels = [v for v in model.trainable_variables if v.path.endswith("kernel")]
    expected = sum(0.01 * tf.nn.l2_loss(kernel) for kernel in kernels)
    assert float(tf.add_n(model.losses)) == pytest.approx(float(expected), rel=1e-6)
    # opt-train's own `l2` is Keras' scale * sum(w^2): twice as much.
    plain = build_run(config_at(tmp_path, "regularizer: l2\nregularizer_params: {scale: 0.01}\n", "l2"),
                      get_backend(), with_train_op=False).model
    same = [v for v in plain.trainable_variables if v.path.endswith("kernel")]
    assert float(tf.add_n(plain.losses)) == pytest.approx(float(sum(2 * 0.01 * tf.nn.l2_loss(k) for k in same)), rel=1e-6)


def test_tf1_initializer_draws_every_kernel_from_the_keras_initializer(tmp_path):
    config = config_at(tmp_path, "initializer: tf.contrib.layers.xavier_initializer\nrandom_seed: 3\n")
    model = build_run(config, get_backend(), with_train_op=False).model
    reference = tf.keras.initializers.VarianceScaling(scale=1.0, mode="fan_avg", distribution="uniform", seed=3)
    kernels = [v for v in model.trainable_variables if v.path.endswith("kernel")]
    assert len(kernels) == 2
    for kernel in kernels:
        np.testing.assert_array_equal(kernel.numpy(), reference(tuple(kernel.shape)).numpy())
    biases = [v for v in model.trainable_variables if v.path.endswith("bias")]
    assert all(not np.any(bias.numpy()) for bias in biases)  # zeros, as OpenSeq2Seq's layers leave them


def test_initializer_params_that_do_not_fit_name_the_key(tmp_path):
    config = config_at(tmp_path, "initializer: zeros\ninitializer_params: {stddev: 2.0}\n")
    with pytest.raises(ConfigError) as caught:
        build_run(config, get_backend(), with_train_op=False)
    [issue] = caught.value.issues
    assert issue.key.startswith("initializer_params")


@pytest.mark.slow  # 3 s on 2 cores
def test_load_model_warm_starts_from_another_runs_weights_only(tmp_path):
    from opt_train.training import train
    from opt_train.training.loop import Session

    first = train(config_at(tmp_path, "optimizer: Adam\noptimizer_params: {learning_rate: 0.1}\n", "first"))
    assert first["global_step"] == 2
    # The first run's weights as TF's checkpoint reader sees them (the loop saves the model's
    # variables as the list `model_variables`, in model.variables order).
    reader = tf.train.load_checkpoint(str(tmp_path / "first" / "checkpoints"))
    config = config_at(tmp_path, f"load_model: {tmp_path / 'first'}\n", "second")
    run = build_run(config, get_backend())
    session = Session(run)
    try:
        session.start(resume=True)
        assert session.step == 0  # neither the step nor the optimizer state is carried over
        assert int(run.train_op.optimizer.iterations.numpy()) == 0
        for index, variable in enumerate(run.model.variables):
            if variable.trainable:
                saved = reader.get_tensor(f"model_variables/{index}/.ATTRIBUTES/VARIABLE_VALUE")
                np.testing.assert_array_equal(variable.numpy(), saved)
        slots = [name for name, _ in tf.train.list_variables(str(tmp_path / "first" / "checkpoints"))
                 if "OPTIMIZER_SLOT" in name or "optimizer" in name.lower()]
        assert slots  # the first run did save optimizer state, which the warm start left alone
    finally:
        session.close()


def test_load_model_without_a_checkpoint_is_a_config_error(tmp_path):
    from opt_train.training import train

    with pytest.raises(ConfigError) as caught:
        train(config_at(tmp_path, f"load_model: {tmp_path / 'nothing'}\n"))
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("load_model", "file_not_found")


def test_bench_start_is_where_timing_starts(tmp_path):
    from opt_train.training import train

    final = train(config_at(tmp_path, "bench_start: 3\n", overrides=["max_steps=6"]), benchmark=True)
    assert final["benchmark/updates_timed"] == 3
