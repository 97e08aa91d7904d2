"""`init_from`: a fresh run's weights from another run's checkpoint, a .keras or a .weights.h5 file, through a path map.

The references: the source run's own model restored from its checkpoint (`restore_model`,
TF's object-graph restore), and Keras models that wrote the `.keras` / `.weights.h5`
files; a warm-started layer must give exactly their outputs.
"""

import io
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.config import ConfigError, load_config
from opt_train.distributed import get_backend
from opt_train.training.builder import build_run
from opt_train.training.loop import Session
from tests.support import one_error_line, train_in_process, write_run

SOURCE = {"model": "mlp", "model_params": {"hidden_units": [6]}, "data": "digits", "batch_size_per_gpu": 16,
          "max_steps": 3, "optimizer": "Adam", "optimizer_params": {"learning_rate": 0.1}, "random_seed": 1}
HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(config, logdir) of a trained source run: mlp `dense_0` (64 -> 6) and `logits` (6 -> 10)."""
    return train_in_process(tmp_path_factory.mktemp("source"), SOURCE)[:2]


@pytest.fixture(scope="module")
def source_model(source):
    """The source run's model with its checkpoint's weights, restored as `opt-train eval` restores it."""
    from opt_train.training.export import restore_model

    run, _ = restore_model(load_config([str(source[0])]))
    return run.model


def _config(tmp_path, name, run):
    return load_config([str(write_run(tmp_path, run, f"{name}.yaml", logdir=name))])


def _started(config):
    """A fresh Session of `config`, started; returns (run, the lines it printed)."""
    run = build_run(config, get_backend())
    stream = io.StringIO()
    session = Session(run, stream=stream)
    try:
        session.start(resume=True)
    finally:
        session.close()
    return run, stream.getvalue().splitlines()


def _digits(run, count=8):
    return np.random.default_rng(0).normal(size=(count, *run.data.task.input_shape)).astype("float32")


def _layer_output(model, layer, inputs):
    return keras.Model(model.input, model.get_layer(layer).output)(inputs).numpy()


def test_a_path_map_starts_other_layers_from_another_runs_checkpoint(tmp_path, source, source_model):
    _, logdir = source
    config = _config(tmp_path, "renamed", {
        **{k: v for k, v in SOURCE.items() if k not in ("model", "model_params")},
        "model": {"factory": "tests.training.warm_start_models:renamed_mlp"},
        "init_from": {"path": str(logdir), "variables": {"^dense_0/(.*)": "encoder_0/\\1"}},
    })
    run, lines = _started(config)
    inputs = _digits(run)
    # The mapped layer computes exactly what the source's layer does; the head is not mapped.
    np.testing.assert_array_equal(_layer_output(run.model, "encoder_0", inputs),
                                  _layer_output(source_model, "dense_0", inputs))
    assert not np.array_equal(run.model.get_layer("head").kernel.numpy(), source_model.get_layer("logits").kernel.numpy())
    assert f"initialized 2 of 4 variables from {logdir}/checkpoints/ckpt-3" in lines
    # Neither the step nor the optimizer state comes along.
    assert int(run.train_op.global_step.numpy()) == 0 and int(run.train_op.optimizer.iterations.numpy()) == 0


def test_same_paths_load_without_a_map_and_predict_as_the_source(tmp_path, source, source_model):
    config = _config(tmp_path, "same", {**SOURCE, "init_from": {"path": str(source[1] / "checkpoints")}})
    run, _ = _started(config)
    inputs = _digits(run)
    np.testing.assert_array_equal(run.model(inputs).numpy(), source_model(inputs).numpy())


def test_a_shape_mismatch_is_one_line_naming_both_paths_and_shapes(cli, tmp_path, source):
    path = write_run(tmp_path, {**SOURCE, "model_params": {"hidden_units": [7]}, "init_from": {"path": str(source[1])}},
                     "wider.yaml", logdir="wider")
    result = cli("train", "--config", path)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"{path}:" in line and "init_from.path" in line
    assert "`dense_0/bias` (6,) in " in line and "`dense_0/bias` (7,) of this model (2 more differ)" in line, line
    assert not (tmp_path / "wider" / "checkpoints").exists()  # refused before the first update


def test_skip_mismatch_skips_those_and_loads_the_rest(tmp_path, source, source_model):
    config = _config(tmp_path, "deeper", {
        **SOURCE, "model_params": {"hidden_units": [6, 4]},
        "init_from": {"path": str(source[1]), "skip_mismatch": True}})
    fresh = build_run(config, get_backend()).model.get_layer("logits").kernel.numpy()
    run, lines = _started(config)
    inputs = _digits(run)
    np.testing.assert_array_equal(_layer_output(run.model, "dense_0", inputs), _layer_output(source_model, "dense_0", inputs))
    np.testing.assert_array_equal(run.model.get_layer("logits").bias.numpy(), source_model.get_layer("logits").bias.numpy())
    np.testing.assert_array_equal(run.model.get_layer("logits").kernel.numpy(), fresh)  # skipped: as initialised
    assert any(line.startswith("initialized 3 of 6 variables from ") for line in lines), lines
    assert any("skipped 1 of another shape (skip_mismatch): logits/kernel (6, 10) -> logits/kernel (4, 10)" in line
               for line in lines), lines


@pytest.fixture(scope="module")
def keras_source(tmp_path_factory):
    """A Keras model (`enc`: 64 -> 6, `out`: 6 -> 10) saved as .keras and as .weights.h5."""
    folder = tmp_path_factory.mktemp("keras_source")
    keras.utils.set_random_seed(5)
    inputs = keras.Input((64,))
    hidden = keras.layers.Dense(6, activation="relu", name="enc")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10, name="out")(hidden))
    model.save(folder / "source.keras")
    model.save_weights(folder / "source.weights.h5")
    return model, folder


@pytest.mark.parametrize("file, variables", [
    ("source.keras", {"^enc/(.*)": "dense_0/\\1"}),
    # A weights file holds each layer's variables by position: `enc/0` is its kernel.
    ("source.weights.h5", {"^enc/": "dense_0/"}),
])
def test_keras_files_are_sources(tmp_path, keras_source, file, variables):
    model, folder = keras_source
    config = _config(tmp_path, "from_file", {
        **SOURCE, "init_from": {"path": str(folder / file), "variables": variables}})
    run, lines = _started(config)
    inputs = _digits(run).reshape(8, -1)
    np.testing.assert_array_equal(_layer_output(run.model, "dense_0", inputs), _layer_output(model, "enc", inputs))
    assert f"initialized 2 of 4 variables from {folder / file}" in lines


def test_nothing_found_is_refused_with_both_sides_names(tmp_path, keras_source):
    _, folder = keras_source
    config = _config(tmp_path, "unmapped", {**SOURCE, "init_from": {"path": str(folder / "source.keras")}})
    with pytest.raises(ConfigError) as caught:
        _started(config)
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("init_from.path", "out_of_range")
    assert "enc/kernel" in issue.message and "dense_0/kernel" in issue.message and "init_from.variables" in issue.message


def test_a_resumed_run_never_applies_init_from_again(tmp_path, source):
    """The second start restores the run's own checkpoint; init_from would have put the source's weights back.
    It does not even need the source any more."""
    import shutil

    copy = tmp_path / "source_copy"
    shutil.copytree(source[1] / "checkpoints", copy)
    config_path, logdir, _ = train_in_process(tmp_path, {**SOURCE, "max_steps": 2, "init_from": {"path": str(copy)}})
    own = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    shutil.rmtree(copy)
    run, lines = _started(load_config([str(config_path)], ["max_steps=4"]))
    assert int(run.train_op.global_step.numpy()) == 2
    for index, variable in enumerate(run.model.weights):
        np.testing.assert_array_equal(variable.numpy(), own.get_tensor(f"model_variables/{index}/.ATTRIBUTES/VARIABLE_VALUE"))
    source_kernel = tf.train.load_checkpoint(str(source[1] / "checkpoints")).get_tensor(
        "model_variables/0/.ATTRIBUTES/VARIABLE_VALUE")
    assert not np.array_equal(run.model.weights[0].numpy(), source_kernel)  # trained on from there
    assert not any(line.startswith("initialized") for line in lines), lines


def test_float16_masters_start_from_the_loaded_weights(tmp_path, source, source_model):
    """dtype float16 keeps float32 masters, made at the build: they must take the loaded values too."""
    config = _config(tmp_path, "half", {**SOURCE, "dtype": "float16", "init_from": {"path": str(source[1])}})
    run, _ = _started(config)
    masters = {master.path.replace("_master", ""): master for master in run.train_op.optimizer.masters}
    kernel = masters["dense_0/kernel"].numpy()
    np.testing.assert_array_equal(kernel, source_model.get_layer("dense_0").kernel.numpy().astype(np.float16).astype(np.float32))


def test_a_checkpoint_written_before_variable_paths_loads_by_position(tmp_path, source_model):
    """An opt-train checkpoint of before `variable_paths` holds the list `model_variables` alone: the same
    model takes it position by position, as `load_model`'s object-graph restore did."""
    tf.train.Checkpoint(model_variables=list(source_model.variables)).write(str(tmp_path / "old" / "ckpt-3"))
    config = _config(tmp_path, "old_run", {**SOURCE, "load_model": str(tmp_path / "old")})
    run, lines = _started(config)
    np.testing.assert_array_equal(run.model(_digits(run)).numpy(), source_model(_digits(run)).numpy())
    assert f"initialized 4 of 4 variables from {tmp_path / 'old' / 'ckpt-3'}" in lines, lines


