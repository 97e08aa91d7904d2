"""Mesh axes, layouts and the memory plan (distributed/mesh_layout.py) against Keras: its LayoutMap's matching and
the bytes of the variables a built Keras model and a built optimizer hold."""

import math
import re

import pytest

from opt_train.distributed.mesh_layout import (
    MASTER_DTYPES,
    batch_axis_of,
    check_layouts,
    format_bytes,
    layout_of,
    mesh_axes,
    plan_memory,
    process_batch_shards,
    slot_layout,
    variable_dtype,
)
from opt_train.errors import ParamError
from opt_train.optimizers.table import TABLE

MESH = {"batch": 2, "model": 2}


# -- mesh axes -----------------------------------------------------------------------------------------------


def test_mesh_axes_keep_the_yaml_order_and_none_is_no_mesh():
    assert list(mesh_axes({"model": 4, "batch": 2})) == ["model", "batch"]
    assert mesh_axes(None) == {}
    assert batch_axis_of(MESH, "batch") == "batch"
    assert batch_axis_of({"model": 4}, "batch") is None
    assert batch_axis_of({}, "batch") is None


@pytest.mark.parametrize("value, code", [
    ([2, 2], "wrong_type"), ({}, "out_of_range"), ({"batch": 0}, "out_of_range"), ({"batch": 1.5}, "wrong_type"),
    ({"batch": True}, "wrong_type"), ({"unsharded": 2}, "wrong_type"), ({3: 2}, "wrong_type"),
])
def test_a_bad_mesh_is_a_param_error_at_mesh(value, code):
    with pytest.raises(ParamError) as caught:
        mesh_axes(value)
    assert (caught.value.key, caught.value.code) == ("mesh", code)


# -- layouts: Keras 3's LayoutMap, first match wins ---------------------------------------------------------


def dtensor_batch_coordinates(mesh, processes, axis="batch"):
    """Each process's batch-axis coordinates by DTensor's own rule (`create_distributed_mesh`, TF 2.21):
    process p holds devices p*L .. p*L+L-1 of `arange(devices).reshape(shape)`, L = devices / processes."""
    import numpy as np

    shape = tuple(mesh.values())
    per_process = math.prod(shape) // processes
    flat = np.arange(math.prod(shape))
    coordinates = np.unravel_index(flat, shape)[list(mesh).index(axis)]
    return [sorted(set(coordinates[p * per_process:(p + 1) * per_process].tolist())) for p in range(processes)]


@pytest.mark.parametrize("mesh, processes", [
    ({"batch": 2, "model": 2}, 2), ({"batch": 4}, 2), ({"batch": 4, "model": 2}, 2), ({"batch": 4, "model": 2}, 4),
    ({"batch": 2, "model": 2}, 1),
])
def test_each_process_holds_the_batch_shards_dtensor_gives_its_devices(mesh, processes):
    shards = process_batch_shards(mesh, processes)
    assert shards == dtensor_batch_coordinates(mesh, processes)
    assert sorted(sum(shards, [])) == list(range(mesh["batch"]))  # each shard read by one process


@pytest.mark.parametrize("mesh, processes, key, words", [
    # DTensor would give both processes both batch shards: each would need the other's data.
    ({"model": 2, "batch": 2}, 2, "mesh", "put 'batch' first"),
    ({"batch": 2, "model": 2}, 4, "mesh", "multiple of 4"),
    ({"batch": 3}, 2, "mesh", "shared evenly"),
    ({"model": 4}, 2, "mesh", "needs the batch axis"),
])
def test_a_mesh_the_processes_cannot_share_is_a_param_error(mesh, processes, key, words):
    with pytest.raises(ParamError) as caught:
        process_batch_shards(mesh, processes)
    assert caught.value.key == key and words in str(caught.value)
    if "batch" in mesh and math.prod(mesh.values()) % processes == 0:
        held = dtensor_batch_coordinates(mesh, processes)
        assert any(set(a) & set(b) for a in held for b in held if a is not b) or mesh["batch"] % processes


