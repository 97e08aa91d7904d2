"""The DTensor mesh backend (opt_train/distributed/mesh.py) against one unsharded process on the same global batch.

Real `opt-train train` runs on 4 logical CPU devices: `mesh: {batch: 2, model: 2}` with every
kernel's output dimension on `model` (tensor parallel), and `mesh: {batch: 4}` with every
kernel's input dimension on `batch` (fully sharded). Each must train as one process trains
the same global batch: the losses it reports (metrics.jsonl) within 1e-4, the final weights
(the checkpoint) within 1e-5. The CPU is split into devices when TensorFlow starts, so the
mesh runs share one fresh process (tests/distributed/mesh_runner.py): the fast subset's, and
the matrix's too when a test of the matrix is selected; the one-process references train in
this process, each once for every test that compares with it.

The guard against plain variables and the Python API (`optimizers.get(..., mesh=mesh)`)
run here on a one-device mesh.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support import REPO, bare_environ, write_run

GLOBAL_BATCH = 64
BASE = {
    "model": "mlp",
    "model_params": {"hidden_units": [32]},
    "data": "digits",
    # Two updates: the second applies the optimizer state the first wrote (a stale read within a step shows
    # in the first already).
    "max_steps": 2,
    "print_loss_steps": 1,
    "eval_steps": None,
    "save_checkpoint_steps": 2,
    "save_summaries_steps": None,
    "export": False,
    "random_seed": 0,
}
MESHES = {
    "2x2": ({"batch": 2, "model": 2}, {".*kernel": [None, "model"]}),
    "fsdp": ({"batch": 4}, {".*kernel": ["batch", None]}),
}
MOMENTUM = {"optimizer": "Momentum", "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9, "use_nesterov": True}}
ADAM = {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.01}}
CASES = {
    "momentum": MOMENTUM,
    "adam": ADAM,
    "lamb": {"optimizer": "LAMB", "optimizer_params": {"learning_rate": 0.01}},
    "iter_size": {**ADAM, "iter_size": 2},
    "max_grad_norm": {**MOMENTUM, "max_grad_norm": 0.5},
    "larc": {**MOMENTUM, "larc_params": {"larc_eta": 0.002}},
    # 2^30 overflows float16 gradients: the first updates are skipped while the scale backs off (11,
    # all before step 1), and it does not grow again within the run (near the edge of overflow,
    # float16 rounding that differs between one device's sum and the mesh's could decide an update
    # either way).
    # At lr 0.01 float16's rounding (the batch axis sums float16 partial gradients, one device's matmul
    # accumulates in float32) stays within the 1e-5 (measured 6e-6); at lr 0.1 it reached 7e-4.
    # The biases are a group of their own, with a second Momentum optimizer: its float32 masters and the skip
    # over its float16 gradients too. (Not a normalizing optimizer there: Adam's or NovoGrad's first steps
    # turn float16's rounding differences into differences of a whole step.)
    "mixed_backoff": {**MOMENTUM, "optimizer_params": {**MOMENTUM["optimizer_params"], "learning_rate": 0.01},
                      "dtype": "mixed", "loss_scaling": "Backoff",
                      "loss_scaling_params": {"scale_max": 2.0**30, "step_window": 1000},
                      "optimizer_groups": [{"variables": "bias", "optimizer": "Momentum",
                                            "optimizer_params": {"momentum": 0.5}}]},
}
# Each on the 2x2 mesh only (`ON_2X2`): what a mesh adds to these is the 2x2 case's.
ON_2X2 = {
    # Two optimizer groups, each optimizer's state laid out on the mesh: the biases with NovoGrad at 5x
    # the rate (its first moment laid out as each bias, its second a scalar per variable, replicated),
    # the output kernel with Adam at half of it, the other kernel with the top-level Adam.
    "groups": {**ADAM, "optimizer_groups": [
        {"variables": "bias", "optimizer": "NovoGrad", "optimizer_params": {"beta2": 0.98, "weight_decay": 0.001},
         "lr_multiplier": 5.0},
        {"variables": "logits/kernel", "lr_multiplier": 0.5}]},
    # The moving average, written over the weights every 2 updates (so the weights compared, after 2, are
    # averages); with jit_compile: the reference compiles its step with XLA, the mesh runs it without (a
    # note says so).
    "ema_jit": {**ADAM, "optimizer_params": {"learning_rate": 0.01, "use_ema": True, "ema_overwrite_frequency": 2},
                "jit_compile": True},
    # The factored rows and columns laid out as their kernel's dimensions ([null, model]: the columns on model).
    # tanh: under ReLU a hidden unit dead on the whole batch gives the first kernel an all-zero gradient
    # column, digits' always-blank pixels all-zero rows, and Keras's Adafactor divides 0 by 0 where they meet
    # (its factored second moment, a row's times a column's, underflows float32): both sides stopped there.
    "adafactor": {"optimizer": "Adafactor", "optimizer_params": {"learning_rate": 0.1},
                  "model_params": {"hidden_units": [32], "activation": "tanh"}},
}
CASES.update(ON_2X2)
TRANSFORMER = {
    **BASE,
    "model": "transformer",
    "model_params": {"d_model": 16, "num_heads": 2, "num_layers": 1, "ff_dim": 32, "dropout": 0.0},
    "data": "reversal",
    "data_params": {"num_examples": 200},
    # Not Adam: the attention's key bias has a zero gradient (softmax ignores it) but for rounding
    # noise, which Adam's normalization turns into full steps, different on each side.
    **MOMENTUM,
}
# The embedding's width, the attention and the feed-forward block on `model` (Megatron's split: the
# first kernel by columns, the second by rows). The attention is split within each head (the query,
# key and value kernels [d_model, heads, head_dim] on head_dim, the output projection's [heads,
# head_dim, d_model] likewise): split by heads ([None, model, None]) it fails loudly in TF 2.21's
# SPMD expansion, since the einsum gradient computes each kernel's gradient as [d_model, heads *
# head_dim], a shape that cannot carry a split of its major part, and the reduction over the batch
# cannot gather (reduce_spmd_expander: "EmitAllScatter ... not more sharded").
TRANSFORMER_LAYOUTS = {
    "embedding": [None, "model"],
    "(query|key|value)/kernel": [None, None, "model"],
    "attention_output/kernel": [None, "model", None],
    "ff_in/kernel": [None, "model"],
    "ff_out/kernel": ["model", None],
}
FAST = [("adam", "2x2")]
BATCH_NORM_MODEL = {"factory": "tests.distributed.batch_norm_model:build"}
# Fully sharded: Momentum and Adam (their slots sharded as the kernels, each weight gathered on read, its
# gradient reduce-scattered) and mixed_backoff (the finite check and the skip over float16 gradients split
# on the batch axis). The gradient stages (iter_size, max_grad_norm, LARC, LAMB's trust ratio) run on 2x2
# only: they do not depend on which axis a kernel is split on (a norm or an accumulator over a sharded
# gradient is the same DTensor reduction on `model` as on `batch`), and 2x2 splits the batch too, so
# iter_size's accumulate-then-read is still read where a stale read would show.
ON_FSDP = ("momentum", "adam", "mixed_backoff")
# Momentum on 2x2 is max_grad_norm's, larc's and batch normalization's optimizer there.
ALSO_COVERED = [("momentum", "2x2")]
SLOW = [(case, mesh) for case in CASES for mesh in MESHES
        if (case, mesh) not in FAST + ALSO_COVERED and (mesh == "2x2" or case in ON_FSDP)]


def write(tmp, name, config):
    return str(write_run(tmp, config, f"{name}.yaml", logdir=name))


def mesh_config(case, mesh):
    axes, layouts = MESHES[mesh]
    config = {**BASE, **CASES[case]}
    return {**config, "mesh": axes, "layouts": layouts, "batch_size_per_gpu": GLOBAL_BATCH // axes["batch"]}


def reference_config(case):
    return {**BASE, **CASES[case], "batch_size_per_gpu": GLOBAL_BATCH}


def run_mesh_jobs(tmp, jobs):
    """Runs `jobs` (mesh_runner's) in one fresh process; returns their results."""
    jobs_path, results_path = tmp / "jobs.json", tmp / "results.json"
    jobs_path.write_text(json.dumps(jobs))
    env = bare_environ(HOME=str(tmp))
    job = subprocess.run([sys.executable, "-m", "tests.distributed.mesh_runner", str(jobs_path), str(results_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=1500, env=env)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    results = json.loads(results_path.read_text())
    for spec, result in zip(jobs, results):
        if result.get("code"):  # a failed run: its test says so (the others' runs are kept)
            logdir = _logdir(spec["argv"])
            os.makedirs(logdir, exist_ok=True)
            (Path(logdir) / "FAILED").write_text(str(result["code"]) + job.stderr[-2000:])
    return results, job.stdout


def _logdir(argv):
    if "--set" in argv:
        return argv[argv.index("--set") + 1].split("=", 1)[1]
    return str(Path(argv[argv.index("--config") + 1]).with_suffix(""))


def train_argv(config_path, evaluate=False):
    """The opt-train command line that trains `config_path`, without any evaluation unless `evaluate`.

    The matrix's runs and their references compare losses and weights: a mesh's evaluation is the
    fast case's and the mesh example's. Without it is `--mode train`, run.py's form, which takes no
    other flag.
    """
    return ["train", "--config", config_path] if evaluate else ["--config", config_path, "--mode", "train"]


def train_here(config_path, *args, evaluate=True):
    """An opt-train command in this process (the one-process references); `evaluate=False`: without `args`."""
    from opt_train.cli.main import main

    try:
        main([*train_argv(config_path, evaluate), *args])
    except SystemExit as stop:
        assert not stop.code, f"{config_path} exited {stop.code}"


def outcome(logdir):
    """(losses per step, skipped_steps per step, model variables) of a finished run."""
    import tensorflow as tf

    failed = logdir / "FAILED"
    assert not failed.exists(), failed.read_text()

    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "loss" in r]
    reader = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    weights = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
               if k.startswith("model_variables/")}
    return ([r["loss"] for r in records], [r["skipped_steps"] for r in records], weights)


def assert_equal_runs(mesh_dir, reference_dir, weights_atol=1e-5, loss_atol=1e-4):
    losses, skipped, weights = outcome(mesh_dir)
    expected_losses, expected_skipped, expected_weights = outcome(reference_dir)
    assert len(losses) == len(expected_losses) > 0
    np.testing.assert_allclose(losses, expected_losses, rtol=0, atol=loss_atol)
    assert skipped == expected_skipped
    assert sorted(weights) == sorted(expected_weights)
    for key, value in expected_weights.items():
        assert np.isfinite(value).all(), key  # assert_allclose counts NaN equal to NaN
        np.testing.assert_allclose(weights[key], value, rtol=0, atol=weights_atol, err_msg=key)


def matrix_jobs(tmp, pairs, export=False):
    """mesh_runner's jobs that train `pairs` on their meshes, each in `tmp`/case-mesh; evaluated and exported at
    their end with `export`."""
    configs = [write(tmp, f"{case}-{mesh}", {**mesh_config(case, mesh), "export": export}) for case, mesh in pairs]
    return [{"kind": "train", "argv": train_argv(config, evaluate=export)} for config in configs]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """name -> the logdir of its one-process reference, trained here on first use (`name` a case or a
    config of its own)."""
    tmp, trained = tmp_path_factory.mktemp("mesh-references"), set()

    def logdir(name, config=None):
        if name not in trained:
            train_here(write(tmp, f"{name}-reference", config or reference_config(name)), evaluate=False)
            trained.add(name)
        return tmp / f"{name}-reference"

    return logdir


# -- the fast subset: one case, the plan against the shards built ------------------------------
SHARDS = {
    "adam-2x2": mesh_config("adam", "2x2"),
    # Fully sharded, with EMA copies and iter_size accumulators, which the plan counts as state.
    "ema-fsdp": {**mesh_config("adam", "fsdp"), "iter_size": 2,
                 "optimizer_params": {"learning_rate": 0.01, "use_ema": True}},
    # Each group's optimizer with its own slots and scalars, beside the groups' counter.
    "groups-2x2": mesh_config("groups", "2x2"),
    # Adafactor's factored columns of the kernels sharded on model, its rows replicated.
    "adafactor-2x2": mesh_config("adafactor", "2x2"),
}


@pytest.fixture(scope="module")
def mesh_runs(request, tmp_path_factory):
    """(fast's tmp, its shards' results, slow's tmp or None, the runner's stdout): every mesh run of this
    module in one fresh process. The matrix's runs join it only when a test of the matrix is selected."""
    fast_tmp = tmp_path_factory.mktemp("mesh-fast")
    shards = [{"kind": "shards", "config": write(fast_tmp, name, config)} for name, config in SHARDS.items()]
    jobs = matrix_jobs(fast_tmp, FAST, export=True) + shards
    slow_tmp = None
    if any("slow" in item.fixturenames for item in request.session.items if item.path == request.node.path):
        slow_tmp = tmp_path_factory.mktemp("mesh-slow")
        jobs += slow_jobs(slow_tmp, fast_tmp)
    results, stdout = run_mesh_jobs(fast_tmp, jobs)
    return fast_tmp, dict(zip(SHARDS, results[len(FAST):])), slow_tmp, stdout


@pytest.fixture(scope="module")
def fast(mesh_runs, reference):
    tmp, shards, _, stdout = mesh_runs
    reference("adam")  # trained with the fixture, not in the fast tests
    return tmp, shards, stdout


def test_adam_on_a_2x2_mesh_equals_one_process(fast, reference):
    tmp, _, stdout = fast
    assert "the 4-device mesh runs on 4 logical CPU devices" in stdout
    assert_equal_runs(tmp / "adam-2x2", reference("adam"))


def test_the_export_of_a_mesh_run_is_an_ordinary_unsharded_model(fast, reference):
    import keras

    tmp, _, _ = fast
    exported = keras.models.load_model(tmp / "adam-2x2" / "export" / "model.keras")
    arrays = [np.asarray(weight) for weight in exported.weights]
    expected = outcome(reference("adam"))[2]
    for key, value in expected.items():
        assert any(a.shape == value.shape and np.allclose(a, value, rtol=0, atol=1e-5) for a in arrays), key
    assert os.path.isdir(tmp / "adam-2x2" / "export" / "saved_model")


@pytest.mark.parametrize("name", sorted(SHARDS))
def test_the_memory_plan_is_the_shards_the_backend_creates(fast, name):
    _, shards, _ = fast
    built = shards[name]
    assert built["weights"] == built["plan_weights"], built
    assert built["state"] == built["plan_state"], built


def test_kernels_sharded_on_a_model_axis_of_2_halve_their_bytes(fast):
    from opt_train.distributed.mesh_layout import plan_memory

    _, shards, _ = fast
    variables = [("dense_0/kernel", (64, 32), "float32"), ("dense_1/kernel", (32, 10), "float32")]
    whole = plan_memory(variables, optimizer="Adam", mesh=None, layouts=None)
    halved = plan_memory(variables, optimizer="Adam", mesh={"batch": 2, "model": 2},
                         layouts={".*kernel": [None, "model"]})
    assert halved.weights * 2 == whole.weights
    assert (halved.optimizer_state - halved.scalars) * 2 == whole.optimizer_state - whole.scalars
    assert shards["adam-2x2"]["weights"] < shards["adam-2x2"]["plan_weights"] * 2  # built sharded, not whole


# -- the matrix ---------------------------------------------------------------------------------
RESUMED = {**mesh_config("adam", "2x2"), "max_steps": 4, "save_checkpoint_steps": 4}


def slow_jobs(tmp, fast_tmp):
    """mesh_runner's jobs of the matrix, each in `tmp` (after the fast subset's, in `fast_tmp`)."""
    jobs = matrix_jobs(tmp, SLOW)
    # The transformer with its embedding, attention and feed-forward kernels on `model`.
    transformer = {**TRANSFORMER, "mesh": MESHES["2x2"][0], "layouts": TRANSFORMER_LAYOUTS,
                   "batch_size_per_gpu": 16}
    jobs.append({"kind": "train", "argv": train_argv(write(tmp, "transformer-2x2", transformer))})
    # The fast subset's 2x2 Adam run (its checkpoint of step 2), in two copies of its logdir, resumed to step 4 on
    # {batch: 2, model: 1} and without a mesh.
    for name, then, flags in (
        ("resume-narrow", {"mesh": {"batch": 2, "model": 1}}, []),
        # Without a mesh the batch is one process's 64: another batch_size_per_gpu, so --resume.
        ("resume-plain", {"mesh": None, "layouts": {}, "batch_size_per_gpu": GLOBAL_BATCH}, ["--resume"]),
    ):
        jobs.append({"kind": "copy", "from": str(fast_tmp / "adam-2x2"), "to": str(tmp / name)})
        second = write(tmp, f"{name}-then", {**RESUMED, **then})
        jobs.append({"kind": "train", "argv": ["train", "--config", second, "--set", f"logdir={tmp / name}",
                                               *flags]})
    # BatchNormalization: DTensor takes the moments over the whole (split) batch, as one process does.
    jobs.append({"kind": "train", "argv": train_argv(write(tmp, "batch_norm-2x2", {
        **mesh_config("momentum", "2x2"), "model": BATCH_NORM_MODEL, "model_params": {}}))})
    return jobs


@pytest.fixture(scope="module")
def slow(mesh_runs):
    tmp, stdout = mesh_runs[2], mesh_runs[3]
    (tmp / "runner-stdout.txt").write_text(stdout)
    return tmp


@pytest.mark.slow
@pytest.mark.parametrize(("case", "mesh"), SLOW)
def test_each_optimizer_and_stage_on_each_mesh_equals_one_process(slow, reference, case, mesh):
    assert_equal_runs(slow / f"{case}-{mesh}", reference(case))


@pytest.mark.slow
def test_jit_compile_on_a_mesh_of_cpu_devices_says_it_runs_without_xla(slow):
    assert "jit_compile: on a mesh of CPU devices DTensor runs the step itself, without XLA" in (
        slow / "runner-stdout.txt").read_text()


@pytest.mark.slow
def test_mixed_backoff_skips_the_same_updates(slow, reference):
    _, skipped, _ = outcome(slow / "mixed_backoff-2x2")
    assert skipped[-1] > 0  # the case tests something: updates were skipped
    assert skipped == outcome(reference("mixed_backoff"))[1]


@pytest.mark.slow
def test_batch_normalization_on_a_mesh_normalizes_the_global_batch_as_one_process(slow, reference):
    config = {**reference_config("momentum"), "model": BATCH_NORM_MODEL, "model_params": {}}
    assert_equal_runs(slow / "batch_norm-2x2", reference("batch_norm", config))


@pytest.mark.slow
def test_the_transformer_with_its_embedding_attention_and_feed_forward_sharded_equals_one_process(slow, reference):
    assert_equal_runs(slow / "transformer-2x2", reference("transformer", {**TRANSFORMER, "batch_size_per_gpu": 32}))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resume-narrow", "resume-plain"])
def test_a_2x2_checkpoint_resumes_on_another_mesh_as_an_uninterrupted_run(slow, reference, name):
    uninterrupted = {**reference_config("adam"), "max_steps": 4, "save_checkpoint_steps": 4}
    assert_equal_runs(slow / name, reference("resume", uninterrupted))


# -- in this process, on a one-device mesh -------------------------------------------------------
@pytest.fixture(scope="module")
def one_device():
    import keras

    from opt_train.distributed.mesh import MeshBackend

    backend = MeshBackend({"model": 1}, {".*kernel": [None, "model"]})

    def model():
        keras.utils.set_random_seed(3)
        built = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(2)])
        return backend.place_model(built)

    return backend, model


