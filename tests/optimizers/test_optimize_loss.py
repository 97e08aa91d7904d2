"""optimize_loss end to end on tiny models, each against a reference computed in the test:
a hand-written GradientTape + Keras optimizer loop, a NumPy expectation, or the weights before the step."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers.pipeline import get_regularization_loss, optimize_loss

MICRO, K, UPDATES = 4, 4, 8


def make_problem(seed=0):
    """A dense layer plus an embedding read through tf.gather (its gradient is an IndexedSlices)."""
    rng = np.random.default_rng(seed)
    init = {
        "kernel": rng.normal(size=(3, 1)).astype(np.float32),
        "bias": np.zeros(1, np.float32),
        "table": rng.normal(size=(6, 3)).astype(np.float32) * 0.1,
    }
    n = MICRO * K * UPDATES
    data = {
        "x": rng.normal(size=(n, 3)).astype(np.float32),
        "ids": rng.integers(0, 6, size=(n,)).astype(np.int32),
        "y": rng.normal(size=(n, 1)).astype(np.float32),
    }
    return init, data


def make_variables(init):
    return [tf.Variable(init[name], name=name) for name in ("kernel", "bias", "table")]


def make_loss(variables, sparse=True):
    """With `sparse`, the table is read by tf.gather (IndexedSlices gradient), else by a one-hot matmul."""
    kernel, bias, table = variables

    def lookup(ids):
        if sparse:
            return tf.gather(table, ids)
        return tf.matmul(tf.one_hot(ids, table.shape[0]), table)

    def loss(batch):
        x, ids, y = batch
        features = x + lookup(ids)
        return tf.reduce_mean(tf.square(tf.matmul(features, kernel) + bias - y))

    return loss


def batches(data, size):
    n = len(data["y"])
    return [tuple(tf.constant(data[key][i:i + size]) for key in ("x", "ids", "y")) for i in range(0, n, size)]


def schedule():
    return keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=3, decay_rate=0.7)


# name -> (class, params, sparse embedding gradient). Keras 3's Adam updates its moments lazily
# (only the rows) for an IndexedSlices gradient, while an accumulated gradient is dense; so Adam
# is compared on the dense lookup, SGD and Momentum (where both forms agree) on the sparse one.
OPTIMIZERS = {
    "sgd": (keras.optimizers.SGD, {}, True),
    "momentum": (keras.optimizers.SGD, {"momentum": 0.9}, True),
    "adam": (keras.optimizers.Adam, {}, False),
}


def reference_run(cls, params, init, data, sparse):
    """The hand-written loop: one Keras optimizer step per batch of K * MICRO examples."""
    variables = make_variables(init)
    loss = make_loss(variables, sparse)
    optimizer = cls(learning_rate=schedule(), **params)
    for batch in batches(data, MICRO * K):
        with tf.GradientTape() as tape:
            value = loss(batch)
        optimizer.apply(tape.gradient(value, variables), variables)
    return [v.numpy() for v in variables]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_iter_size_k_on_b_equals_one_update_on_kb(name):
    cls, params, sparse = OPTIMIZERS[name]
    init, data = make_problem()
    expected = reference_run(cls, params, init, data, sparse)

    for iter_size, micro in ((K, MICRO), (1, MICRO * K)):
        variables = make_variables(init)
        train_op = optimize_loss(make_loss(variables, sparse), cls, params, schedule(), var_list=variables,
                                 iter_size=iter_size)
        for batch in batches(data, micro):
            result = train_op(batch)
        assert int(result["global_step"]) == UPDATES
        assert int(train_op.optimizer.iterations.numpy()) == UPDATES
        for got, want in zip(variables, expected):
            np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=0)


def snapshot(train_op, variables):
    return [v.numpy().copy() for v in variables] + [v.numpy().copy() for v in train_op.optimizer.variables]


def test_skipped_step_leaves_every_variable_bit_identical():
    init, data = make_problem()
    variables = make_variables(init)
    base_loss = make_loss(variables)
    poisoned = tf.Variable(False)

    def loss(batch):
        return tf.where(poisoned, float("nan"), base_loss(batch))

    train_op = optimize_loss(loss, keras.optimizers.Adam, {}, schedule(), var_list=variables, iter_size=2,
                             clip_gradients=1.0, count_skipped_updates=True)
    stream = batches(data, MICRO)
    for batch in stream[:4]:
        train_op(batch)
    before = snapshot(train_op, variables)
    lr_before = float(train_op.optimizer.learning_rate)
    poisoned.assign(True)
    train_op(stream[4])
    poisoned.assign(False)
    result = train_op(stream[5])  # the finite second micro-batch cannot rescue the update
    assert bool(result["update"]) and not bool(result["applied"])
    assert int(result["skipped_steps"]) == 1 and int(result["consecutive_overflows"]) == 1
    assert int(result["global_step"]) == 3  # skipped updates count in global_step ...
    assert int(train_op.optimizer.iterations.numpy()) == 2  # ... but not in the lr position
    after = snapshot(train_op, variables)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert float(train_op.optimizer.learning_rate) == lr_before
    for batch in stream[6:8]:
        result = train_op(batch)
    assert bool(result["applied"]) and int(result["consecutive_overflows"]) == 0
    assert train_op.stop_reason is None


def fp16_problem():
    """Gradients of about 4e-8 per element: below float16's smallest subnormal unless the loss is scaled."""
    w = tf.Variable(tf.fill([4, 1], tf.constant(0.5, tf.float16)), name="w")
    x = tf.ones([8, 4], tf.float16)
    tiny = tf.constant(1e-4, tf.float16)

    def loss(batch):
        return tf.reduce_mean(tf.square(tf.matmul(batch, w))) * tiny * tiny

    return w, x, loss


