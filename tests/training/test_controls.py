"""lr_control: Keras' ReduceLROnPlateau step for step, RETURNN's newbob by its formulas, exact on resume."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.config import ConfigError, load_config
from opt_train.config.compat import lr_control
from opt_train.distributed import get_backend
from opt_train.lr_policies import get_lr_policy
from opt_train.training.controls import LearningRateControl, ScaledSchedule

SCORES = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.89, 0.95, 0.96, 0.97, 0.98, 0.97, 0.99, 1.0]


# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def control(params, rate=0.1):
    schedule = ScaledSchedule(get_lr_policy("fixed", learning_rate=rate))
    return LearningRateControl(lr_control("lr_control", params), schedule, get_backend())


@pytest.mark.parametrize("params", [
    {"patience": 2, "factor": 0.5},
    {"patience": 1, "factor": 0.5, "cooldown": 2, "min_lr": 0.02},
    {"patience": 3, "factor": 0.1, "min_delta": 0.05},
])
def test_plateau_is_keras_reduce_lr_on_plateau(params):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    keras_callback = keras.callbacks.ReduceLROnPlateau(monitor="val_loss", verbose=0, **params)
    keras_callback.set_model(model)
    keras_callback.on_train_begin()
    mine = control({"mode": "plateau", **params})
    for epoch, score in enumerate(SCORES):
        keras_callback.on_epoch_end(epoch, {"val_loss": score})
        rate = mine.after_evaluation({"loss": score}, step=0)
        assert rate == pytest.approx(float(model.optimizer.learning_rate.numpy()), rel=1e-6), epoch


def test_newbob_by_returnns_formulas():
    """NewbobRelative: decay by 0.5 when (new - old) / |new| > -0.01, else keep (growth 1)."""
    mine = control({"mode": "newbob"}, rate=1.0)
    rates = [mine.after_evaluation({"loss": score}, step=0) for score in (1.0, 0.95, 0.949, 0.90, 0.8999)]
    # -0.0526: keep; -0.00105: decay; -0.0544: keep; -0.00011: decay
    assert rates == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25])


def test_newbob_min_learning_rate_and_abs():
    mine = control({"mode": "newbob", "decay": 0.1, "min_learning_rate": 0.05}, rate=1.0)
    rates = [mine.after_evaluation({"loss": score}, step=0) for score in (1.0, 1.0, 1.0, 1.0)]
    assert rates == pytest.approx([1.0, 0.1, 0.05, 0.05])
    absolute = control({"mode": "newbob_abs", "error_threshold": -0.1}, rate=1.0)
    rates = [absolute.after_evaluation({"loss": score}, step=0) for score in (1.0, 0.85, 0.8)]
    assert rates == pytest.approx([1.0, 1.0, 0.5])  # -0.15: keep; -0.05 > -0.1: decay


def test_schedule_is_the_policy_times_the_factor():
    inner = get_lr_policy("exp", learning_rate=0.1, decay_steps=10, decay_rate=0.5)
    schedule = ScaledSchedule(inner)
    schedule.scale.assign(0.25)
    for step in (0, 5, 20):
        assert float(schedule(tf.constant(step))) == pytest.approx(0.25 * float(inner(tf.constant(step))), rel=1e-6)


def test_bad_blocks_name_the_sub_key(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("max_steps: 10\neval_steps: 2\nlr_control:\n  mode: plateu\n  patience: -1\n")
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("lr_control.mode", "unknown_name")
    assert "did you mean 'plateau'" in issue.message
    path.write_text("max_steps: 10\nlr_control: {mode: newbob}\n")
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    assert [(i.key, i.code) for i in caught.value.issues] == [("lr_control", "conflict")]


@pytest.mark.slow  # 6 s on 2 cores
def test_a_resumed_run_continues_the_control_exactly(tmp_path):
    from opt_train.training.builder import build_run
    from opt_train.training.loop import Session

    def session(logdir):
        path = tmp_path / "run.yaml"
        path.write_text(
            "model: mlp\nmodel_params: {hidden_units: [6]}\ndata: digits\nbatch_size_per_gpu: 16\n"
            "max_steps: 8\neval_steps: 2\nprint_loss_steps: 2\nsave_checkpoint_steps: 2\n"
            "optimizer: SGD\noptimizer_params: {learning_rate: 0.5}\n"
            "lr_control: {mode: newbob, relative_error_threshold: -0.9}\n"  # decays at nearly every eval
            f"logdir: {logdir}\n"
        )
        return Session(build_run(load_config([path]), get_backend()))

    def weights(s):
        return [v.numpy() for v in s.run.model.trainable_variables] + [s.run.schedule.scale.numpy()]

    straight = session(tmp_path / "a")
    straight.start(resume=False)
    straight.loop()
    expected = weights(straight)
    straight.close()
    assert expected[-1] < 1.0  # the control acted

    first = session(tmp_path / "b")
    first.start(resume=False)
    first.loop(until=4)
    first.close()
    resumed = session(tmp_path / "b")
    resumed.start(resume=True)
    assert resumed.step == 4
    resumed.loop()
    got = weights(resumed)
    resumed.close()
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("params", [{"patience": 0}, {"patience": 2}, {"patience": 1, "min_delta": 0.02}])
def test_early_stopping_is_keras_early_stopping(params):
    from opt_train.config.compat import early_stopping
    from opt_train.training.controls import EarlyStopping

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    keras_callback = keras.callbacks.EarlyStopping(monitor="val_loss", **params)
    keras_callback.set_model(model)
    keras_callback.on_train_begin()
    mine = EarlyStopping(early_stopping("early_stopping", params))
    keras_stop = mine_stop = None
    for epoch, score in enumerate(SCORES):
        keras_callback.on_epoch_end(epoch, {"val_loss": score})
        if keras_stop is None and getattr(model, "stop_training", False):
            keras_stop = epoch
        if mine_stop is None and mine.after_evaluation(score):
            mine_stop = epoch
    assert keras_stop is not None
    assert mine_stop == keras_stop


def run_config(tmp_path, extra, overrides=()):
    path = tmp_path / "run.yaml"
    path.write_text(
        "model: mlp\nmodel_params: {hidden_units: [6]}\ndata: digits\nbatch_size_per_gpu: 16\n"
        "max_steps: 10\neval_steps: 2\nprint_loss_steps: 2\noptimizer: SGD\noptimizer_params: {learning_rate: 0.5}\n"
        f"logdir: {tmp_path / 'run'}\n" + extra
    )
    return load_config([path], overrides)


@pytest.mark.slow  # 3 s on 2 cores
def test_early_stopping_ends_the_run_and_a_restart_trains_no_more(tmp_path):
    from opt_train.training import train

    config = run_config(tmp_path, "early_stopping: {patience: 1, min_delta: 100.0}\n")  # nothing improves
    assert train(config)["global_step"] == 4  # second evaluation: no improvement for 1 evaluation
    assert train(config)["global_step"] == 4


@pytest.mark.slow  # 3 s on 2 cores
def test_restore_best_checkpoint_keeps_the_best_eval_loss_for_eval(tmp_path):
    from opt_train.training import evaluate, train
    from tests.support import read_jsonl

    # A rate this high makes the eval loss go up and down, so the best is not simply the last.
    config = run_config(tmp_path, "restore_best_checkpoint: true\n", ["optimizer_params.learning_rate=3.0"])
    train(config)
    evals = [(r["eval/loss"], r["step"]) for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "eval/loss" in r]
    best_loss, best_step = min(evals)
    result = evaluate(config)
    assert result["checkpoint"].endswith(f"best/ckpt-{best_step}")
    assert result["eval/loss"] == pytest.approx(best_loss, rel=1e-6)
