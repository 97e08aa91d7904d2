"""Models out: the run's export, `opt-train export` and `opt-train predict`, checked against Keras and TF alone."""

import json
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

from tests.support import bare_environ, write_run

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).


RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [16]},
    "data": "digits",
    "max_steps": 40,
    "print_loss_steps": 20,
    "save_checkpoint_steps": 20,
    "save_summaries_steps": None,
    "optimizer_params": {"learning_rate": 0.01},
}

# Runs in a Python that has TensorFlow but not opt-train: -I ignores PYTHON* variables,
# the user site and the cwd; -S skips site-packages' .pth files (the editable install of
# opt-train is one), and the site-packages directory itself is put back by hand.
SERVING_SCRIPT = """
import importlib.util, sys
sys.path.append({site!r})
assert importlib.util.find_spec("opt_train") is None, "opt_train is importable"
import numpy as np
import tensorflow as tf
loaded = tf.saved_model.load({saved_model!r})
serve = loaded.signatures["serving_default"]
inputs = np.load({inputs!r})["x"]
result = serve(inputs=tf.constant(inputs))
np.savez({out!r}, outputs=result["outputs"].numpy(), classes=result["classes"].numpy())
assert "opt_train" not in sys.modules
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short run through `opt-train --config` (train_eval), and its eval split as .npz."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli
    from opt_train.data import build_data

    root = tmp_path_factory.mktemp("export")
    config = write_run(root, RUN)
    result = CliRunner().invoke(cli, ["--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = build_data("digits", {}, batch_size=32, seed=0)
    x, y = (np.concatenate([batch[i].numpy() for batch in data.eval]) for i in (0, 1))
    np.savez(root / "eval.npz", x=x, y=y)
    final = json.loads((root / "run" / "final_metrics.json").read_text())
    return {"root": root, "config": config, "logdir": root / "run", "x": x, "y": y, "final": final}


def _cli(*args):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


@pytest.mark.slow  # 34 s measured on 2 loaded cores: a fresh process loads the SavedModel
def test_saved_model_without_opt_train_gives_the_evaluations_predictions(trained, tmp_path):
    saved_model = trained["logdir"] / "export" / "saved_model"
    script = SERVING_SCRIPT.format(
        site=sysconfig.get_paths()["purelib"], saved_model=str(saved_model),
        inputs=str(trained["root"] / "eval.npz"), out=str(tmp_path / "served.npz"),
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script], cwd=tmp_path, capture_output=True, text=True,
        env=bare_environ(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    served = np.load(tmp_path / "served.npz")
    # The evaluation's figures, recomputed with NumPy from the served logits.
    final = trained["final"]
    assert np.mean(served["classes"] == trained["y"]) == pytest.approx(final["eval/accuracy"], abs=1e-6)
    assert _cross_entropy(served["outputs"], trained["y"]) == pytest.approx(final["eval/loss"], rel=1e-5)
    np.testing.assert_array_equal(served["classes"], served["outputs"].argmax(axis=1))


def test_model_keras_loads_with_keras_alone_and_matches_the_saved_model(trained):
    import keras
    import tensorflow as tf

    export = trained["logdir"] / "export"
    model = keras.saving.load_model(export / "model.keras")
    assert getattr(model, "optimizer", None) is None  # saved uncompiled: no optimizer state
    served = tf.saved_model.load(str(export / "saved_model")).signatures["serving_default"]
    outputs = served(inputs=tf.constant(trained["x"]))["outputs"].numpy()
    np.testing.assert_allclose(model.predict(trained["x"], verbose=0), outputs, rtol=1e-5, atol=1e-5)


def test_export_command_writes_any_checkpoint(trained, tmp_path):
    import keras

    first = trained["logdir"] / "checkpoints" / "ckpt-20"
    result = _cli("export", "--config", trained["config"], "--checkpoint", first, "--out", tmp_path / "at20")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["checkpoint"] == str(first)
    at20 = keras.saving.load_model(tmp_path / "at20" / "model.keras")
    final = keras.saving.load_model(trained["logdir"] / "export" / "model.keras")
    assert (tmp_path / "at20" / "saved_model" / "saved_model.pb").is_file()
    # Step 20's weights, not the run's last ones.
    assert not np.allclose(at20.predict(trained["x"], verbose=0), final.predict(trained["x"], verbose=0))
    latest = _cli("export", "--config", trained["config"], "--out", tmp_path / "latest")
    assert latest.exit_code == 0, latest.output
    again = keras.saving.load_model(tmp_path / "latest" / "model.keras")
    np.testing.assert_allclose(again.predict(trained["x"], verbose=0), final.predict(trained["x"], verbose=0))



@pytest.mark.slow  # 4 s alone, 13 s on 2 loaded cores: a run and an export
def test_export_false_skips_the_end_of_run_export_and_the_export_command_still_writes_it(tmp_path):
    import keras

    config = write_run(tmp_path, {**RUN, "max_steps": 4, "save_checkpoint_steps": None})
    result = _cli("train", "--config", config, "--set", "export=false")
    assert result.exit_code == 0, result.output
    assert "exported" not in result.output
    assert not (tmp_path / "run" / "export").exists()
    assert json.loads((tmp_path / "run" / "final_metrics.json").read_text())["global_step"] == 4
    later = _cli("export", "--config", tmp_path / "run" / "config.yaml", "--out", tmp_path / "later")
    assert later.exit_code == 0, later.output
    assert keras.saving.load_model(tmp_path / "later" / "model.keras").count_params() > 0

def test_predict_writes_the_models_outputs(trained, tmp_path):
    import keras

    out = tmp_path / "preds.npz"
    result = _cli("predict", "--config", trained["config"], "--input", trained["root"] / "eval.npz", "--output", out)
    assert result.exit_code == 0, result.output
    preds = np.load(out)
    model = keras.saving.load_model(trained["logdir"] / "export" / "model.keras")
    np.testing.assert_allclose(preds["outputs"], model.predict(trained["x"], verbose=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(preds["classes"], preds["outputs"].argmax(axis=1))
    assert np.mean(preds["classes"] == trained["y"]) == pytest.approx(trained["final"]["eval/accuracy"], abs=1e-6)


@pytest.mark.parametrize("command", ["export", "predict"])
def test_a_missing_checkpoint_is_one_line_exit_2(trained, tmp_path, command):
    extra = ["--input", trained["root"] / "eval.npz", "--output", tmp_path / "p.npz"] if command == "predict" else []
    result = _cli(command, "--config", trained["config"], "--checkpoint", tmp_path / "ckpt-7", *extra)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--checkpoint" in lines[0] and "ckpt-7" in lines[0], lines


def test_predict_input_errors_are_one_line_exit_2(trained, tmp_path):
    np.savez(tmp_path / "wide.npz", x=np.zeros((3, 65), np.float32))
    (tmp_path / "data.tfrecord").write_bytes(b"")
    for path, expected in [
        (tmp_path / "wide.npz", "shape (65,)"),
        (tmp_path / "data.tfrecord", "TFRecord"),
        (tmp_path / "missing.npz", "no such file"),
    ]:
        result = _cli("predict", "--config", trained["config"], "--input", path, "--output", tmp_path / "p.npz")
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "--input" in lines[0] and expected in lines[0], lines


UNSERIALIZABLE = '''
import keras


class Doubling(keras.layers.Layer):
    """Takes an argument Keras cannot serialize and has no get_config: no .keras file for it."""

    def __init__(self, anything, **kwargs):
        super().__init__(**kwargs)
        self.anything = anything

    def call(self, inputs):
        return inputs * 2.0


def build(task):
    inputs = keras.Input(task.input_shape)
    return keras.Model(inputs, Doubling(object())(keras.layers.Dense(task.output_dim)(inputs)))
'''


def test_a_model_keras_cannot_serialize_still_trains_and_ships_a_saved_model(cli, write_config, tmp_path, monkeypatch):
    (tmp_path / "unserializable_model.py").write_text(UNSERIALIZABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = write_config({**RUN, "max_steps": 2, "model": {"factory": "unserializable_model:build"},
                           "model_params": {}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    export = tmp_path / "run" / "export"
    assert "incomplete" in result.output and "get_config" in result.output
    assert (export / "saved_model" / "saved_model.pb").is_file()
    assert not (export / "model.keras").exists() and not list(export.glob(".tmp*"))
