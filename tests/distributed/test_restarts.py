"""`opt-train train --np N --max-restarts K`: a failed job is relaunched whole, with fresh ports and the attempt
in OPT_TRAIN_RESTART_COUNT, up to K times; interrupts and refused configs are not restarted.

The workers are the launcher tests' stand-ins (tests/distributed/tf_worker.py, real processes
without TensorFlow): what is tested here is the supervision. That a restarted training job
equals an uninterrupted one is tests/e2e/test_restart.py.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from opt_train.distributed import launcher as launcher_module
from opt_train.distributed.launcher import Launcher
from tests.distributed.test_tf_launcher import WORKER, cli_env, config_file, records
from tests.processes import needs_horovod
from tests.support import REPO, unlaunched_environ

ENV = unlaunched_environ()


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    monkeypatch.setattr(launcher_module, "GRACE_SECONDS", 0.5)


def launch(plan, tmp_path, max_restarts, during=None, backend="tf", rank_timeout=60.0):
    command = [sys.executable, str(WORKER), str(tmp_path), json.dumps({str(k): v for k, v in plan.items()})]
    out, err = io.StringIO(), io.StringIO()
    launcher = Launcher(command, 2, out=out, err=err, env=ENV, backend=backend, max_restarts=max_restarts,
                        rank_timeout=rank_timeout)
    if during:
        threading.Thread(target=during, daemon=True).start()
    code, message = launcher.run()
    assert all(worker.code is not None for worker in launcher.ranks)
    return code, message, err.getvalue()


def attempt(tmp_path, index, count):
    path = tmp_path / f"worker{index}-attempt{count}.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_a_worker_killed_twice_is_restarted_twice_with_fresh_ports_and_the_job_succeeds(tmp_path):
    code, message, err = launch({1: "kill_before:2"}, tmp_path, max_restarts=2)
    assert (code, message) == (0, None), err
    lines = [line for line in err.splitlines() if line.startswith("restart ")]
    assert lines == [f"restart {n} of 2: worker 1 failed (killed by SIGKILL); every worker was stopped, "
                     "the job starts again from the newest checkpoint" for n in (1, 2)], err
    for index in (0, 1):
        assert [attempt(tmp_path, index, n)["restart_count"] for n in range(3)] == [0, 1, 2]
    assert attempt(tmp_path, 0, 3) is None
    # Each attempt's TF_CONFIG is written anew: ports picked free for it, the same cluster in both workers.
    clusters = [attempt(tmp_path, 0, n)["tf_config"]["cluster"]["worker"] for n in range(3)]
    assert all(attempt(tmp_path, 1, n)["tf_config"]["cluster"]["worker"] == clusters[n] for n in range(3))
    assert len({tuple(cluster) for cluster in clusters}) > 1, clusters
    # The worker killed at each attempt is gone; the one left waiting was ended, not left behind.
    pids = {attempt(tmp_path, index, n)["pid"] for index in (0, 1) for n in range(3)}
    assert len(pids) == 6


def test_a_hung_worker_is_restarted_too(tmp_path):
    code, message, err = launch({1: "stop_before:1"}, tmp_path, max_restarts=1, rank_timeout=1.0)
    assert (code, message) == (0, None), err
    assert "restart 1 of 1: worker 1 hung: stopped, not answering the other workers" in err, err


@needs_horovod
def test_horovod_ranks_are_restarted_around_a_new_rendezvous(tmp_path):
    code, message, err = launch({1: "kill_before:1"}, tmp_path, max_restarts=1, backend="horovod")
    assert (code, message) == (0, None), err
    assert "restart 1 of 1: rank 1 failed (killed by SIGKILL); every rank was stopped" in err, err
    first, second = (attempt(tmp_path, 0, n) for n in (0, 1))
    assert (first["restart_count"], second["restart_count"]) == (0, 1)
    assert first["rendezvous_port"] and first["rendezvous_port"] != second["rendezvous_port"]


def test_restarts_exhausted_end_with_the_line_naming_the_worker(tmp_path):
    code, message, err = launch({1: "kill_before:3"}, tmp_path, max_restarts=2)
    assert code == 1
    assert message.startswith("worker 1 failed (killed by SIGKILL)") and "restarted 2 times" in message, message
    assert err.count("restart ") == 2 and attempt(tmp_path, 1, 3) is None


def test_no_restarts_by_default(tmp_path):
    code, message, err = launch({1: "kill_before:1"}, tmp_path, max_restarts=0)
    assert (code, message) == (1, "worker 1 failed (killed by SIGKILL)") and "restart" not in err
    assert attempt(tmp_path, 0, 1) is None


@pytest.mark.parametrize("number, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_launcher_ends_every_worker_without_a_restart(tmp_path, number, code):
    def signal_when_started():
        records(tmp_path, 2)
        os.kill(os.getpid(), number)

    got, message, err = launch({0: "count_signals", 1: "count_signals"}, tmp_path, max_restarts=2,
                               during=signal_when_started)
    assert (got, message) == (code, None) and "restart" not in err
    assert [(tmp_path / f"signals{index}").read_text() for index in (0, 1)] == ["1", "1"]
    assert attempt(tmp_path, 0, 1) is None and attempt(tmp_path, 1, 1) is None


def test_a_refused_config_is_not_restarted(tmp_path):
    code, message, err = launch({0: "exit:2", 1: "wait"}, tmp_path, max_restarts=2)
    assert (code, message) == (2, "worker 0 failed (exit code 2)") and "restart" not in err


@pytest.mark.slow  # 14 s: two launches of the real CLI
def test_the_cli_relaunches_and_ctrl_c_to_it_ends_all_without_a_restart(tmp_path):
    config = config_file(tmp_path)
    argv = [sys.executable, "-m", "opt_train", "train", "--np", "2", "--max-restarts", "2", "--config", str(config)]
    job = subprocess.run(argv, cwd=REPO, env=cli_env(tmp_path, {1: "kill_before:2"}), capture_output=True,
                         text=True, timeout=300)
    assert job.returncode == 0, job.stderr
    assert job.stderr.count("restart ") == 2 and "Error" not in job.stderr, job.stderr
    assert [attempt(tmp_path, 1, n)["restart_count"] for n in range(3)] == [0, 1, 2]

    waiting = tmp_path / "waiting"
    waiting.mkdir()
    job = subprocess.Popen(argv, cwd=REPO, env=cli_env(waiting, {0: "count_signals", 1: "count_signals"}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        records(waiting, 2)
        job.send_signal(signal.SIGINT)
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == 130 and "restart" not in stderr, stderr
    assert attempt(waiting, 0, 1) is None and attempt(waiting, 1, 1) is None


@pytest.mark.parametrize("args, words", [
    (["--np", "2", "--max-restarts", "-1"], "--max-restarts: '-1' is not a whole number >= 0"),
    (["--np", "2", "--max-restarts", "two"], "--max-restarts: 'two' is not a whole number >= 0"),
    (["--max-restarts", "2"], "--max-restarts needs --np N"),
    (["--np", "2", "--max-restarts", "2", "--no-resume"], "--max-restarts cannot be combined with --no-resume"),
])
def test_bad_max_restarts_is_one_line_exit_2(tmp_path, args, words):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    result = CliRunner().invoke(cli, ["train", "--config", str(config_file(tmp_path)), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {words}"), result.stderr
    assert not (tmp_path / "run").exists()