def test_load_model_under_float16_gives_the_masters_the_loaded_weights_too(tmp_path, source, source_model):
    """OpenSeq2Seq's `load_model` left the float32 masters at their fresh values: the first update undid the load."""
    config = _config(tmp_path, "half_load", {**SOURCE, "dtype": "float16", "load_model": str(source[1])})
    run, _ = _started(config)
    masters = {master.path.replace("_master", ""): master for master in run.train_op.optimizer.masters}
    np.testing.assert_array_equal(masters["dense_0/kernel"].numpy(), source_model.get_layer("dense_0").kernel.numpy()
                                  .astype(np.float16).astype(np.float32))


def test_verbose_names_what_was_not_found(tmp_path, source, monkeypatch):
    from opt_train import quiet

    monkeypatch.setenv(quiet.VERBOSE_VARIABLE, "1")
    config = _config(tmp_path, "verbose", {
        **SOURCE, "model_params": {"hidden_units": [6, 4]},
        "init_from": {"path": str(source[1]), "variables": {"^dense_0/": "dense_0/"}}})
    _, lines = _started(config)
    assert any(line.startswith("init_from: not found in ") and line.endswith(
        "dense_1/bias, dense_1/kernel, logits/bias, logits/kernel") for line in lines), lines


@pytest.mark.parametrize("name", ["broken.keras", "broken.weights.h5", "ckpt-1"])
def test_an_unreadable_source_is_one_error_at_the_path(tmp_path, name):
    if name == "ckpt-1":
        (tmp_path / "ckpt-1.index").write_bytes(b"not a checkpoint index")
    else:
        (tmp_path / name).write_bytes(b"not a Keras file")
    config = _config(tmp_path, "broken", {**SOURCE, "init_from": {"path": str(tmp_path / name)}})
    with pytest.raises(ConfigError) as caught:
        _started(config)
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("init_from.path", "out_of_range")
    assert issue.message.startswith(f"cannot read {name}: "), issue.message


def test_two_source_variables_mapped_to_one_are_refused(tmp_path, source):
    config = _config(tmp_path, "twice", {
        **SOURCE, "init_from": {"path": str(source[1]), "variables": {"^(dense_0|logits)/bias$": "logits/bias"}}})
    with pytest.raises(ConfigError) as caught:
        _started(config)
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("init_from.variables", "conflict")
    assert "`dense_0/bias` and `logits/bias`" in issue.message, issue
    assert "variables:" in (tmp_path / "twice.yaml").read_text().splitlines()[issue.line - 1]
