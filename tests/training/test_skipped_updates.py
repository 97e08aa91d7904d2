"""Skipped updates in a run: max_steps counts applied ones (OpenSeq2Seq), resume stays exact, a bound ends it."""

import numpy as np
import pytest
import tensorflow as tf

from tests.e2e.test_resume import RUN
from tests.support import checkpoint_tensors, read_json, read_jsonl, train_in_process

# Float16 compute with Backoff from 2**24 (OpenSeq2Seq's old default): the first updates overflow, and growing
# the scale after every 3 finite updates overflows again now and then: skips all along the run.
SKIPPING = {
    **RUN,
    "dtype": "mixed",
    "loss_scaling": "Backoff",
    "loss_scaling_params": {"step_window": 3, "scale_max": 2.0**24},
}


# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def _checkpoint_tensor(logdir, name):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(logdir / "checkpoints")))
    return int(reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.fixture(scope="module")
def twenty_updates(tmp_path_factory):
    """`(config, logdir)`: 20 updates of SKIPPING counted as OpenSeq2Seq counts them, trained once for the module."""
    return train_in_process(tmp_path_factory.mktemp("twenty"), {**SKIPPING, "max_steps": 20, "count_skipped_updates": False})


@pytest.mark.parametrize("count_skipped", [False, True])
@pytest.mark.slow  # 6 s on 2 cores, its 2 cases
def test_max_steps_counts_applied_updates_unless_told(count_skipped, cli, write_config, tmp_path, request):
    if count_skipped:
        config = write_config({**SKIPPING, "max_steps": 20, "count_skipped_updates": count_skipped})
        result = cli("train", "--config", config)
        assert result.exit_code == 0, result.output
        logdir = tmp_path / "run"
    else:
        logdir = request.getfixturevalue("twenty_updates")[1]
    final = read_json(logdir / "final_metrics.json")
    skipped = final["skipped_steps"]
    assert skipped >= 3
    assert final["global_step"] == _checkpoint_tensor(logdir, "global_step") == 20
    applied = _checkpoint_tensor(logdir, "optimizer/_iterations")  # Keras saves `iterations` as `_iterations`
    consumed = _checkpoint_tensor(logdir, "micro_batches")
    if count_skipped:
        assert (applied, consumed) == (20 - skipped, 20)  # the old numbers: fewer updates than asked
    else:
        assert (applied, consumed) == (20, 20 + skipped)  # OpenSeq2Seq's: max_steps updates applied
    assert [r["step"] for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r] == [5, 10, 15, 20]


@pytest.mark.slow  # two runs, and the module's
def test_a_resumed_run_that_skips_updates_equals_the_uninterrupted_run(cli, write_config, tmp_path, twenty_updates):
    whole = twenty_updates[1]
    legs = {**SKIPPING, "count_skipped_updates": False, "logdir": str(tmp_path / "legs")}
    first_leg = write_config({**legs, "max_steps": 10}, "leg1.yaml")
    assert cli("train", "--config", first_leg).exit_code == 0
    second_leg = write_config({**legs, "max_steps": 20}, "leg2.yaml")
    result = cli("train", "--config", second_leg)
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output

    expected, actual = checkpoint_tensors(whole), checkpoint_tensors(tmp_path / "legs")
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    whole_final = read_json(whole / "final_metrics.json")
    legs_final = read_json(tmp_path / "legs" / "final_metrics.json")
    assert whole_final["skipped_steps"] >= 3
    assert legs_final == whole_final


@pytest.mark.parametrize("bound", [None, 4])
def test_a_run_that_skips_every_update_stops_with_a_clear_line(bound, cli, write_config, tmp_path):
    """A static scale past float16's range overflows every update: no step is ever reached."""
    config = write_config({**RUN, "dtype": "mixed", "loss_scaling": 1.0e10, "max_steps": 10,
                           "max_consecutive_overflows": bound})
    result = cli("train", "--config", config)
    assert result.exit_code == 1, result.output
    limit = bound or 20
    assert f"stopped at step 1: {limit} consecutive non-finite updates" in result.output
    assert "Traceback" not in result.output
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["stopped"].startswith(f"{limit} consecutive")


def test_keras_adafactor_divides_zero_by_zero_where_a_zero_gradient_row_meets_a_zero_column():
    """The fault the next test's run meets, in Keras 3's own Adafactor: its factored second moment (a row's
    mean times a column's, both 1e-30 where the gradient is zero) underflows float32 to 0 where they meet,
    0 / sqrt(0) is NaN there, and the update's RMS clipping spreads it over the whole kernel."""
    import keras

    def updated(zero_column):
        kernel = tf.Variable(np.ones((3, 2), np.float32))
        gradient = np.full((3, 2), 0.5, np.float32)
        gradient[0, :] = 0.0
        if zero_column:
            gradient[:, 0] = 0.0
        keras.optimizers.Adafactor(learning_rate=0.1).apply_gradients([(tf.constant(gradient), kernel)])
        return kernel.numpy()

    assert np.isfinite(updated(zero_column=False)).all()
    assert np.isnan(updated(zero_column=True)).all()


def test_an_update_that_leaves_a_weight_not_finite_stops_the_run_before_any_figure_or_checkpoint(
        cli, write_config, tmp_path):
    """Digits has always-blank pixels (all-zero kernel rows) and, under ReLU, a hidden unit dead on the whole
    batch (an all-zero column): Adafactor's first update makes that weight NaN from finite gradients. With
    oneDNN's ReLU (NaN in, 0 out) every later loss was finite: the run ended "done" on a NaN checkpoint."""
    config = write_config({**RUN, "model": "mlp", "model_params": {"hidden_units": [32]}, "random_seed": 0,
                           "batch_size_per_gpu": 64, "optimizer": "Adafactor",
                           "optimizer_params": {"learning_rate": 0.1}, "max_steps": 4, "print_loss_steps": 2,
                           "save_checkpoint_steps": 1})
    result = cli("train", "--config", config)
    assert result.exit_code == 1, result.output
    reason = "an update left dense_0/kernel not finite, from finite gradients"
    assert f"Error: stopped at step 1: {reason}" in result.output
    assert "Traceback" not in result.output
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl") == [{"step": 1, "stopped": reason + (
        " (the optimizer's update rule overflowed or divided by zero)")}]
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")) is None


