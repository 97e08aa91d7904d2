"""`opt-train sweep --launcher slurm` against a real single-node SLURM (tests/slurm/conftest.py).

The trials run as the tasks of one `sbatch --array` job and give the same table as the
local launcher; an array task cancelled with `scancel` is left for the next run of the
same command, which resubmits only it and finishes the sweep; a task still running when the sweep is run
again (its driver killed) is waited for, not resubmitted. Bad flags are one line, exit 2. The sweep commands
run in the test's process (the one killed excepted), their trials and array tasks as processes of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from tests.support import CONFIGS, LAUNCH_VARIABLES, REPO, read_json, unlaunched_environ

SHORT = ["--set", "max_steps=30", "--set", "eval_steps=30", "--set", "save_checkpoint_steps=10",
         "--set", "save_summaries_steps=null", "--set", "print_loss_steps=10"]
GRID = ["--grid", "optimizer_params.learning_rate=0.1,0.01"]
TIMEOUT_SECONDS = 600


def _sweep(cluster, *args):
    """`opt-train sweep ARGS` in this process (its trials and array tasks are processes, as always), in the
    environment its own process would have: exit code as `returncode`, `stdout`, `stderr`."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    environ = {**dict.fromkeys(LAUNCH_VARIABLES), "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO),
               "SLURM_CONF": cluster.environ["SLURM_CONF"]}
    result = CliRunner(env=environ).invoke(cli, ["sweep", *map(str, args)], prog_name="opt-train")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


def _rows(stdout):
    """The table's trial lines."""
    return [line for line in stdout.splitlines() if line.startswith("trial-")]


@pytest.mark.slow
def test_a_slurm_array_sweep_gives_the_local_table_and_a_cancelled_task_is_finished_by_a_rerun(
        slurm_cluster, tmp_path):
    from opt_train.sweep.slurm import TASKS_FOLDER

    base = ["--config", CONFIGS / "default.yaml", *SHORT, *GRID]
    local = _sweep(slurm_cluster, *base, "--out", tmp_path / "local", "--parallel", 2)
    assert local.returncode == 0, local.stdout + local.stderr

    out = tmp_path / "slurm"
    # One task at a time: the second waits in the queue, and is cancelled there.
    argv = [*base, "--out", out, "--parallel", 1, "--launcher", "slurm", "--sbatch-args", "--time=10"]
    cancelled = []

    def cancel_the_second_task():
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while time.monotonic() < deadline and not cancelled:
            scripts = list((out / TASKS_FOLDER).glob("*.sh")) if (out / TASKS_FOLDER).exists() else []
            if scripts:
                queued = slurm_cluster.run("squeue", "-h", "-r", "-o", "%i", check=False).stdout.split()
                second = [task for task in queued if task.endswith("_1")]
                if second:
                    slurm_cluster.run("scancel", second[0])
                    cancelled.append(second[0])
            time.sleep(0.2)

    watcher = threading.Thread(target=cancel_the_second_task, daemon=True)
    watcher.start()
    first = _sweep(slurm_cluster, *argv)
    watcher.join(timeout=5)
    assert first.returncode == 0, first.stdout + first.stderr
    assert cancelled, first.stdout + first.stderr
    assert "interrupted; it resumes on the next run" in first.stderr, first.stderr
    assert len(list((out / TASKS_FOLDER).glob("*.sh"))) == 1  # every trial of the run in one array job

    again = _sweep(slurm_cluster, *argv)
    assert again.returncode == 0, again.stdout + again.stderr
    scripts = sorted((out / TASKS_FOLDER).glob("*.sh"))
    assert len(scripts) == 2 and scripts[1].read_text().count(") cd ") == 1  # only the cancelled trial again
    assert _rows(again.stdout) == _rows(local.stdout), (again.stdout, local.stdout)
    for trial in sorted(out.glob("trial-*")):
        assert read_json(trial / "trial.json")["status"] == "ok"


def test_bad_launcher_flags_are_one_line_exit_2(cli, tmp_path):
    result = cli("sweep", "--config", CONFIGS / "default.yaml", *GRID, "--out", tmp_path / "s",
                 "--sbatch-args", "--time=5")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == "Error: --sbatch-args: only with --launcher slurm"
    assert "Traceback" not in result.output
    result = cli("sweep", "--config", CONFIGS / "default.yaml", *GRID, "--out", tmp_path / "s",
                 "--launcher", "slurm", "--sbatch-args", "--time='5")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: --sbatch-args: No closing quotation")
    result = cli("sweep", "--config", CONFIGS / "default.yaml", *GRID, "--out", tmp_path / "s",
                 "--launcher", "slurm", "--gpus", "0,1")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: --gpus: only with --launcher local")


def test_without_slurm_commands_the_slurm_launcher_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch/squeue/scancel here
    result = cli("sweep", "--config", CONFIGS / "default.yaml", *GRID, "--out", tmp_path / "s", "--launcher", "slurm")
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: --launcher slurm: sbatch, squeue, scancel not found on PATH"), last
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_rerun_while_a_trials_task_still_runs_waits_for_it_and_submits_nothing(slurm_cluster, tmp_path):
    """The twin of the cancelled task: the sweep's driver is killed (kill -9: it cancels nothing) while the
    trial's array task waits in the queue (held there by `--begin`, so no trainer holds the trial's folder and
    only the cluster can say it is alive); the same command run again finds the task alive, waits for it
    instead of resubmitting, and records the trial from the task's own files."""
    from opt_train.sweep.slurm import TASKS_FOLDER

    out = tmp_path / "slurm"
    argv = ["sweep", "--config", CONFIGS / "default.yaml", *SHORT, "--grid", "optimizer_params.learning_rate=0.1",
            "--out", out, "--launcher", "slurm", "--sbatch-args", "--time=10 --begin=now+15"]
    environ = {**unlaunched_environ(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO)),
               "SLURM_CONF": slurm_cluster.environ["SLURM_CONF"]}
    driver = subprocess.Popen([sys.executable, "-m", "opt_train", *map(str, argv)], cwd=REPO, env=environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, pending = time.monotonic() + TIMEOUT_SECONDS, []
        while time.monotonic() < deadline and not pending and driver.poll() is None:
            states = slurm_cluster.run("squeue", "-h", "-r", "-o", "%i %T", check=False).stdout.split("\n")
            pending = [line.split()[0] for line in states if line.endswith(" PENDING")]
            time.sleep(0.2)
        assert pending, "the trial's array task was never queued"
    finally:
        driver.kill()
        driver.wait()
    assert pending[0] in slurm_cluster.run("squeue", "-h", "-r", "-o", "%i", check=False).stdout.split()

    again = _sweep(slurm_cluster, *argv[1:])
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(list((out / TASKS_FOLDER).glob("*.sh"))) == 1  # waited for the task; submitted nothing
    [trial] = sorted(out.glob("trial-*"))
    assert read_json(trial / "trial.json")["status"] == "ok"
    assert read_json(trial / "final_metrics.json")["global_step"] == 30
    records = [json.loads(line) for line in (trial / "metrics.jsonl").read_text().splitlines()]
    assert not any("interrupted" in record for record in records)  # trained once, by that task, to the end
    assert len(_rows(again.stdout)) == 1
