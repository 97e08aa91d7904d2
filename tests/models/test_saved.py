"""`model: {path: my_model.keras}`: a model the user saved with Keras trains like any other; safe mode on."""

import keras
import numpy as np

from tests.support import read_json

RUN = {"data": "digits", "max_steps": 30, "print_loss_steps": 10, "optimizer_params": {"learning_rate": 0.01}}


def _user_model(lambda_layer=False):
    # Seeded: the saved weights are where training starts, and must not depend on which
    # tests drew from Keras's global generator before this one in the worker.
    inputs = keras.Input((64,), name="pixels")
    hidden = keras.layers.Dense(16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(1))(inputs)
    if lambda_layer:
        hidden = keras.layers.Lambda(lambda t: t * 2.0)(hidden)
    return keras.Model(inputs, keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(2))(hidden))


def test_a_users_keras_file_trains(cli, write_config, tmp_path):
    user = _user_model()
    user.save(tmp_path / "mine.keras")
    # 60 updates: at 30 the accuracy ranged 0.48-0.82 over initial weights, at 60 0.84-0.92.
    config = write_config({**RUN, "max_steps": 60, "model": {"path": str(tmp_path / "mine.keras")}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["eval/accuracy"] > 0.5  # ten classes: chance is 0.1
    trained = keras.saving.load_model(tmp_path / "run" / "export" / "model.keras")
    # The user's architecture, layer by layer, with new weights.
    assert [type(layer).__name__ for layer in trained.layers] == [type(layer).__name__ for layer in user.layers]
    assert not np.allclose(trained.layers[-1].get_weights()[0], user.layers[-1].get_weights()[0])


def test_code_in_the_file_needs_safe_mode_off(cli, write_config, tmp_path):
    _user_model(lambda_layer=True).save(tmp_path / "lambda.keras")
    spec = {"model": {"path": str(tmp_path / "lambda.keras")}}
    refused = cli("train", "--config", write_config({**RUN, **spec}))
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and ": model:" in lines[0] and "lambda.keras" in lines[0], lines
    allowed = cli("train", "--config", write_config({**RUN, **spec, "max_steps": 2, "model_params": {"safe_mode": False}}))
    assert allowed.exit_code == 0, allowed.output


def test_a_model_that_does_not_fit_the_data_is_a_config_error(cli, write_config, tmp_path):
    inputs = keras.Input((20,))
    keras.Model(inputs, keras.layers.Dense(10)(inputs)).save(tmp_path / "narrow.keras")
    result = cli("train", "--config", write_config({**RUN, "model": {"path": str(tmp_path / "narrow.keras")}}))
    assert result.exit_code == 2 and ": model:" in result.output and "(20,)" in result.output
    missing = cli("train", "--config", write_config({**RUN, "model": {"path": str(tmp_path / "nope.keras")}}))
    assert missing.exit_code == 2 and "nope.keras" in missing.output