def test_float16_with_backoff_trains_where_unscaled_gradients_underflow():
    w, x, loss = fp16_problem()
    plain = optimize_loss(loss, keras.optimizers.SGD, {"learning_rate": 1e4}, None, var_list=[w],
                          dtype="float16")
    for _ in range(12):
        result = plain(x)
    assert float(result["global_gradient_norm"]) == 0.0  # every gradient flushed to zero
    np.testing.assert_array_equal(w.numpy(), 0.5)

    w, x, loss = fp16_problem()
    scaled = optimize_loss(loss, keras.optimizers.SGD, {"learning_rate": 1e4}, None, var_list=[w],
                           dtype="float16", loss_scaling="Backoff",
                           loss_scaling_params={"step_window": 4, "scale_max": 2.0**24})
    for _ in range(12):
        result = scaled(x)
    skipped = int(result["skipped_steps"])
    # 2**24 (set: the default is 2**14) overflows float16 as soon as it meets the loss; Backoff halves it until it fits.
    assert 0 < skipped < 12 and float(result["loss_scale"]) <= 2.0**16
    assert np.isfinite(w.numpy()).all()
    # float32 math: each applied step moves w by lr * 2 * mean(x @ w) * 1e-8 = 1e4 * 4e-8 (w barely moves).
    master = scaled.optimizer.masters[0].numpy()
    np.testing.assert_allclose(master, 0.5 - (12 - skipped) * 1e4 * 4e-8, rtol=1e-2)
    assert (w.numpy() < 0.5).all()


def test_freeze_regex_gives_no_update_and_no_slots():
    init, data = make_problem()
    variables = make_variables(init)
    train_op = optimize_loss(make_loss(variables), keras.optimizers.Adam, {"learning_rate": 0.1}, None,
                             var_list=variables, freeze_variables_regex="^(table|bias)$")
    for batch in batches(data, MICRO)[:3]:
        train_op(batch)
    np.testing.assert_array_equal(variables[1].numpy(), init["bias"])
    np.testing.assert_array_equal(variables[2].numpy(), init["table"])
    assert not np.array_equal(variables[0].numpy(), init["kernel"])
    slot_names = [v.path for v in train_op.optimizer.variables]
    assert not any("table" in name or "bias" in name for name in slot_names), slot_names
    assert [v.name for v in train_op.frozen_variables] == ["bias:0", "table:0"]


