"""lr_control: Keras' ReduceLROnPlateau step for step, RETURNN's newbob by its formulas, exact on resume."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from opt_train.config import ConfigError, load_config
from opt_train.config.controls import lr_control
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


def _halve(control, score, base_rate):
    control.schedule.scale.assign(control.schedule.scale * 0.5)


@pytest.mark.parametrize("mode", ["newbob", "newbob_abs", "plateau"])
def test_the_control_applies_the_rule_its_modes_row_names(monkeypatch, mode):
    import dataclasses

    from opt_train import registry

    table = registry.table("lr_controls")
    monkeypatch.setitem(table.rows, mode, dataclasses.replace(table.rows[mode], code=f"{__name__}:_halve"))
    mine = control({"mode": mode}, rate=1.0)
    assert [mine.after_evaluation({"loss": score}, step=0) for score in (1.0, 1.0)] == pytest.approx([0.5, 0.25])


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
    from opt_train.config.controls import early_stopping
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


# Scores for both directions: accuracy rising with plateaus and dips, loss falling likewise.
ACCURACY = [0.50, 0.62, 0.70, 0.70, 0.705, 0.69, 0.71, 0.71, 0.71, 0.72, 0.70, 0.70, 0.70, 0.73, 0.69]
LOSS = [1.2, 0.9, 0.7, 0.7, 0.695, 0.71, 0.68, 0.68, 0.68, 0.67, 0.70, 0.70, 0.70, 0.66, 0.71]


@pytest.fixture(scope="module")
def evaluated_model():
    """A compiled model whose compiled metrics are built: Keras's mode auto reads their `_direction`.

    Built and evaluated once for the module (its `evaluate` traces a step); `keras_model` hands it out
    with what Keras's callbacks change on it (the rate, `stop_training`) set back.
    """
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.evaluate(np.zeros((2, 2)), np.zeros((2,)), verbose=0)
    return model


@pytest.fixture
def keras_model(evaluated_model):
    evaluated_model.optimizer.learning_rate = 0.1
    evaluated_model.stop_training = False
    return evaluated_model


DIRECTION_CASES = [
    ("accuracy", ACCURACY, {}),
    ("accuracy", ACCURACY, {"patience": 1}),
    ("accuracy", ACCURACY, {"patience": 2, "min_delta": 0.01}),
    ("accuracy", ACCURACY, {"patience": 3, "mode": "max"}),
    ("accuracy", LOSS, {"patience": 2, "mode": "min"}),
    ("loss", LOSS, {"patience": 1}),
    ("loss", LOSS, {"patience": 2, "min_delta": 0.005}),
    ("loss", ACCURACY, {"patience": 2, "mode": "max"}),
]


@pytest.mark.parametrize("monitor,scores,params", DIRECTION_CASES)
def test_early_stopping_knows_the_direction_as_keras(keras_model, monitor, scores, params):
    from opt_train.config.controls import early_stopping
    from opt_train.training.controls import EarlyStopping

    model = keras_model
    keras_params = dict(params)
    keras_callback = keras.callbacks.EarlyStopping(monitor=f"val_{monitor}", **keras_params)
    keras_callback.set_model(model)
    keras_callback.on_train_begin()
    mine = EarlyStopping(early_stopping("early_stopping", {"monitor": monitor, **params}))
    keras_stops, mine_stops = [], []
    for epoch, score in enumerate(scores):
        model.stop_training = False
        keras_callback.on_epoch_end(epoch, {f"val_{monitor}": score})
        keras_stops.append(model.stop_training)
        mine_stops.append(mine.after_evaluation(score) and int(mine.state["evaluations"].numpy()) - 1 == epoch
                          and not any(mine_stops))
        assert float(mine.state["best"].numpy()) == pytest.approx(float(keras_callback.best)), epoch
    first = keras_stops.index(True) if True in keras_stops else None
    assert (mine_stops.index(True) if True in mine_stops else None) == first


@pytest.mark.parametrize("monitor,scores,params", [
    ("accuracy", ACCURACY, {"patience": 1, "factor": 0.5}),
    ("accuracy", ACCURACY, {"patience": 1, "factor": 0.5, "cooldown": 2, "min_lr": 0.02}),
    ("accuracy", ACCURACY, {"patience": 2, "factor": 0.1, "min_delta": 0.01}),
    ("accuracy", ACCURACY, {"patience": 1, "factor": 0.5, "monitor_mode": "max"}),
    ("accuracy", LOSS, {"patience": 1, "factor": 0.5, "monitor_mode": "min"}),
    ("loss", LOSS, {"patience": 1, "factor": 0.3, "cooldown": 1}),
    ("loss", LOSS, {"patience": 2, "factor": 0.5, "min_delta": 0.005, "min_lr": 0.01}),
])
def test_plateau_knows_the_direction_as_keras(keras_model, monitor, scores, params):
    model = keras_model
    keras_params = {("mode" if k == "monitor_mode" else k): v for k, v in params.items()}
    keras_callback = keras.callbacks.ReduceLROnPlateau(monitor=f"val_{monitor}", **keras_params)
    keras_callback.set_model(model)
    keras_callback.on_train_begin()
    mine = control({"mode": "plateau", "monitor": monitor, **params})
    rates = []
    for epoch, score in enumerate(scores):
        keras_callback.on_epoch_end(epoch, {f"val_{monitor}": score})
        rate = mine.after_evaluation({monitor: score}, step=0)
        assert rate == pytest.approx(float(model.optimizer.learning_rate.numpy()), rel=1e-6), epoch
        rates.append(rate)
    assert min(rates) < rates[0]  # the sequence made both reduce


def test_newbob_refuses_a_higher_is_better_monitor():
    from opt_train.errors import ParamError

    for mode in ("newbob", "newbob_abs"):
        with pytest.raises(ParamError) as caught:
            lr_control("lr_control", {"mode": mode, "monitor": "accuracy"})
        assert (caught.value.param, caught.value.code) == ("monitor", "conflict")
    assert lr_control("lr_control", {"mode": "newbob", "monitor": "mae"})["monitor"] == "mae"


@pytest.mark.slow  # 3 s on 2 cores
def test_early_stopping_on_rising_accuracy_stops_where_keras_would(tmp_path, keras_model):
    """Eval accuracy rising: Keras's EarlyStopping (mode auto: max) goes on; before mode, this run stopped early."""
    from opt_train.training import train
    from tests.support import read_jsonl

    config = run_config(tmp_path, "early_stopping: {monitor: accuracy, patience: 1}\n",
                        ["optimizer=Adam", "optimizer_params.learning_rate=0.003"])  # accuracy rises at each eval
    result = train(config)
    scores = [r["eval/accuracy"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "eval/accuracy" in r]
    model = keras_model
    keras_callback = keras.callbacks.EarlyStopping(monitor="val_accuracy", patience=1)
    keras_callback.set_model(model)
    keras_callback.on_train_begin()
    model.stop_training = False
    keras_stop = None
    for epoch, score in enumerate(scores):
        keras_callback.on_epoch_end(epoch, {"val_accuracy": score})
        if model.stop_training:
            keras_stop = epoch
            break
    assert scores[-1] > scores[0]  # accuracy rose
    expected = 10 if keras_stop is None else 2 * (keras_stop + 1)
    assert result["global_step"] == expected
    assert keras_stop is None  # rising accuracy: the run goes on to max_steps


@pytest.mark.slow  # 3 s on 2 cores
def test_restore_best_checkpoint_follows_the_early_stopping_monitor(tmp_path, capsys):
    from opt_train.training import evaluate, train
    from tests.support import read_jsonl

    config = run_config(tmp_path, "restore_best_checkpoint: true\nearly_stopping: {monitor: accuracy, patience: 100}\n",
                        ["optimizer_params.learning_rate=3.0"])
    train(config)
    evals = [(r["eval/accuracy"], -r["step"]) for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")
             if "eval/accuracy" in r]
    best, minus_step = max(evals)  # Keras keeps the first of equal scores: the earliest step
    assert "best eval accuracy so far (highest; early_stopping's monitor)" in capsys.readouterr().out
    result = evaluate(config)
    assert result["checkpoint"].endswith(f"best/ckpt-{-minus_step}")
    assert result["eval/accuracy"] == pytest.approx(best, rel=1e-6)
