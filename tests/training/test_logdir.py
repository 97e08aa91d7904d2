"""A logdir belongs to one run: a changed config is refused untouched, fresh runs go beside it, one process at a time."""

import os
import pathlib
import signal
import subprocess
import sys

import pytest
import yaml

from tests.support import REPO, SMALL_RUN, fill_disk, one_error_line, read_json, read_jsonl, train_in_process

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).
# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = [pytest.mark.usefixtures("no_export")]


RUN = {**SMALL_RUN, "print_loss_steps": 3, "save_checkpoint_steps": 3}


def _files(logdir):
    """Every file under logdir with its bytes (the lock file aside: it only names the holder)."""
    root = pathlib.Path(logdir)
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != ".lock"
    }


@pytest.fixture
def trained(tmp_path):
    return train_in_process(tmp_path, RUN)[:2]


@pytest.fixture(scope="module")
def untouched(tmp_path_factory):
    """One trained run shared by the tests that leave its logdir as it was (each asserts so):
    refused commands, and runs started afresh beside it."""
    return train_in_process(tmp_path_factory.mktemp("untouched"), RUN)[:2]


def test_a_changed_config_is_refused_before_anything_is_touched(cli, untouched):
    config, logdir = untouched
    before = _files(logdir)
    result = cli("train", "--config", config, "--set", "optimizer_params.learning_rate=0.5",
                 "--set", "max_steps=9")
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "optimizer_params.learning_rate 0.5 here, 0.01 in the run" in line
    assert "--resume" in line and "--no-resume" in line and "max_steps" not in line
    assert _files(logdir) == before


@pytest.mark.slow  # 4 s on 2 cores
def test_raising_max_steps_continues_and_resume_accepts_a_changed_rate(cli, trained):
    config, logdir = trained
    result = cli("train", "--config", config, "--set", "max_steps=9")
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output
    result = cli("train", "--config", config, "--set", "max_steps=12", "--resume",
                 "--set", "optimizer_params.learning_rate=0.005")
    assert result.exit_code == 0, result.output
    assert "continuing" in result.output and "optimizer_params.learning_rate" in result.output
    assert read_json(logdir / "final_metrics.json")["global_step"] == 12
    assert yaml.safe_load((logdir / "config.yaml").read_text())["optimizer_params"]["learning_rate"] == 0.005


@pytest.mark.parametrize("change", [["--set", "optimizer=SGD"], ["--set", "model_params.hidden_units=[12]"]])
def test_resume_refuses_a_checkpoint_that_does_not_fit_and_keeps_config_yaml(cli, untouched, change):
    """Adam's slots have no place in SGD; an 8-unit layer none in a 12-unit one: exit 2, nothing rewritten."""
    config, logdir = untouched
    before = _files(logdir)
    result = cli("train", "--config", config, "--resume", "--set", "max_steps=9", *change)
    assert result.exit_code == 2, result.output
    assert "restores into this run" in one_error_line(result)
    assert _files(logdir) == before


@pytest.mark.slow  # 4 s on 2 cores
def test_no_resume_and_benchmark_start_afresh_beside_a_run_and_leave_it_alone(cli, untouched):
    config, logdir = untouched
    before = _files(logdir)
    result = cli("train", "--config", config, "--no-resume")
    assert result.exit_code == 0, result.output
    assert f"starting afresh in {logdir}-2" in result.output and "resumed from" not in result.output
    result = cli("train", "--config", config, "--benchmark")
    assert result.exit_code == 0, result.output
    assert f"starting afresh in {logdir}-3" in result.output
    assert _files(logdir) == before
    assert [r["step"] for r in read_jsonl(f"{logdir}-2/metrics.jsonl") if "loss" in r] == [3, 6]
    benchmark = read_json(f"{logdir}-3/final_metrics.json")
    assert benchmark["benchmark/samples_timed"] == benchmark["benchmark/updates_timed"] * 16
    assert "benchmark/time_per_step" not in read_json(logdir / "final_metrics.json")


def test_resume_and_no_resume_together_are_a_usage_error(cli, write_config):
    result = cli("train", "--config", write_config(RUN), "--resume", "--no-resume")
    assert result.exit_code == 2
    assert "--resume cannot be combined" in one_error_line(result)


_HOLDER = """
import sys, time
from opt_train.training.logdir import LogdirLock
with LogdirLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_process_on_a_busy_logdir_stops_at_once_and_a_dead_one_holds_nothing(cli, write_config, tmp_path):
    config = write_config(RUN)
    logdir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(logdir)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = cli("train", "--config", config)
        assert result.exit_code == 2, result.output
        line = one_error_line(result)
        assert f"is in use by another opt-train process (pid {holder.pid} on" in line
        assert not (logdir / "metrics.jsonl").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("case", ["file", "under_file", "dev_null", "read_only"])
def test_an_unusable_logdir_is_one_line_exit_2_and_nothing_is_written(cli, write_config, tmp_path, tmpfs, case):
    blocker = tmp_path / "blocker.txt"
    blocker.write_text("not a folder")
    logdir = {
        "file": blocker,
        "under_file": blocker / "run",
        "dev_null": pathlib.Path(os.devnull),
        "read_only": tmp_path / "ro" / "run",
    }[case]
    if case == "read_only":
        tmpfs(tmp_path / "ro", "1m", "ro")
    config = write_config({**RUN, "logdir": str(logdir)})
    result = cli("train", "--config", config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert "config.yaml:" in line and "logdir" in line and str(logdir) in line
    assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["blocker.txt", "config.yaml"] + (["ro"] if case == "read_only" else []))


def test_a_logdir_on_a_full_disk_is_one_line_exit_1(cli, write_config, tmp_path, tmpfs):
    disk = tmpfs(tmp_path / "disk")
    fill_disk(disk)
    result = cli("train", "--config", write_config({**RUN, "logdir": str(disk / "run")}))
    assert result.exit_code == 1, result.output
    assert "disk full" in one_error_line(result)
    written = [p for p in (disk / "run").rglob("*") if p.is_file() and p.stat().st_size] if (disk / "run").exists() else []
    assert written == []