def test_no_variable_to_train_names_var_list_and_freezing_them_all_or_none_names_the_regex():
    from opt_train.errors import ParamError

    init, _ = make_problem()
    variables = make_variables(init)
    for var_list, regex, key in (([], None, "var_list"), (variables, ".", "freeze_variables_regex"),
                                 (variables, "^nothing$", "freeze_variables_regex")):
        train_op = optimize_loss(make_loss(variables), keras.optimizers.Adam, {}, None,
                                 var_list=var_list, freeze_variables_regex=regex)
        with pytest.raises(ParamError) as caught:
            train_op.build()
        assert caught.value.param == key and (key == "freeze_variables_regex") == ("freeze" in str(caught.value))


def test_checkpoint_round_trip_mid_accumulation(tmp_path):
    init, data = make_problem()
    stream = batches(data, MICRO)

    def build(loss_scaling="Dynamic"):
        variables = make_variables(init)
        # A plain Keras instance: registry optimizers expose TF1 `get_slot_names`, which
        # tf.train.Checkpoint mistakes for TF1 slots (reported to the registry's owner).
        op = optimize_loss(make_loss(variables), keras.optimizers.Adam(schedule()), None, None,
                           var_list=variables, iter_size=3, loss_scaling=loss_scaling)
        op.build()
        return variables, op, tf.train.Checkpoint(variables=variables, **op.checkpoint_items())

    variables, op, checkpoint = build()
    for batch in stream[:5]:  # one update and two micro-batches into the next
        op(batch)
    path = checkpoint.save(str(tmp_path / "ckpt"))
    for batch in stream[5:10]:
        op(batch)
    expected = [v.numpy() for v in variables]

    variables, op, checkpoint = build()
    checkpoint.restore(path).assert_consumed()
    assert int(op.global_step.numpy()) == 1
    for batch in stream[5:10]:
        result = op(batch)
    assert int(result["global_step"]) == 3
    for got, want in zip(variables, expected):
        np.testing.assert_array_equal(got.numpy(), want)


def test_stop_policies():
    init, data = make_problem()
    variables = make_variables(init)
    base = make_loss(variables)
    op = optimize_loss(lambda b: base(b) * float("inf"), "SGD", {"learning_rate": 0.1}, None,
                       var_list=variables, on_nonfinite="stop")
    op(batches(data, MICRO)[0])
    assert "loss is not finite" in op.stop_reason
    np.testing.assert_array_equal(variables[0].numpy(), init["kernel"])

    op = optimize_loss(lambda b: base(b) * float("nan"), "SGD", {"learning_rate": 0.1}, None,
                       var_list=variables, max_consecutive_overflows=2)
    op(batches(data, MICRO)[0])
    assert op.stop_reason is None
    op(batches(data, MICRO)[1])
    assert "2 consecutive non-finite updates" in op.stop_reason


def test_summaries_and_stats():
    init, data = make_problem()
    variables = make_variables(init)
    op = optimize_loss(make_loss(variables), "SGD", {"learning_rate": 0.1}, None, var_list=variables,
                       larc_params={"larc_eta": 0.002}, summaries=["gradient_norm", "larc_summaries",
                                                                   "variable_norm"])
    batch = batches(data, MICRO)[0]
    with tf.GradientTape() as tape:
        value = make_loss(variables)(batch)
    grads = tape.gradient(value, variables)
    raw = [tf.convert_to_tensor(g).numpy() for g in grads]
    # Reference 002's global norm: an IndexedSlices counts by its values (as tf.clip_by_global_norm).
    slice_values = [g.values.numpy() if isinstance(g, tf.IndexedSlices) else g.numpy() for g in grads]
    norms_before = [np.linalg.norm(v.numpy()) for v in variables]
    result = op(batch, summarize=True)
    np.testing.assert_allclose(float(result["global_gradient_norm"]),
                               np.sqrt(sum(np.sum(g**2) for g in slice_values)), rtol=1e-5)
    ratio = min(max(0.002 * norms_before[0] / (0.1 * (np.linalg.norm(raw[0]) + 1e-7)), 1e-7), 1.0)
    np.testing.assert_allclose(float(result["larc/grad_update/kernel"]), ratio, rtol=1e-5)
    np.testing.assert_allclose(float(result["gradient_norm/kernel"]), ratio * np.linalg.norm(raw[0]), rtol=1e-5)
    assert "variable_norm/table" in result and "gradients/kernel" not in result