def test_a_layout_on_the_batch_axis_across_processes_is_a_param_error_at_layouts():
    with pytest.raises(ParamError) as caught:
        process_batch_shards({"batch": 4}, 2, layouts={".*kernel": ["batch", None]})
    assert caught.value.key == "layouts" and "spans the 2 processes" in str(caught.value)
    assert process_batch_shards({"batch": 4}, 1, layouts={".*kernel": ["batch", None]}) == [[0, 1, 2, 3]]


def test_layouts_match_as_keras_layout_map_where_keras_matches_one_key():
    """Where a path matches exactly one key as a full match, opt-train's spec is Keras's."""
    from keras.distribution import DeviceMesh, LayoutMap

    layouts = {".*dense.*kernel": [None, "model"], ".*dense.*bias": ["model"], ".*conv2d.*kernel": [None, None, None,
                                                                                                        "model"]}
    keras_map = LayoutMap(DeviceMesh((2, 2), ["batch", "model"], devices=["cpu:0"] * 4))
    for pattern, spec in layouts.items():
        keras_map[pattern] = tuple(spec)
    for path, shape in [("dense_1/kernel", (8, 4)), ("dense_1/bias", (4,)), ("my/conv2d_3/kernel", (3, 3, 2, 4)),
                        ("my/conv3d_1/kernel", (3, 3, 3, 2, 4))]:
        expected = keras_map[path]
        spec = layout_of(path, shape, layouts, MESH)
        assert spec == (tuple(expected.axes) if expected is not None else (None,) * len(shape)), path


def test_the_first_key_that_searches_the_path_wins_where_keras_would_refuse():
    # Keras refuses a path two keys match; opt-train takes them in order (the rule).
    layouts = check_layouts({"logits/kernel": [None, None], "kernel": [None, "model"]})
    assert layout_of("logits/kernel", (8, 10), layouts, MESH) == (None, None)
    assert layout_of("dense_0/kernel", (8, 10), layouts, MESH) == (None, "model")
    # re.search: "kernel" matches inside the path, where Keras's fullmatch would not.
    assert re.fullmatch("kernel", "dense_0/kernel") is None


def test_unmatched_variables_and_runs_without_a_mesh_are_replicated():
    layouts = {".*kernel": [None, "model"]}
    assert layout_of("dense_0/bias", (8,), layouts, MESH) == (None,)
    assert layout_of("dense_0/kernel", (8, 3), layouts, {}) == (None, None)


@pytest.mark.parametrize("path, shape, layouts, code, words", [
    ("dense/kernel", (4,), {".*kernel": [None, "model"]}, "conflict", "has 2 entries"),
    ("dense/kernel", (4, 4), {".*kernel": [None, "expert"]}, "unknown_name", "which the mesh lacks"),
    ("dense/kernel", (4, 3), {".*kernel": [None, "model"]}, "conflict", "does not divide"),
])
def test_a_spec_that_does_not_fit_is_a_param_error_at_layouts(path, shape, layouts, code, words):
    with pytest.raises(ParamError, match=words) as caught:
        layout_of(path, shape, layouts, MESH)
    assert (caught.value.key, caught.value.code) == ("layouts", code)


@pytest.mark.parametrize("value, code", [
    ({"(": [None]}, "wrong_type"), ({"a": "model"}, "wrong_type"), ({"a": ["model", "model"]}, "conflict"),
    (["a"], "wrong_type"),
])
def test_bad_layouts_are_refused_before_any_shape_is_known(value, code):
    with pytest.raises(ParamError) as caught:
        check_layouts(value)
    assert (caught.value.key, caught.value.code) == ("layouts", code)


