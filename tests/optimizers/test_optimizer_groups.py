"""optimizer_groups: each group's variables train as Keras's own `MultiOptimizer` trains them with the same map;
`lr_multiplier` is the rate times the multiplier; a group that takes no variable is refused at its key."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.errors import ParamError
from opt_train.optimizers import grouping
from opt_train.optimizers.pipeline import optimize_loss

STEPS, BATCH = 6, 16


def make_model(seed=0):
    """Two named Dense layers: variable paths encoder/kernel, encoder/bias, head/kernel, head/bias."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,))
    hidden = keras.layers.Dense(4, activation="tanh", name="encoder")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(STEPS * BATCH, 5)).astype(np.float32)
    y = rng.normal(size=(STEPS * BATCH, 1)).astype(np.float32)
    return [(tf.constant(x[i:i + BATCH]), tf.constant(y[i:i + BATCH])) for i in range(0, len(x), BATCH)]


def loss_of(model):
    def loss(batch):
        x, y = batch
        return tf.reduce_mean(tf.square(model(x) - y))

    return loss


def weights(model):
    return {v.path: v.numpy() for v in model.trainable_variables}


GROUPS = [
    {"variables": "bias$", "optimizer": "KerasAdagrad", "optimizer_params": {"initial_accumulator_value": 0.2}},
    {"variables": "^encoder/", "optimizer": "KerasAdam", "optimizer_params": {"beta_1": 0.8}, "lr_multiplier": 0.5},
]


def test_the_numbers_of_keras_multi_optimizer_with_the_same_map():
    data = make_data()
    model = make_model()
    train_op = optimize_loss(loss_of(model), "SGD", {"learning_rate": 0.1, "momentum": 0.9},
                             var_list=model.trainable_variables, optimizer_groups=GROUPS)
    for batch in data:
        train_op(batch)
    assert train_op.optimizer.counts == (2, 1, 1)  # both biases, encoder/kernel, head/kernel

    reference = make_model()
    # Keras's own class and map (exact path first, then re.fullmatch), built for the same assignment.
    optimizer = keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
        keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        {".*bias": keras.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.2),
         "encoder/kernel": keras.optimizers.Adam(learning_rate=0.05, beta_1=0.8)}))
    for x, y in data:
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(tf.square(reference(x) - y))
        optimizer.apply(tape.gradient(value, reference.trainable_variables), reference.trainable_variables)

    got, want = weights(model), weights(reference)
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-6, atol=1e-7, err_msg=path)
    assert int(train_op.optimizer.iterations.numpy()) == STEPS
    # Each group's slots are its own optimizer's: Adagrad's accumulators for the two biases only.
    adagrad = train_op.optimizer.optimizers[0]
    assert sorted(v.path.split("/")[-1] for v in adagrad.variables if "accumulator" in v.path) == [
        "encoder_bias_accumulator", "head_bias_accumulator"]


def _tenth_run(optimizer_groups, head_rate, schedule=None):
    data = make_data(1)
    model = make_model(1)
    train_op = optimize_loss(loss_of(model), "Momentum", {"learning_rate": 0.1, "momentum": 0.9}, schedule,
                             var_list=model.trainable_variables, optimizer_groups=optimizer_groups)
    for batch in data:
        train_op(batch)
    return train_op, weights(model)


def test_lr_multiplier_a_tenth_equals_a_run_whose_group_has_a_tenth_of_the_rate():
    _, got = _tenth_run([{"variables": "^head/", "lr_multiplier": 0.1}], None)

    # Reference: two Keras-family optimizers by hand, the head's at 0.01.
    from opt_train.optimizers import get

    data, reference = make_data(1), make_model(1)
    head = [v for v in reference.trainable_variables if v.path.startswith("head/")]
    body = [v for v in reference.trainable_variables if not v.path.startswith("head/")]
    fast, slow = get("Momentum", learning_rate=0.1, momentum=0.9), get("Momentum", learning_rate=0.01, momentum=0.9)
    for x, y in data:
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(tf.square(reference(x) - y))
        grads = dict(zip([v.path for v in reference.trainable_variables],
                         tape.gradient(value, reference.trainable_variables)))
        fast.apply([grads[v.path] for v in body], body)
        slow.apply([grads[v.path] for v in head], head)
    want = weights(reference)
    for path in want:
        # The traced step and the eager reference may round one last bit apart (fused kernels).
        np.testing.assert_allclose(got[path], want[path], rtol=2e-6, atol=1e-8, err_msg=path)


def test_lr_multiplier_scales_the_policy_and_its_warmup():
    from opt_train.lr_policies import get_lr_policy

    policy = get_lr_policy("exp", learning_rate=0.1, decay_steps=2, decay_rate=0.5, warmup={"steps": 3})
    train_op, _ = _tenth_run([{"variables": "^head/", "lr_multiplier": 0.1}], None, policy)
    groups = train_op.optimizer
    head, rest = groups.optimizers
    for step in range(STEPS + 1):
        step = tf.constant(step, tf.int64)
        run_rate = float(policy(step))
        np.testing.assert_allclose(float(head._learning_rate(step)), 0.1 * run_rate, rtol=1e-6)
        assert float(rest._learning_rate(step)) == pytest.approx(run_rate, rel=1e-7)
    # The reported rate is the run's, at the applied updates.
    assert float(groups.learning_rate) == pytest.approx(float(policy(tf.constant(STEPS, tf.int64))), rel=1e-7)