def test_clip_then_larc_as_openseq2seq():
    """Both given: clip by global norm, then LARC on the clipped gradient (post_process_gradients' order)."""
    init, data = make_problem()
    variables = make_variables(init)
    before = [v.numpy().copy() for v in variables]
    lr, cap, eta = 0.1, 0.05, 0.002
    op = optimize_loss(make_loss(variables), "SGD", {"learning_rate": lr}, None, var_list=variables,
                       clip_gradients=cap, larc_params={"larc_eta": eta})
    batch = batches(data, MICRO)[0]
    with tf.GradientTape() as tape:
        value = make_loss(variables)(batch)
    grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(value, variables)]
    result = op(batch)
    norm = np.sqrt(sum(np.sum(g**2) for g in grads))
    assert norm > cap  # the clip acts, so the order shows
    clipped = [g * cap / norm for g in grads]
    for b, g, v in zip(before, clipped, variables):
        ratio = min(max(eta * np.linalg.norm(b) / (lr * (np.linalg.norm(g) + 1e-7)), 1e-7), 1.0)
        np.testing.assert_allclose(v.numpy(), b - lr * ratio * g, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(result["global_clipped_gradient_norm"]), cap, rtol=1e-5)


def test_config_errors():
    with pytest.raises(ValueError, match="unknown summary 'gradient_norms'; did you mean 'gradient_norm'"):
        optimize_loss(lambda b: 0.0, "SGD", {}, None, summaries=["gradient_norms"])
    with pytest.raises(ValueError, match="`iter_size` must be an integer >= 1. Received: iter_size=0"):
        optimize_loss(lambda b: 0.0, "SGD", {}, None, iter_size=0)


def test_get_regularization_loss_sums_in_float32():
    layer = keras.layers.Dense(2, kernel_regularizer=keras.regularizers.L2(0.5))
    model = keras.Sequential([keras.Input((3,)), layer])
    model(tf.ones([1, 3]))
    expected = 0.5 * np.sum(layer.kernel.numpy() ** 2)
    total = get_regularization_loss(model)
    assert total.dtype == tf.float32
    np.testing.assert_allclose(float(total), expected, rtol=1e-6)
    assert float(get_regularization_loss(keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)]))) == 0.0


