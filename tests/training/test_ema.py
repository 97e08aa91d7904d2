"""`use_ema`: eval and the export use Keras's moving average of the weights, the checkpoint holds both, resume is exact.

The reference is a NumPy EMA of the raw weights read from every checkpoint, with
Keras's formula (keras/src/optimizers/base_optimizer.py `_update_model_variables_moving_average`):
the first update copies the weights (momentum 0 while `iterations == 0`), then
`average = m * average + (1 - m) * weights`.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.support import SMALL_RUN, train_in_process

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).

MOMENTUM = 0.9
RUN = {**SMALL_RUN, "optimizer": "GradientDescent",
       "optimizer_params": {"learning_rate": 0.5, "use_ema": True, "ema_momentum": MOMENTUM},
       "max_steps": 4, "print_loss_steps": 2, "eval_steps": 2, "save_checkpoint_steps": 1, "num_checkpoints": 10}
RAW = [f"model_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(4)]
# The optimizer's averages, after its iterations and learning rate: one per trained variable, in order.
AVERAGES = [f"optimizer/_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE" for i in range(2, 6)]


def _checkpoints(logdir):
    state = tf.train.get_checkpoint_state(str(logdir / "checkpoints"))
    readers = [tf.train.load_checkpoint(path) for path in state.all_model_checkpoint_paths]
    return {int(reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE")): reader for reader in readers}


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """RUN trained once for the module: `(config, logdir, output of the train command)`; its tests only read it."""
    return train_in_process(tmp_path_factory.mktemp("ema"), RUN, export=True)


def test_eval_and_export_use_the_average_which_the_checkpoint_holds_beside_the_weights(ema_run):
    import keras

    _, logdir, output = ema_run
    assert "eval at step 2 (EMA weights):" in output and "eval at step 4 (EMA weights):" in output
    assert "saved_model/ (EMA weights)" in output
    readers = _checkpoints(logdir)
    assert sorted(readers) == [1, 2, 3, 4]
    average = None
    for step in (1, 2, 3, 4):
        raw = [readers[step].get_tensor(name) for name in RAW]
        average = raw if average is None else [MOMENTUM * a + (1 - MOMENTUM) * w for a, w in zip(average, raw)]
    held = [readers[4].get_tensor(name) for name in AVERAGES]
    for expected, got in zip(average, held):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    final_raw = [readers[4].get_tensor(name) for name in RAW]
    assert not np.allclose(final_raw[0], held[0])  # training goes on with the raw weights: both are kept
    exported = keras.saving.load_model(logdir / "export" / "model.keras").get_weights()
    for expected, got in zip(average, exported):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # 4 s on 2 cores
def test_resume_is_exact_with_ema(cli, write_config, tmp_path, ema_run):
    whole = _checkpoints(ema_run[1])[4]  # RUN without a stop
    legs = {**RUN, "logdir": str(tmp_path / "legs")}
    assert cli("train", "--config", write_config({**legs, "max_steps": 2}, "first.yaml")).exit_code == 0
    assert cli("train", "--config", write_config(legs, "second.yaml")).exit_code == 0
    resumed = _checkpoints(tmp_path / "legs")[4]
    for name in RAW + AVERAGES:
        assert whole.get_tensor(name).tobytes() == resumed.get_tensor(name).tobytes(), name


def _numpy_average(readers, last):
    """Keras's EMA of the raw weights of checkpoints 1..last: the first copies, then m * a + (1 - m) * w."""
    average = None
    for step in range(1, last + 1):
        raw = [readers[step].get_tensor(name) for name in RAW]
        average = raw if average is None else [MOMENTUM * a + (1 - MOMENTUM) * w for a, w in zip(average, raw)]
    return average


@pytest.mark.slow
def test_eval_and_export_from_a_checkpoint_use_the_average_unless_raw_weights_is_asked(cli, tmp_path, ema_run):
    import json

    import keras

    config, logdir, _ = ema_run
    readers = _checkpoints(logdir)

    def exported(*args):
        out = tmp_path / "-".join(["out", *(a.lstrip("-").replace("/", "_") for a in map(str, args))])
        result = cli("export", "--config", config, "--out", out, *args)
        assert result.exit_code == 0, result.output
        return result, keras.saving.load_model(out / "model.keras").get_weights()

    # The latest checkpoint: the very weights the end-of-run export shipped, bit for bit.
    result, latest = exported()
    at_end = keras.saving.load_model(logdir / "export" / "model.keras").get_weights()
    assert [w.tobytes() for w in latest] == [w.tobytes() for w in at_end]
    assert json.loads(result.stdout)["checkpoint"] == str(logdir / "checkpoints" / "ckpt-4")
    assert f"using the EMA weights of {logdir / 'checkpoints' / 'ckpt-4'}" in result.stderr
    # A checkpoint from the middle of the run (as an interrupted run leaves): the average so far.
    _, middle = exported("--checkpoint", logdir / "checkpoints" / "ckpt-2")
    for expected, got in zip(_numpy_average(readers, 2), middle):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    assert not np.allclose(middle[0], readers[2].get_tensor(RAW[0]))
    # --raw-weights: the trained weights themselves, and no EMA line.
    result, raw = exported("--raw-weights")
    assert "EMA" not in result.stderr
    assert [w.tobytes() for w in raw] == [readers[4].get_tensor(name).tobytes() for name in RAW]

    # eval: the same figures as the run's own evaluation of step 4, which used the averages.
    result = cli("eval", "--config", config)
    assert result.exit_code == 0, result.output
    assert f"evaluating {logdir / 'checkpoints' / 'ckpt-4'} (EMA weights)" in result.stderr
    in_run = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    in_run = next(record for record in in_run if record.get("step") == 4 and "eval/loss" in record)
    assert json.loads(result.stdout)["eval/loss"] == in_run["eval/loss"]
    raw_eval = cli("eval", "--config", config, "--raw-weights")
    assert raw_eval.exit_code == 0, raw_eval.output
    assert "EMA" not in raw_eval.stderr
    assert json.loads(raw_eval.stdout)["eval/loss"] != in_run["eval/loss"]