def test_a_group_without_optimizer_overrides_the_top_level_params_key_by_key():
    name, params = grouping.settings({"variables": "x", "optimizer": None, "optimizer_params": {"beta1": 0.5}},
                                     "Adam", {"learning_rate": 0.1, "beta_1": 0.9, "beta_2": 0.99, "use_ema": True})
    assert name == "Adam" and params == {"beta_1": 0.5, "beta_2": 0.99, "use_ema": True}
    # A group naming its own optimizer takes its own parameters, and the run's moving average.
    name, params = grouping.settings({"variables": "x", "optimizer": "SGD", "optimizer_params": {}},
                                     "Adam", {"beta_1": 0.9, "use_ema": True})
    assert name == "SGD" and params == {"use_ema": True}


@pytest.mark.parametrize("groups, frozen, fragment", [
    ([{"variables": "^decoder/"}], None, "matches no trainable variable"),
    ([{"variables": "^head/"}], "^head/", "matches only variables freeze_variables_regex freezes (head/kernel"),
    ([{"variables": "kernel"}, {"variables": "^head/kernel"}], None,
     "go to optimizer_groups[0], the first group matching them"),
])
def test_a_group_taking_no_variable_is_refused_before_the_first_update(groups, frozen, fragment):
    model = make_model()
    train_op = optimize_loss(loss_of(model), "SGD", {"learning_rate": 0.1}, var_list=model.trainable_variables,
                             optimizer_groups=groups, freeze_variables_regex=frozen)
    with pytest.raises(ParamError) as caught:
        train_op.build()
    index = len(groups) - 1
    assert caught.value.key == f"optimizer_groups[{index}].variables" and caught.value.code == "out_of_range"
    assert fragment in caught.value.message


@pytest.mark.parametrize("entry, key, code", [
    ({"variables": "("}, "optimizer_groups[0].variables", "wrong_type"),
    ({"variables": "x", "lr_multiplier": 0}, "optimizer_groups[0].lr_multiplier", "out_of_range"),
    ({"variables": "x", "optimizer": "Adamm"}, "optimizer_groups[0].optimizer", "unknown_name"),
    ({"variables": "x", "optimiser": "Adam"}, "optimizer_groups[0].optimiser", "unknown_key"),
    ({"optimizer": "Adam"}, "optimizer_groups[0].variables", "missing"),
    ({"variables": "x", "optimizer_params": {"lr": 0.1}}, "optimizer_groups[0].optimizer_params.lr", "conflict"),
    ({"variables": "x", "optimizer_params": {"use_ema": True}}, "optimizer_groups[0].optimizer_params.use_ema",
     "conflict"),
])
def test_optimize_loss_refuses_a_bad_group_with_the_config_layer_s_rule(entry, key, code):
    model = make_model()
    with pytest.raises(ParamError) as caught:
        optimize_loss(loss_of(model), "SGD", {"learning_rate": 0.1}, var_list=model.trainable_variables,
                      optimizer_groups=[entry])
    assert (caught.value.key, caught.value.code) == (key, code)


def test_a_group_s_params_are_judged_by_its_optimizer_s_table():
    errors = grouping.param_errors(
        [{"variables": "x", "optimizer": "KerasAdam", "optimizer_params": {"beta_1": 1.5}, "lr_multiplier": 1.0},
         {"variables": "y", "optimizer": None, "optimizer_params": {"momentum": -1}, "lr_multiplier": 1.0},
         {"variables": "z", "optimizer": "Momentum", "optimizer_params": {}, "lr_multiplier": 1.0}],
        "SGD", {"learning_rate": 0.1, "nesterov": "yes"})
    found = {(error.key, error.code) for error in errors}
    assert found == {("optimizer_groups[0].optimizer_params.beta_1", "out_of_range"),
                     ("optimizer_groups[1].optimizer_params.momentum", "out_of_range"),
                     ("optimizer_groups[2].optimizer_params.momentum", "missing")}  # not the top-level nesterov


def test_every_group_keeps_the_run_s_moving_average():
    from opt_train.training.evaluation import _average_pairs, averaged_weights

    data, model = make_data(), make_model()
    train_op = optimize_loss(loss_of(model), "SGD", {"learning_rate": 0.1, "use_ema": True, "ema_momentum": 0.5},
                             var_list=model.trainable_variables, optimizer_groups=GROUPS)
    for batch in data:
        train_op(batch)
    pairs = _average_pairs(train_op.optimizer)
    assert sorted(v.path for v, _ in pairs) == sorted(v.path for v in model.trainable_variables)
    raw = weights(model)
    with averaged_weights(train_op.optimizer) as averaged:
        assert averaged
        for variable, average in pairs:
            np.testing.assert_array_equal(variable.numpy(), average.numpy())
    for path, value in weights(model).items():
        np.testing.assert_array_equal(value, raw[path])