def test_run_of_many_micro_batches_equals_one_call_each():
    """`train_op.run(iterator, n)` is n updates' calls in one compiled loop: same weights, slots and step."""
    data = np.random.default_rng(7).normal(size=(12, 3, 2)).astype(np.float32)

    def make():
        weights = tf.Variable(np.ones((2, 1), np.float32), name="w")

        def loss(batch):
            return tf.reduce_mean(tf.square(batch @ weights - 1.0))

        train_op = optimize_loss(loss, "Momentum", {"learning_rate": 0.05, "momentum": 0.9},
                                 var_list=[weights], iter_size=3, clip_gradients=1.0)
        return weights, train_op

    one_by_one, stepped = make()
    losses = [float(stepped(tf.constant(batch), statistics=False)["loss"]) for batch in data]
    together, looped = make()
    mean_loss = looped.run(iter(tf.data.Dataset.from_tensor_slices(data)), len(data) // 3)  # updates
    # The float64 sum of the float32 losses, the same however the calls split the updates (the report
    # interval adds these sums: a resumed run's calls split differently from an uninterrupted run's).
    assert float(looped.last_loss_sum) == math.fsum(losses)
    assert float(mean_loss) == np.float32(math.fsum(losses) / len(losses))
    _, split = make()
    iterator = iter(tf.data.Dataset.from_tensor_slices(data))
    sums = []
    for updates in (1, 2):
        split.run(iterator, updates)
        sums.append(float(split.last_loss_sum))
    split.update(iterator)  # one update: its iter_size micro-batches
    sums.append(float(split.last_loss_sum))
    assert sum(sums) == math.fsum(losses)

    np.testing.assert_array_equal(together.numpy(), one_by_one.numpy())
    for ours, theirs in zip(looped.optimizer.variables, stepped.optimizer.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert int(looped.global_step.numpy()) == int(stepped.global_step.numpy()) == 4
    assert np.isfinite(float(mean_loss))
    with pytest.raises(ValueError, match="must be a tf.data iterator"):
        looped.run(iter(data), 2)


def test_update_and_run_finish_an_update_begun_one_micro_batch_at_a_time():
    """The train op asks the accumulate stage how many micro-batches are left in the update
    (optax's `MultiSteps` style), so after a caller fed some of an update's micro-batches
    itself, `update` and `run` end that update instead of running `iter_size` more."""
    data = np.random.default_rng(9).normal(size=(6, 3, 2)).astype(np.float32)

    def make():
        weights = tf.Variable(np.ones((2, 1), np.float32), name="w")

        def loss(batch):
            return tf.reduce_mean(tf.square(batch @ weights - 1.0))

        return weights, optimize_loss(loss, "Momentum", {"learning_rate": 0.05, "momentum": 0.9},
                                      var_list=[weights], iter_size=3)

    mixed, op = make()
    op(tf.constant(data[0]), statistics=False)
    result = op.update(iter(tf.data.Dataset.from_tensor_slices(data[1:3])))
    assert bool(result["update"]) and bool(result["applied"])
    assert (int(op.global_step.numpy()), op.data_position) == (1, 3)
    op(tf.constant(data[3]), statistics=False)
    op(tf.constant(data[4]), statistics=False)
    op.run(iter(tf.data.Dataset.from_tensor_slices(data[5:])), 1)
    assert (int(op.global_step.numpy()), op.data_position) == (2, 6)

    fed, reference = make()
    for batch in data:
        reference(tf.constant(batch), statistics=False)
    np.testing.assert_array_equal(mixed.numpy(), fed.numpy())


def test_every_kind_of_step_shares_one_trace_of_the_loss_and_the_same_updates():
    """Several updates in one call, one with statistics, one with summaries: the loss (the
    model's forward pass) is traced once for all three, and the weights move as one call per
    update moves them."""
    data = np.random.default_rng(8).normal(size=(6, 3, 2)).astype(np.float32)

    def make():
        weights = tf.Variable(np.ones((2, 1), np.float32), name="w")
        traces = []

        def loss(batch):
            traces.append(1)  # Python runs only while a function is traced
            return tf.reduce_mean(tf.square(batch @ weights - 1.0))

        op = optimize_loss(loss, "Adam", {"learning_rate": 0.05}, var_list=[weights],
                           summaries=["variables", "gradient_norm"])
        return weights, op, traces

    kinds, op, traces = make()
    op.run(iter(tf.data.Dataset.from_tensor_slices(data[:2])), 2)
    op(tf.constant(data[2]), statistics=True)
    summarized = op(tf.constant(data[3]), summarize=True)
    op.run(iter(tf.data.Dataset.from_tensor_slices(data[4:])), 2)
    assert len(traces) == 1
    assert set(summarized) >= {"variables/w", "gradient_norm/w", "loss", "global_step"}

    reference, plain, _ = make()
    for batch in data:
        plain(tf.constant(batch), statistics=False)
    np.testing.assert_array_equal(kinds.numpy(), reference.numpy())
    assert int(op.global_step.numpy()) == int(plain.global_step.numpy()) == 6


@pytest.mark.parametrize("driven_by", ["call", "run"])
@pytest.mark.slow  # 4 s on 2 cores, its 2 cases
def test_xla_compiled_pipeline_equals_the_reference_loop(driven_by):
    """`jit_compile=True`, one call per micro-batch or one `run` over all of them, against the Keras loop.

    Backoff's power-of-two scale is exact in float32, so it must not move the result either.
    """
    cls, params, sparse = OPTIMIZERS["adam"]
    init, data = make_problem()
    expected = reference_run(cls, params, init, data, sparse)

    variables = make_variables(init)
    train_op = optimize_loss(make_loss(variables, sparse), cls, params, schedule(), var_list=variables,
                             iter_size=K, loss_scaling="Backoff", jit_compile=True)
    micro_batches = batches(data, MICRO)
    if driven_by == "call":
        for batch in micro_batches:
            train_op(batch, statistics=False)
    else:
        stacked = tuple(tf.stack(part) for part in zip(*micro_batches))
        train_op.run(iter(tf.data.Dataset.from_tensor_slices(stacked)), len(micro_batches) // K)  # updates
    assert int(train_op.global_step.numpy()) == UPDATES
    assert int(train_op.optimizer.iterations.numpy()) == UPDATES
    for got, want in zip(variables, expected):
        np.testing.assert_allclose(got.numpy(), want, atol=1e-5, rtol=0)


def test_a_sparse_update_by_a_tf1_kernel_compiles_whole_under_xla():
    """TF1's Momentum updates an embedding's rows with `ResourceSparseApplyMomentum`, which XLA
    cannot compile: under `jit_compile` the same update runs as separate ops (before, the step
    failed to compile: `jit_compile: true` with an embedding model and Momentum, Adagrad, Ftrl
    or RMSProp)."""
    init, data = make_problem()
    trained = []
    for jit_compile in (False, True):
        variables = make_variables(init)
        train_op = optimize_loss(make_loss(variables, sparse=True), "Momentum", {"momentum": 0.9}, schedule(),
                                 var_list=variables, jit_compile=jit_compile)
        stacked = tuple(tf.stack(part) for part in zip(*batches(data, MICRO)))
        train_op.run(iter(tf.data.Dataset.from_tensor_slices(stacked)), len(stacked[0]))
        trained.append([v.numpy() for v in variables])
    for compiled, plain, start in zip(trained[1], trained[0], init.values()):
        assert not np.array_equal(plain, start)
        np.testing.assert_allclose(compiled, plain, atol=1e-6, rtol=1e-5)


# The stages in two pipelines (the two loss scalers cannot share one), each XLA-compiled once: a
# compile is ~2 s on 2 cores, and a stage that compiles to other updates moves the weights, slots or
# scale of the pipeline it is in as it would alone. Accumulation with Backoff and LARC stays in the fast
# subset (with an update skipped within it); LogMax with clipping runs with -m slow.
STAGES = {
    "backoff_iter_size_larc": {"loss_scaling": "Backoff", "loss_scaling_params": {"step_window": 3},
                               "iter_size": 2, "larc_params": {"larc_eta": 0.002}},
    "logmax_clipping": {"loss_scaling": "LogMax", "clip_gradients": 0.05},
}
FAST_XLA_STAGE = "backoff_iter_size_larc"


@pytest.mark.parametrize("stage", [stage if stage == FAST_XLA_STAGE else pytest.param(stage, marks=pytest.mark.slow)
                                   for stage in sorted(STAGES)])
def test_every_stage_gives_the_same_updates_under_xla(stage):
    """Each pipeline stage XLA-compiled against the same pipeline run by TensorFlow's executor.

    One micro-batch has a NaN loss, so the skip path runs compiled too.
    """
    init, data = make_problem()
    outcomes = []
    for jit_compile in (False, True):
        variables = make_variables(init)
        base_loss = make_loss(variables, sparse=False)
        poisoned = tf.Variable(False)

        def loss(batch, base_loss=base_loss, poisoned=poisoned):
            return tf.where(poisoned, float("nan"), base_loss(batch))

        train_op = optimize_loss(loss, keras.optimizers.Adam, {}, schedule(), var_list=variables,
                                 jit_compile=jit_compile, **STAGES[stage])
        for index, batch in enumerate(batches(data, MICRO)[:24]):
            poisoned.assign(index == 9)
            result = train_op(batch)
        outcomes.append((snapshot(train_op, variables), int(result["skipped_steps"]), float(result["loss_scale"])))
    (plain, plain_skipped, plain_scale), (compiled, compiled_skipped, compiled_scale) = outcomes
    assert compiled_skipped == plain_skipped == 1
    assert compiled_scale == plain_scale
    for got, want in zip(compiled, plain):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