def batch():
    rng = np.random.RandomState(0)
    return rng.rand(8, 8).astype("float32"), rng.rand(8, 2).astype("float32")


def test_a_step_that_touches_a_plain_variable_is_refused_before_it_runs(one_device):
    import tensorflow as tf

    from opt_train.optimizers import optimize_loss

    backend, make = one_device
    model = make()
    counter = tf.Variable(0.0, name="my_counter")

    def loss(data):
        counter.assign_add(1.0)
        return tf.reduce_mean((model(data[0]) - data[1]) ** 2)

    train_op = optimize_loss(loss, "Momentum", {"learning_rate": 0.1, "momentum": 0.9},
                             var_list=model.trainable_variables, distributed=backend)
    with pytest.raises(ValueError, match=r"plain tf.Variable.*my_counter"):
        train_op(batch())
    assert counter.numpy() == 0.0


def test_get_with_mesh_lays_slots_out_as_their_variables(one_device):
    from tensorflow.experimental import dtensor

    from opt_train import optimizers
    from opt_train.optimizers.mesh_state import layout_of_variable

    backend, make = one_device
    model = make()
    optimizer = optimizers.get("SGD", learning_rate=0.1, momentum=0.9, nesterov=True, mesh=backend.mesh)
    optimizer.build(model.trainable_variables)
    layouts = {tuple(v.shape): layout_of_variable(v) for v in model.trainable_variables}
    assert [layout.sharding_specs for layout in layouts.values()].count(["unsharded", "model"]) == 2
    for variable in optimizer.variables:
        layout = layout_of_variable(variable)
        assert layout is not None, variable.path  # a DVariable
        expected = layouts.get(tuple(variable.shape), dtensor.Layout.replicated(backend.mesh, len(variable.shape)))
        assert layout == expected, variable.path


