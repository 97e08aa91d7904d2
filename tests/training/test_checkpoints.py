"""Checkpoints: how eval names one, damaged ones are passed over (never deleted), a full disk loses nothing."""

import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tests.support import SMALL_RUN, copy_run, ended_pid, fill_disk, one_error_line, read_json, train_in_process

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).
# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = [pytest.mark.usefixtures("no_export")]

RUN = {**SMALL_RUN, "print_loss_steps": 2, "save_checkpoint_steps": 2, "num_checkpoints": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A logdir with ckpt-2, ckpt-4, ckpt-6, trained once for the module; tests copy it."""
    return train_in_process(tmp_path_factory.mktemp("trained"), RUN)[1]


@pytest.fixture
def logdir_copy(trained, write_config, tmp_path):
    return write_config(RUN), copy_run(trained, tmp_path / "run")


def _eval_accuracy(cli, config, *checkpoint):
    result = cli("eval", "--config", config, *checkpoint)
    assert result.exit_code == 0, result.output
    return read_json_text(result.output)


def read_json_text(text):
    import json

    return json.loads(text[text.index("{"):])


# `eval` hands its --checkpoint to `evaluate`, which resolves it to a prefix first (`resolve_checkpoint`) and
# from there runs alike for every form given: one file form and the default (no --checkpoint) evaluate
# through the CLI; the other forms are checked to resolve to the same prefix.
EVALUATED_FORMS = ("data", "default")


@pytest.mark.parametrize("form", ["prefix", "index", "data", "checkpoints_folder", "logdir", "default"])
def test_eval_takes_a_prefix_its_files_or_a_folder(cli, logdir_copy, form):
    from opt_train.checkpoint_paths import resolve_checkpoint

    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    argument = {
        "prefix": [str(folder / "ckpt-6")],
        "index": [str(folder / "ckpt-6.index")],
        "data": [str(folder / "ckpt-6.data-00000-of-00001")],
        "checkpoints_folder": [str(folder)],
        "logdir": [str(logdir)],
        "default": [],
    }[form]
    if form not in EVALUATED_FORMS:
        assert resolve_checkpoint(*argument, str(logdir)) == str(folder / "ckpt-6")
        return
    results = _eval_accuracy(cli, config, *(["--checkpoint", *argument] if argument else []))
    assert results["checkpoint"] == str(folder / "ckpt-6")
    # The run's own evaluation of its final weights (step 6) is the reference.
    assert results["eval/accuracy"] == read_json(logdir / "final_metrics.json")["eval/accuracy"]


def test_eval_refuses_anything_else_in_one_line(cli, logdir_copy, tmp_path, write_config):
    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    garbage = tmp_path / "garbage.index"
    garbage.write_bytes(os.urandom(300))
    truncated = tmp_path / "cut"
    shutil.copy(folder / "ckpt-6.index", f"{truncated}.index")
    data = (folder / "ckpt-6.data-00000-of-00001").read_bytes()
    pathlib.Path(f"{truncated}.data-00000-of-00001").write_bytes(data[: len(data) // 2])
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    cases = {
        str(tmp_path / "missing"): "no such checkpoint",
        str(garbage): "does not restore",
        str(truncated): "does not restore",
        str(empty): "no checkpoint in it",
        str(config): "not a checkpoint",
    }
    for argument, words in cases.items():
        result = cli("eval", "--config", config, "--checkpoint", argument)
        assert result.exit_code == 2, (argument, result.output)
        assert words in one_error_line(result), (argument, result.output)
    other_model = write_config({**RUN, "model_params": {"hidden_units": [12]}}, "other.yaml")
    result = cli("eval", "--config", other_model, "--checkpoint", str(folder / "ckpt-6"))
    assert result.exit_code == 2, result.output
    assert "does not restore into this model" in one_error_line(result)
    # Its own logdir's checkpoints, none fitting the config given: eval points at the run's
    # config.yaml, not at train's --no-resume (eval writes nothing, so starting afresh means nothing).
    changed_model = write_config({**RUN, "model_params": {"hidden_units": [12]}, "logdir": str(logdir)}, "changed.yaml")
    result = cli("eval", "--config", changed_model)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "restores into this run" in line and str(logdir / "config.yaml") in line, line
    assert "--no-resume" not in line and ".. " not in line, line
    empty_logdir = write_config({**RUN, "logdir": str(tmp_path / "nothing")}, "nothing.yaml")
    result = cli("eval", "--config", empty_logdir)
    assert result.exit_code == 2 and "no checkpoint in" in one_error_line(result)


def _damage(logdir, how):
    folder = logdir / "checkpoints"
    data, index, state = folder / "ckpt-6.data-00000-of-00001", folder / "ckpt-6.index", folder / "checkpoint"
    if how == "truncate_data":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "empty_data":
        data.write_bytes(b"")
    elif how == "flip_data":
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    elif how == "delete_data":
        data.unlink()
    elif how == "empty_index":
        index.write_bytes(b"")
    elif how == "garble_index":
        index.write_bytes(os.urandom(index.stat().st_size))
    elif how == "delete_index":
        index.unlink()
    elif how == "empty_state":
        state.write_text("")
    elif how == "garble_state":
        state.write_bytes(os.urandom(64))
    elif how == "delete_state":
        state.unlink()
    elif how == "dangling_state":
        state.write_text('model_checkpoint_path: "ckpt-99"\nall_model_checkpoint_paths: "ckpt-99"\n')


NEWEST_DAMAGED = ["truncate_data", "empty_data", "flip_data", "delete_data", "empty_index", "garble_index", "delete_index"]
STATE_DAMAGED = ["empty_state", "garble_state", "delete_state", "dangling_state"]


def _saved_weights(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("model_variables/")}


# Four kinds run in the quick suite; the others (the same code paths) with the slow tests.
_QUICK = ("truncate_data", "delete_index", "garble_state", "dangling_state")


@pytest.mark.parametrize("how", [
    how if how in _QUICK else pytest.param(how, marks=pytest.mark.slow) for how in NEWEST_DAMAGED + STATE_DAMAGED
])
def test_a_damaged_checkpoint_falls_back_to_the_newest_that_restores_and_deletes_no_good_one(cli, logdir_copy, how):
    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    good_4 = _saved_weights(folder / "ckpt-4")
    _damage(logdir, how)
    result = cli("train", "--config", config, "--set", "max_steps=8")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if how in NEWEST_DAMAGED:
        expected = "ckpt-4"
        if how != "delete_index":  # without its index, ckpt-6 is not a checkpoint at all
            assert "checkpoint ckpt-6 does not restore" in result.output and "not deleted" in result.output
    else:
        expected = "ckpt-6"
    assert f"resumed from {folder / expected} at step {expected[-1]}" in result.output
    assert read_json(logdir / "final_metrics.json")["global_step"] == 8
    if how in NEWEST_DAMAGED:
        # Retrained from step 4, saved again at 6 and 8; ckpt-4 itself (good) untouched.
        for name, value in _saved_weights(folder / "ckpt-4").items():
            np.testing.assert_array_equal(value, good_4[name])
    assert tf.train.latest_checkpoint(str(folder)) == str(folder / "ckpt-8")
    state = tf.train.get_checkpoint_state(str(folder))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-4", "ckpt-6", "ckpt-8"]


@pytest.mark.slow  # 3 s on 2 cores
def test_disk_full_during_a_save_is_one_line_exit_1_and_loses_nothing(cli, write_config, tmp_path, tmpfs):
    disk = tmpfs(tmp_path / "disk", "8m")
    # A wide layer: its checkpoint (weights and two Adam slots, ~1.4 MB) is far larger
    # than the room left below, which config.yaml and the metrics lines still fit in.
    run = {**RUN, "model_params": {"hidden_units": [1024]}, "max_steps": 2, "logdir": str(disk / "run")}
    config = write_config(run)
    assert cli("train", "--config", config).exit_code == 0
    before = _saved_weights(disk / "run" / "checkpoints" / "ckpt-2")
    fill_disk(disk)
    os.truncate(disk / "filler", os.path.getsize(disk / "filler") - 256 * 1024)
    result = cli("train", "--config", config, "--set", "max_steps=4")
    assert result.exit_code == 1, result.output
    line = one_error_line(result)
    assert "disk full" in line and "ckpt-2 is intact" in line
    folder = disk / "run" / "checkpoints"
    assert tf.train.latest_checkpoint(str(folder)) == str(folder / "ckpt-2")
    after = _saved_weights(folder / "ckpt-2")
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value)
    debris = [p.name for p in (disk / "run").rglob("*") if "_temp" in p.name or ".tmp" in p.name]
    assert debris == []


def _state_names(folder):
    """The checkpoint names the state file holds, as written (not resolved by TF)."""
    text = (folder / "checkpoint").read_text()
    return [line.split('"')[1] for line in text.splitlines() if line.startswith(("model_checkpoint_path", "all_model_checkpoint_paths"))]


@pytest.mark.parametrize("relative", [True, False], ids=["relative_logdir", "absolute_logdir"])
@pytest.mark.slow  # 6 s on 2 cores, its 2 cases
def test_a_rebuilt_state_file_names_checkpoints_relative_to_its_folder_and_rotation_goes_on(
        cli, logdir_copy, write_config, tmp_path, monkeypatch, relative):
    _, logdir = logdir_copy
    monkeypatch.chdir(tmp_path)
    config = write_config({**RUN, "logdir": "run" if relative else str(logdir)}, "here.yaml")
    _damage(logdir, "truncate_data")  # ckpt-6 does not restore: the state file is rebuilt from ckpt-4
    result = cli("train", "--config", config, "--set", "max_steps=12")
    assert result.exit_code == 0, result.output
    folder = logdir / "checkpoints"
    assert all("/" not in name for name in _state_names(folder)), _state_names(folder)
    assert tf.train.latest_checkpoint(str(folder)) == str(folder / "ckpt-12")
    # num_checkpoints: 3, and the damaged ckpt-6 was overwritten by the retrained one, then rotated out.
    assert sorted(p.name for p in folder.glob("*.index")) == ["ckpt-10.index", "ckpt-12.index", "ckpt-8.index"]


def test_the_debris_of_an_interrupted_save_is_removed_by_the_next_run(cli, logdir_copy):
    """A kill during a save leaves ckpt-N_temp/ (empty, or with a shard) or a .data file whose index never came."""
    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    (folder / "ckpt-8_temp").mkdir()
    (folder / "ckpt-9_temp").mkdir()
    shutil.copy(folder / "ckpt-6.data-00000-of-00001", folder / "ckpt-9_temp" / "part-00000-of-00001.data-00000-of-00001")
    shutil.copy(folder / "ckpt-6.data-00000-of-00001", folder / "ckpt-10.data-00000-of-00001")
    result = cli("train", "--config", config)  # a finished run, restarted: it saves nothing
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == [
        "checkpoint", *[f"ckpt-{n}.{kind}" for n in (2, 4, 6) for kind in ("data-00000-of-00001", "index")]]


def test_a_workers_discarded_save_leaves_nothing_and_removes_what_a_killed_worker_left(tmp_path, monkeypatch):
    """A non-chief worker's part of a collective save goes to a temporary folder of its own, removed at once; a
    worker killed during one (a restart ends it) leaves its folder, which the next worker's save removes."""
    import tempfile

    from opt_train.training.checkpoints import WORKER_SAVE_PREFIX, Checkpoints

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    left = temporary / f"{WORKER_SAVE_PREFIX}{ended_pid()}-a1" / "ckpt_temp"
    left.mkdir(parents=True)
    (left / "part-00000-of-00001.data-00000-of-00001.tempstate1").write_bytes(b"\0" * 64)
    step = tf.Variable(3, dtype=tf.int64)
    worker = Checkpoints(str(tmp_path / "run"), {"global_step": step, "w": tf.Variable([1.0, 2.0])}, step=step,
                         max_to_keep=2, writer=False, collective=True)
    assert worker.save(3) is None
    assert worker.last_saved_step == 3
    assert list(temporary.iterdir()) == []
    assert not (tmp_path / "run").exists()  # nothing in the logdir either


def test_resume_takes_the_newest_checkpoint_that_restores_not_the_one_the_state_file_names(cli, logdir_copy):
    """A kill between a save's index and its state file: the state file still names the previous checkpoint."""
    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    (folder / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-4"\n')
    result = cli("train", "--config", config, "--set", "max_steps=8")
    assert result.exit_code == 0, result.output
    assert f"resumed from {folder / 'ckpt-6'} at step 6" in result.output
    assert _state_names(folder)[0] == "ckpt-8"


def test_eval_names_the_checkpoint_it_used_and_the_newer_one_it_passed_over(cli, logdir_copy):
    config, logdir = logdir_copy
    folder = logdir / "checkpoints"
    _damage(logdir, "truncate_data")
    result = cli("eval", "--config", config)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-2:] == [
        next(line for line in result.stderr.splitlines() if line.startswith("checkpoint ckpt-6 does not restore (")),
        f"evaluating {folder / 'ckpt-4'}",
    ]
    assert "passed over" in result.stderr
    assert read_json_text(result.stdout)["checkpoint"] == str(folder / "ckpt-4")