def test_a_slot_is_laid_out_as_the_dimensions_of_its_variable_it_keeps():
    assert slot_layout("variable", (8, 4), (None, "model")) == (None, "model")
    # Adafactor's factors of a kernel [null, model]: the rows (8,) whole, the columns (4,) on model.
    assert slot_layout("rows", (8, 4), (None, "model")) == (None,)
    assert slot_layout("columns", (8, 4), (None, "model")) == ("model",)
    assert slot_layout("rows", (2, 8, 4), ("batch", "model", None)) == ("batch", "model")
    assert slot_layout("columns", (2, 8, 4), ("batch", "model", None)) == ("batch", None)
    assert slot_layout("rows", (8,), ("model",)) == ()  # a bias is not factored: a scalar placeholder
    assert slot_layout("scalar", (8, 4), (None, "model")) == ()


def test_adafactors_factored_columns_shrink_with_their_kernels_columns():
    mesh, layouts = {"batch": 2, "model": 2}, {".*kernel": [None, "model"]}
    kernels = [("dense_0/kernel", (64, 32), "float32"), ("logits/kernel", (32, 10), "float32")]
    whole = plan_memory(kernels, optimizer="Adafactor", mesh=mesh, layouts={})
    laid_out = plan_memory(kernels, optimizer="Adafactor", mesh=mesh, layouts=layouts)
    # Per kernel the velocity halves (as the kernel) and the columns (32, 10) halve; the rows (64, 32) stay whole.
    assert whole.optimizer_state - laid_out.optimizer_state == 4 * ((64 * 32 + 32 * 10) // 2 + (32 + 10) // 2)


def test_a_variable_an_optimizer_group_takes_gets_the_state_of_the_groups_optimizer():
    variables = [("dense/kernel", (8, 4), "float32"), ("dense/bias", (4,), "float32")]
    groups = [{"variables": "bias", "optimizer": "Momentum", "optimizer_params": {"momentum": 0.9},
               "lr_multiplier": 1.0}]
    grouped = plan_memory(variables, optimizer="Adam", optimizer_groups=groups)
    adam = plan_memory(variables[:1], optimizer="Adam")
    momentum = plan_memory(variables[1:], optimizer="Momentum", optimizer_params={"momentum": 0.9})
    # Each optimizer's slots and scalars (Adam's, Momentum's), and the groups' int64 update counter.
    assert grouped.optimizer_state == adam.optimizer_state + momentum.optimizer_state + 8


def test_bytes_are_written_in_binary_units():
    assert [format_bytes(n) for n in (0, 1023, 1024, 3 * 2**19, 2**30 + 2**29)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 MiB", "1.5 GiB"]


def test_the_master_dtypes_are_the_optimizer_wrappers():
    from opt_train.optimizers import names
    from opt_train.optimizers.mixed_precision import dtype_policy_name, needs_master_weights

    for dtype in names.DTYPES:
        assert (dtype in MASTER_DTYPES) == needs_master_weights(dtype)
        # the variable dtype of a Keras policy: "mixed_float16" keeps float32 variables
        assert variable_dtype(dtype) == (dtype_policy_name(dtype) if dtype in MASTER_DTYPES else "float32")


# -- the memory plan ----------------------------------------------------------------------------------------


def _mlp_variables(dtype="float32"):
    from opt_train.data.task import Task
    from opt_train.models.size import variable_shapes

    task = Task("classification", (64,), 10, num_classes=10)
    return [(path, shape, dtype) for path, shape in
            variable_shapes("mlp", {"hidden_units": [32, 16]}, task)]


@pytest.mark.parametrize("optimizer, params", [("Adam", {}), ("Momentum", {"momentum": 0.9}), ("Lamb", {}),
                                               ("Adafactor", {}), ("NovoGrad", {})])
def test_every_kernel_sharded_on_a_model_axis_of_two_halves_the_kernels_weights_and_state(optimizer, params):
    variables = _mlp_variables()
    layouts = {".*kernel": [None, "model"]}
    alone = plan_memory(variables, optimizer=optimizer, optimizer_params=params)
    sharded = plan_memory(variables, optimizer=optimizer, optimizer_params=params, mesh=MESH, layouts=layouts)
    kernels = [index for index, (path, _, _) in enumerate(variables) if path.endswith("kernel")]
    assert len(kernels) == 3
    for index in kernels:
        whole, half = alone.variables[index], sharded.variables[index]
        assert half.layout == (None, "model")
        assert half.weights * 2 == whole.weights
        if TABLE[optimizer].state and all(slot.shape == "variable" for slot in TABLE[optimizer].state):
            assert half.state * 2 == whole.state
        else:  # Adafactor's factored rows and columns, NovoGrad's norms: replicated, so less than halved
            assert whole.state / 2 <= half.state < whole.state
    for index in set(range(len(variables))) - set(kernels):
        assert sharded.variables[index] == alone.variables[index]  # biases: replicated
    assert sum(sharded.variables[i].weights for i in kernels) * 2 == sum(alone.variables[i].weights for i in kernels)
    assert sharded.line().startswith("memory per device: weights ")
    assert re.fullmatch(r"memory per device: weights [\d.]+ (B|KiB|MiB|GiB), optimizer state [\d.]+ (B|KiB|MiB|GiB), "
                        r"total [\d.]+ (B|KiB|MiB|GiB)", sharded.line())


def test_the_batch_axis_shards_a_fully_sharded_layout_too():
    variables = _mlp_variables()
    alone = plan_memory(variables, optimizer="Adam")
    fsdp = plan_memory(variables, optimizer="Adam", mesh={"batch": 4}, layouts={".*kernel": ["batch", None]})
    assert fsdp.variables[0].weights * 4 == alone.variables[0].weights
    assert fsdp.variables[0].state * 4 == alone.variables[0].state


def test_frozen_variables_get_no_optimizer_state_as_split_frozen_leaves_them_out():
    from opt_train.optimizers.freezing import split_frozen

    variables = _mlp_variables()
    planned = plan_memory(variables, optimizer="Adam", freeze_variables_regex="^dense_0/")
    named = [type("V", (), {"path": path})() for path, _, _ in variables]
    frozen = {v.path for v in split_frozen(named, "^dense_0/")[1]}
    assert frozen == {"dense_0/kernel", "dense_0/bias"}
    for item in planned.variables:
        assert (item.state == 0) == (item.path in frozen) and item.weights > 0


def test_a_user_optimizer_class_has_unknown_state():
    found = plan_memory(_mlp_variables(), optimizer="my_pkg.opt:MyOptimizer")
    assert not found.state_known and "optimizer state unknown" in found.line()


# -- the plan against built Keras models and optimizers ------------------------------------------------------


def _nbytes(variable):
    import tensorflow as tf

    return math.prod(variable.shape) * tf.as_dtype(variable.dtype).size


def _owned(model_variable, optimizer_variables):
    """The optimizer variables named after `model_variable` (Keras names a slot `<optimizer>/<path with _>_<slot>`)."""
    stem = model_variable.path.replace("/", "_")
    return [v for v in optimizer_variables if v.path.rsplit("/", 1)[-1].startswith(stem + "_")
            or v.path == model_variable.path + "_master"]


CASES = {
    "Adam": ("Adam", {}, "float32", False),
    "Momentum-nesterov": ("Momentum", {"momentum": 0.9, "use_nesterov": True}, "float32", False),
    "LAMB": ("Lamb", {}, "float32", False),
    "LAMB-ema": ("Lamb", {"use_ema": True}, "float32", False),
    "KerasAdam-amsgrad": ("KerasAdam", {"amsgrad": True}, "float32", False),
    "SGD-no-momentum": ("SGD", {}, "float32", False),
    "Adam-mixed": ("Adam", {}, "mixed", False),
    "Adam-float16-masters": ("Adam", {}, "float16", False),
    "Momentum-float16-schedule": ("Momentum", {"momentum": 0.9}, "float16", True),
    "Muon": ("Muon", {}, "float32", False),
}


@pytest.fixture(scope="module")
def transformer_task():
    from opt_train.data.task import Task

    return Task("sequence", (8,), 12, input_dtype="int32", vocab_size=12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_counts_the_bytes_of_a_built_model_and_optimizer(case, transformer_task):
    import keras

    from opt_train.models.transformer import build_transformer
    from opt_train.optimizers import get
    from opt_train.optimizers.mixed_precision import MixedPrecisionOptimizerWrapper, dtype_policy_name
    from opt_train.optimizers.mixed_precision import needs_master_weights

    name, params, dtype, schedule = CASES[case]
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy_name(dtype))
    try:
        model = build_transformer(transformer_task, d_model=16, num_heads=2, num_layers=1, ff_dim=24, dropout=0.0,
                                  activation="relu")
        rate = keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.5) if schedule else 0.01
        optimizer = get(name, learning_rate=rate, **params)
        if needs_master_weights(dtype):
            optimizer = MixedPrecisionOptimizerWrapper(optimizer)
        optimizer.build(model.trainable_variables)
    finally:
        keras.config.set_dtype_policy(previous)
    variables = [(v.path, tuple(v.shape), v.dtype, v.trainable) for v in model.weights]
    planned = plan_memory(variables, optimizer=name, optimizer_params=params, dtype=dtype,
                          rate_variable=not schedule)
    built = list(optimizer.variables)
    for weight, item in zip(model.weights, planned.variables):
        assert item.weights == _nbytes(weight), weight.path
        assert item.state == sum(_nbytes(v) for v in _owned(weight, built)), weight.path
    assert planned.optimizer_state == sum(_nbytes(v) for v in built)


def test_adafactors_factored_state_in_total(transformer_task):
    from opt_train.models.transformer import build_transformer
    from opt_train.optimizers import get

    model = build_transformer(transformer_task, d_model=16, num_heads=2, num_layers=1, ff_dim=24, dropout=0.0,
                              activation="relu")
    optimizer = get("Adafactor", learning_rate=0.01)
    optimizer.build(model.trainable_variables)
    variables = [(v.path, tuple(v.shape), v.dtype) for v in model.weights]
    planned = plan_memory(variables, optimizer="Adafactor")
    assert planned.optimizer_state == sum(_nbytes(v) for v in optimizer.variables)


def test_iter_size_accumulators_are_one_float32_copy_per_trainable_variable(transformer_task):
    from opt_train.models.transformer import build_transformer
    from opt_train.optimizers.accumulation import accumulate
    from opt_train.optimizers.transform import chain

    model = build_transformer(transformer_task, d_model=16, num_heads=2, num_layers=1, ff_dim=24, dropout=0.0,
                              activation="relu")
    state = accumulate(2, chain()).init(model.trainable_variables)
    variables = [(v.path, tuple(v.shape), v.dtype) for v in model.weights]
    with_accumulators = plan_memory(variables, optimizer="GradientDescent", iter_size=2)
    without = plan_memory(variables, optimizer="GradientDescent", iter_size=1)
    assert with_accumulators.optimizer_state - without.optimizer_state == sum(
        _nbytes(v) for v in state.accumulators)


REQUIRED_VALUES = {"learning_rate": 0.01, "momentum": 0.9}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_every_optimizers_table_state_is_what_its_class_builds(name, transformer_task):
    """The table's `state` and `scalars` of every optimizer against the variables its class creates, on a
    model with matrices, 3-D attention kernels, vectors and an embedding (Muon and Adafactor treat them apart)."""
    from opt_train.models.transformer import build_transformer
    from opt_train.optimizers import get

    row = TABLE[name]
    params = {param: REQUIRED_VALUES[param] for param, spec in row.params.items() if spec.required}
    params.setdefault("learning_rate", 0.01)
    model = build_transformer(transformer_task, d_model=16, num_heads=2, num_layers=1, ff_dim=24, dropout=0.0,
                              activation="relu")
    optimizer = get(name, **params)
    optimizer.build(model.trainable_variables)
    variables = [(v.path, tuple(v.shape), v.dtype) for v in model.weights]
    planned = plan_memory(variables, optimizer=name, optimizer_params=params)
    assert planned.optimizer_state == sum(_nbytes(v) for v in optimizer.variables)