@pytest.mark.slow  # a fresh process (logical CPU devices exist only before TensorFlow's runtime starts): ~25 s
def test_two_groups_on_two_replicas_with_mixed_backoff_iter_size_and_clipping_equal_keras_by_hand():
    """One loss scale and skip decision, one global norm over both groups, the replicas' all-reduce and
    iter_size: the run equals the same run computed group by group with Keras optimizers in one loop."""
    import json
    import pathlib

    from tests.support import run_python

    worker = pathlib.Path(__file__).with_name("groups_replicas_worker.py")
    done = run_python(f"import runpy; runpy.run_path({str(worker)!r}, run_name='__main__')")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["counts"] == [2, 2]
    # The poisoned micro-batch overflows float16: both skip that update alone, and Backoff halved the scale.
    assert found["applied"] == found["expected"] == [True, True, False, True, True]
    assert found["loss_scale"] == found["reference_scale"] == 2.0**13
    assert min(found["moved"].values()) > 1e-4  # every variable trained
    for path, difference in found["differences"].items():
        assert difference <= 1e-6, (path, found)


def test_lr_multiplier_follows_lr_control_s_factor():
    from opt_train.optimizers.optimizer_groups import group_rate
    from opt_train.training.controls import ScaledSchedule

    run_rate = ScaledSchedule(keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5))
    head = group_rate(run_rate, 0.1)
    step = tf.constant(3, tf.int64)
    before = float(head(step))
    run_rate.scale.assign(0.25)  # what lr_control sets after an evaluation
    np.testing.assert_allclose(float(head(step)), 0.25 * before, rtol=1e-6)
    np.testing.assert_allclose(float(head(step)), 0.1 * float(run_rate(step)), rtol=1e-6)
    assert group_rate(run_rate, 1.0) is run_rate and group_rate(0.5, 0.1) == pytest.approx(0.05)


def test_larc_reads_each_variable_s_group_multiplier():
    from opt_train.optimizers.larc import LarcState
    from opt_train.optimizers.pipeline import Pipeline

    model = make_model()
    train_op = optimize_loss(loss_of(model), "SGD", {"learning_rate": 0.1}, var_list=model.trainable_variables,
                             larc_params={"larc_eta": 0.01}, summaries=["larc_summaries"], optimizer_groups=[
                                 {"variables": "^head/", "lr_multiplier": 0.1}])
    result = train_op(make_data()[0], summarize=True)
    larc_state = Pipeline.handle(train_op.update_step.state, LarcState)
    assert [v.path for v in train_op.variables_to_train] == ["encoder/kernel", "encoder/bias", "head/kernel", "head/bias"]
    assert larc_state.rate_scale == (1.0, 1.0, 0.1, 0.1)
    # The rate each variable was updated at, as the summaries report it: its group's.
    for path, scale in (("encoder/kernel", 1.0), ("head/kernel", 0.1)):
        np.testing.assert_allclose(float(result[f"larc/final_lr/{path}"]),
                                   0.1 * scale * float(result[f"larc/grad_update/{path}"]), rtol=1e-6)


def test_float16_groups_each_keep_float32_masters_and_match_the_float32_run():
    """Under dtype float16 each group's optimizer updates its own float32 masters (MixedPrecisionOptimizerWrapper)."""
    from opt_train.optimizers.mixed_precision import MixedPrecisionOptimizerWrapper

    groups = [{"variables": "^head/", "optimizer": "KerasAdam", "lr_multiplier": 0.5}]
    finals, initial = {}, make_model().get_weights()
    for dtype in ("float32", "float16"):
        keras.mixed_precision.set_dtype_policy(dtype)
        try:
            model = make_model()
            model.set_weights([w.astype(dtype) for w in initial])
            train_op = optimize_loss(lambda batch: tf.cast(loss_of(model)(batch), tf.float32), "SGD",
                                     {"learning_rate": 0.1}, var_list=model.trainable_variables, dtype=dtype,
                                     optimizer_groups=groups)
            for x, y in make_data():
                train_op((tf.cast(x, dtype), tf.cast(y, dtype)))
        finally:
            keras.mixed_precision.set_dtype_policy("float32")
        finals[dtype] = {path: value.astype(np.float32) for path, value in weights(model).items()}
        if dtype == "float16":
            inner = train_op.optimizer.optimizers
            assert all(isinstance(o, MixedPrecisionOptimizerWrapper) for o in inner)
            assert [len(o.masters) for o in inner] == [2, 2]  # the head's two, the encoder's two
    for path, value in finals["float32"].items():
        np.testing.assert_allclose(finals["float16"][path], value, atol=5e-3, err_msg=path)