def test_dtensor_runs_a_jit_compiled_function_without_xla(one_device):
    """What the jit_compile note says: an out-of-range gather, which XLA clamps, fails as TensorFlow's own op."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    backend, _ = one_device
    plain = tf.Variable([1.0, 2.0, 3.0, 4.0])
    laid_out = dtensor.DVariable(backend.place_replicated(tf.constant([1.0, 2.0, 3.0, 4.0])))

    def gather(variable):
        return tf.function(lambda index: tf.gather(variable.read_value(), index), jit_compile=True)

    assert gather(plain)(tf.constant([10])).numpy().shape == (1,)  # XLA: no bounds error
    with pytest.raises(tf.errors.InvalidArgumentError, match="indices"):
        backend.read(gather(laid_out)(backend.place_replicated(tf.constant([10]))))


def test_rmsprop_without_centered_is_refused_on_a_mesh(one_device):
    from opt_train import optimizers
    from opt_train.errors import ParamError

    backend, _ = one_device
    with pytest.raises(ParamError, match="RMSProp cannot run on a mesh"):
        optimizers.get("RMSProp", learning_rate=0.1, mesh=backend.mesh)
    optimizers.get("RMSProp", learning_rate=0.1, centered=True, mesh=backend.mesh)


def test_train_prints_the_memory_plan_of_a_model_built_by_code(tmp_path, capsys):
    from opt_train.distributed.mesh_layout import format_bytes

    config = {**BASE, **MOMENTUM, "model": {"factory": "tests.distributed.batch_norm_model:build"},
              "model_params": {}, "batch_size_per_gpu": 32, "max_steps": 1}
    train_here(write(tmp_path, "factory", config), evaluate=False)
    # digits: 64 features, 10 classes. Dense 64->16, BatchNormalization(16) (gamma, beta trained;
    # moving mean and variance not), Dense 16->10; Momentum: one float32 slot per trained weight,
    # an int64 iteration count and a float32 learning rate.
    weights = (64 * 16 + 16) + 4 * 16 + (16 * 10 + 10)
    trained = (64 * 16 + 16) + 2 * 16 + (16 * 10 + 10)
    line = (f"memory per device: weights {format_bytes(4 * weights)}, optimizer state "
            f"{format_bytes(4 * trained + 8 + 4)}, total {format_bytes(4 * weights + 4 * trained + 12)}")
    assert line in capsys.readouterr().out


def test_a_mesh_is_refused_with_the_combine_pass_switched_on(monkeypatch):
    from opt_train.distributed.mesh import MeshBackend
    from opt_train.errors import ParamError
    from opt_train.quiet import DTENSOR_COMBINE_VARIABLE

    monkeypatch.setenv(DTENSOR_COMBINE_VARIABLE, "1")
    with pytest.raises(ParamError, match=DTENSOR_COMBINE_VARIABLE):
        MeshBackend({"model": 1})


def test_a_resume_may_change_the_model_axis_and_layouts_but_not_the_batch_axis(tmp_path):
    from opt_train.config.loader import load_config
    from opt_train.training.errors import RunRefused
    from opt_train.training.logdir import check_same_run

    logdir = tmp_path / "run"
    logdir.mkdir()
    load_config([write(tmp_path, "run", mesh_config("adam", "2x2"))]).dump(str(logdir / "config.yaml"))

    def resumed(name, **keys):
        config = load_config([write(tmp_path, name, {**mesh_config("adam", "2x2"), **keys})])
        config = dataclasses.replace(config, logdir=str(logdir))
        return check_same_run(config, str(logdir), continue_anyway=False)

    assert resumed("narrow", mesh={"batch": 2, "model": 1}, layouts={}) == []
    with pytest.raises(RunRefused, match="mesh"):
        resumed("wider", mesh={"batch": 4}, layouts={})  # the global batch doubles: another run


def test_train_refuses_a_layouts_key_that_matches_no_variable(tmp_path, capsys):
    from opt_train.cli.main import main

    config = {**mesh_config("adam", "2x2"), "mesh": {"model": 1}, "batch_size_per_gpu": 64,
              "layouts": {".*kernle": [None, "model"]}}
    with pytest.raises(SystemExit) as stop:
        main(["train", "--config", write(tmp_path, "misspelt", config)])
    assert stop.value.code == 2
    assert "layouts['.*kernle'] is the first match of no variable" in capsys.readouterr().err
