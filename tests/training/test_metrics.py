"""What a run reports is a function of the step alone: whatever the stops, resumes and kills in between."""

import pathlib

import pytest
import tensorflow as tf

from tests.support import copy_run, read_json, read_jsonl, train_in_process

RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [8], "dropout": 0.1},
    "data": "digits",
    "batch_size_per_gpu": 16,
    "optimizer": "Adam",
    "optimizer_params": {"learning_rate": 0.01},
    "print_loss_steps": 20,
    "save_summaries_steps": 10,
    "save_checkpoint_steps": 10,
    "random_seed": 5,
}


# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def _losses(logdir):
    return {r["step"]: r["loss"] for r in read_jsonl(pathlib.Path(logdir) / "metrics.jsonl") if "loss" in r}


@pytest.mark.slow  # 35 s measured on 2 loaded cores: three runs
def test_train_loss_after_a_resume_equals_the_uninterrupted_runs(cli, write_config, tmp_path):
    """The step-20 loss is the mean over updates 1-20 whether or not the run stopped at 10."""
    whole = write_config({**RUN, "max_steps": 30, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0
    legs = {**RUN, "logdir": str(tmp_path / "legs")}
    assert cli("train", "--config", write_config({**legs, "max_steps": 10}, "leg1.yaml")).exit_code == 0
    result = cli("train", "--config", write_config({**legs, "max_steps": 30}, "leg2.yaml"))
    assert result.exit_code == 0 and "resumed from" in result.output, result.output
    expected, actual = _losses(tmp_path / "whole"), _losses(tmp_path / "legs")
    assert actual[20] == expected[20] and actual[30] == expected[30]
    assert read_json(tmp_path / "legs" / "final_metrics.json")["train/loss"] == expected[30]
    assert read_json(tmp_path / "whole" / "final_metrics.json")["train/loss"] == expected[30]


# One run of 10 updates (records and checkpoints at 5 and 10) for the tests that look at its files or
# damage a copy of it as a kill would: trained once for the module (its tests stay with the slow ones:
# the run is 3-5 s on 2 loaded cores).
TEN = {**RUN, "max_steps": 10, "print_loss_steps": 5, "save_checkpoint_steps": 5}


@pytest.fixture(scope="module")
def ten_updates(tmp_path_factory):
    return train_in_process(tmp_path_factory.mktemp("ten"), TEN)[1]


@pytest.fixture
def ten_updates_copy(ten_updates, write_config, tmp_path):
    """`(config, logdir)`: a copy of the module's run at tmp_path/run, and its config."""
    return write_config(TEN), copy_run(ten_updates, tmp_path / "run")


@pytest.mark.slow  # a resume, and the module's run
def test_a_killed_runs_records_are_neither_duplicated_nor_glued_to_a_torn_line(cli, ten_updates_copy):
    config, logdir = ten_updates_copy
    expected = _losses(logdir)
    # As a run killed after writing step 10's records and half a line, before its checkpoint 10:
    folder = logdir / "checkpoints"
    for path in folder.glob("ckpt-10.*"):
        path.unlink()
    (folder / "checkpoint").unlink()
    (logdir / "final_metrics.json").unlink()
    with open(logdir / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 11, "loss": 0.')
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output and "at step 5" in result.output
    records = read_jsonl(logdir / "metrics.jsonl")  # every line parses
    steps = [r["step"] for r in records if "loss" in r]
    assert steps == [5, 10]
    assert _losses(logdir) == expected


@pytest.mark.slow
def test_final_metrics_rebuilt_after_a_kill_holds_the_trained_loss_not_nan(cli, ten_updates_copy):
    config, logdir = ten_updates_copy
    trained = read_json(logdir / "final_metrics.json")
    (logdir / "final_metrics.json").unlink()  # killed after the final checkpoint, before this file
    result = cli("train", "--config", config)
    assert result.exit_code == 0 and "nothing to train" in result.output, result.output
    final = read_json(logdir / "final_metrics.json")
    assert final["train/loss"] == trained["train/loss"] == _losses(logdir)[10]
    assert final["skipped_steps"] == trained["skipped_steps"] == 0
    assert [r["step"] for r in read_jsonl(logdir / "metrics.jsonl") if "eval/accuracy" in r] == [10]


@pytest.mark.slow
def test_the_final_checkpoint_is_written_once(ten_updates):
    """Checkpoints at 5 and 10 are two saves: the checkpoint's own save counter says so."""
    reader = tf.train.load_checkpoint(str(ten_updates / "checkpoints" / "ckpt-10"))
    assert reader.get_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE") == 2


def test_on_nonfinite_stop_stops_at_the_first_nonfinite_update_without_saving_it(cli, write_config, tmp_path):
    config = write_config({
        **RUN,
        "model": {"factory": "tests.distributed.overflow_model:build"},
        "model_params": {"hidden_units": 8, "overflow_at_call": 6, "overflow_rank": 0},
        "on_nonfinite": "stop",
        "max_steps": 20,
        "save_checkpoint_steps": 6,
    })
    result = cli("train", "--config", config)
    assert result.exit_code == 1, result.output
    assert "stopped at step 6: the loss is not finite" in result.output
    assert tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints")) is None
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["stopped"].startswith("the loss is not finite")