def test_a_checkpoint_that_holds_a_weight_not_finite_is_neither_resumed_nor_evaluated(cli, write_config, tmp_path):
    """A checkpoint that a diverged run wrote before runs stopped there, rewritten here with TensorFlow's own
    SaveV2: every tensor as saved, the first kernel NaN. (`export` and `predict` restore as `eval` does.)"""
    config = write_config({**RUN, "max_steps": 1, "save_checkpoint_steps": 1})
    assert cli("train", "--config", config).exit_code == 0
    prefix = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    tensors = [reader.get_tensor(name) for name in names]
    kernel = names.index("model_variables/0/.ATTRIBUTES/VARIABLE_VALUE")
    tensors[kernel] = np.full_like(tensors[kernel], np.nan)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names), tensors=tensors)

    result = cli("train", "--config", config, "--set", "max_steps=2")
    assert result.exit_code == 1, result.output
    assert f"Error: {prefix} holds dense_0/kernel not finite: the run cannot start from it" in result.output
    assert "Traceback" not in result.output
    result = cli("eval", "--config", config)
    assert result.exit_code == 1, result.output
    assert f"Error: {prefix} holds dense_0/kernel not finite: it cannot be evaluated" in result.output


def test_a_checkpoint_from_before_the_data_position_restores_with_the_old_counting(tmp_path):
    """Written without `micro_batches` (by TF's own writer): it restores whole, position = step × iter_size."""
    from opt_train.training.checkpoints import Checkpoints
    from opt_train.training.errors import RunRefused

    old_step = tf.Variable(7, dtype=tf.int64)
    written = tf.train.Checkpoint(global_step=old_step).save(str(tmp_path / "checkpoints" / "ckpt"))

    step = tf.Variable(0, dtype=tf.int64)
    position = tf.Variable(0, dtype=tf.int64)
    items = {"global_step": step, "micro_batches": position}
    checkpoints = Checkpoints(str(tmp_path), items, step=step, max_to_keep=2,
                              optional={"micro_batches": lambda: position.assign(step * 4)})
    assert checkpoints.restore() == written
    assert (int(step.numpy()), int(position.numpy())) == (7, 28)

    strict = Checkpoints(str(tmp_path), items, step=step, max_to_keep=2, writer=False)
    with pytest.raises(RunRefused):
        strict.restore()


@pytest.mark.parametrize("count_skipped", [False, True])
@pytest.mark.slow  # 4 s on 2 cores, its 2 cases
def test_benchmark_samples_are_the_micro_batches_read(count_skipped, cli, write_config, tmp_path):
    """samples/s counts what was read, skipped updates' batches included (as many per update as iter_size)."""
    config = write_config({**SKIPPING, "max_steps": 20, "iter_size": 2, "count_skipped_updates": count_skipped})
    result = cli("train", "--config", config, "--benchmark")
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["benchmark/updates_timed"] == 20 - 4  # warm-up: max_steps // 5
    per_update = RUN["batch_size_per_gpu"] * 2
    if count_skipped:
        assert final["benchmark/samples_timed"] == final["benchmark/updates_timed"] * per_update
    else:
        # Whole updates: one per counted update, plus the skipped ones (this run skips all along).
        assert final["benchmark/samples_timed"] % per_update == 0
        assert final["benchmark/samples_timed"] > final["benchmark/updates_timed"] * per_update
