"""RETURNN's per-layer `updater_opts` optimizers (its tests/test_TFUpdater.py `test_Updater_multiple_optimizers`
and `..._and_opts`, ported): `convert returnn` makes them `optimizer_groups`, and the run has RETURNN's three
optimizers, each layer's variables with its own."""

import pathlib

import numpy as np

from opt_train.config import load_config
from opt_train.convert import convert
from tests.compat.runs import train_two_updates
from tests.support import write_run

HERE = pathlib.Path(__file__).parent / "returnn"
# A Keras model whose layers keep the RETURNN network's names, so its variable paths are `layer1/kernel`, ...
MODEL = (
    "import keras\n\n"
    "def make(task):\n"
    "    inputs = keras.Input(task.input_shape)\n"
    "    x = keras.layers.Dense(13, activation='tanh', name='layer1')(inputs)\n"
    "    x = keras.layers.Dense(13, activation='tanh', name='layer2')(x)\n"
    "    return keras.Model(inputs, keras.layers.Dense(task.output_dim, name='output')(x))\n"
)


def _converted(name, tmp_path):
    out = tmp_path / "converted.yaml"
    out.write_text(convert("returnn", str(HERE / name)).to_yaml())
    (tmp_path / "returnn_net.py").write_text(MODEL)
    swap = write_run(tmp_path, {
        "model": {"factory": "returnn_net:make"}, "python_path": [str(tmp_path)],
        "data": "synthetic_classification", "data_params": {"num_examples": 64, "num_features": 6}}, "swap.yaml")
    return out, swap


def _trained(out, swap, tmp_path):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    from opt_train import usercode

    config = load_config([out, swap], [f"logdir={tmp_path / 'run'}", "batch_size_per_gpu=8"])
    usercode.add_search_path(config.code_folders())  # as the CLI does
    run = build_run(config, get_backend())
    before = {v.path: v.numpy().copy() for v in run.model.trainable_variables}
    run.train_op(next(iter(run.data.train)))
    return run, before


def test_updater_multiple_optimizers(tmp_path):
    out, swap = _converted("updater_multiple_optimizers.config", tmp_path)
    config = load_config([out, swap])
    assert [dict(group) for group in config.optimizer_groups] == [
        {"variables": "^layer1/", "optimizer": "Adam", "optimizer_params": {"epsilon": 1e-16}, "lr_multiplier": 1.0},
        {"variables": "^layer2/", "optimizer": "Adagrad", "optimizer_params": {}, "lr_multiplier": 1.0},
    ]
    run, before = _trained(out, swap, tmp_path)
    groups = run.train_op.optimizer
    assert len(groups.optimizers) == 3  # RETURNN's own expectation: len(updater.optimizers) == 3
    assert [type(o).__name__ for o in groups.optimizers] == ["Adam", "Adagrad", "GradientDescent"]
    assert groups.counts == (2, 2, 2)
    for variable in run.model.trainable_variables:  # the one update reached every layer
        assert not np.array_equal(variable.numpy(), before[variable.path]), variable.path
    for optimizer, layer in zip(groups.optimizers, ("layer1", "layer2", "output")):
        slots = [v.path.split("/")[-1] for v in optimizer.variables if v.shape.rank]  # not the counters
        assert all(slot.startswith(f"{layer}_") for slot in slots), (layer, slots)
        assert bool(slots) == (layer != "output")  # Adam's and Adagrad's slots; gradient descent keeps none


def test_updater_multiple_optimizers_and_opts(tmp_path):
    out, swap = _converted("updater_multiple_optimizers_and_opts.config", tmp_path)
    text = out.read_text()
    not_carried = text.partition("# Not carried")[2]
    assert "#   network.layer1.updater_opts.accum_grad_multiple_step: 2  -- RETURNN's per-layer" in not_carried
    assert "#   network.layer2.updater_opts.gradient_noise: 0.1  -- RETURNN's per-layer" in not_carried
    config = load_config([out, swap])
    assert config.optimizer_groups[1]["lr_multiplier"] == 3.0
    run, _ = _trained(out, swap, tmp_path)
    groups = run.train_op.optimizer
    assert len(groups.optimizers) == 3
    # RETURNN's `lr * learning_rate_multiplier`, at its global rate 1.0.
    assert [float(o.learning_rate) for o in groups.optimizers] == [1.0, 3.0, 1.0]


def test_a_sub_network_layer_s_updater_opts_is_named_not_dropped_silently(tmp_path):
    source = tmp_path / "nested.config"
    source.write_text(
        "network = {'output': {'class': 'rec', 'from': 'data', 'unit': {\n"
        "    's': {'class': 'rnn_cell', 'n_out': 8, 'from': 'prev:output',\n"
        "          'updater_opts': {'optimizer': {'class': 'Adam'}}},\n"
        "    'output': {'class': 'softmax', 'from': 's'}}}}\n"
        "learning_rate = 0.1\n")
    conversion = convert("returnn", str(source))
    assert "optimizer_groups" not in conversion.data
    assert [key for key, _, _ in conversion.dropped if "updater_opts" in key] == [
        "network.output.unit.s.updater_opts"]
