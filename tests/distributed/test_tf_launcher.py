"""`opt-train train --np N` with tf.distribute workers: one TF_CONFIG each, and the Horovod launcher's guarantees.

The workers are real processes (tests/distributed/tf_worker.py, no TensorFlow) that
check their TF_CONFIG, meet each other on its ports, fail, get killed or stopped, or
count the signals they receive. The CLI tests run the real `python -m opt_train train
--np 2` launcher; `launched/sitecustomize.py` puts the stand-in in place of each
worker it starts (the tf.distribute backend itself is tested with the training tests).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opt_train import trial
from opt_train.distributed import launcher as launcher_module
from opt_train.distributed.launcher import Launcher
from opt_train.distributed.worker_process import process_state
from opt_train.distributed.tf_config_plan import TFConfigPlan
from tests.processes import needs_horovod
from tests.support import REPO, unlaunched_environ

HERE = Path(__file__).parent
WORKER = HERE / "tf_worker.py"
ENV = unlaunched_environ()
WAIT_SECONDS = 120


def records(outdir, count):
    """Each started worker's record (pid, argv, TF_CONFIG), waiting until all `count` wrote theirs."""
    deadline = time.monotonic() + WAIT_SECONDS
    paths = [Path(outdir) / f"worker{index}.json" for index in range(count)]
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise AssertionError(f"workers did not start: {[p.name for p in paths if not p.exists()]}")
        time.sleep(0.05)
    return [json.loads(path.read_text()) for path in paths]


def _alive(pid):
    return process_state(pid) not in (None, "Z")


# -- the launcher, backend tf, on real worker processes ----------------------------------------------


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    """A launcher in this process gives the other workers 0.5 s, not 5, to end on their own after one
    failed: the stand-ins sleep until ended (`wait`), so the grace is only waiting here."""
    monkeypatch.setattr(launcher_module, "GRACE_SECONDS", 0.5)


def launch(plan, tmp_path, num_proc=2, rank_timeout=60.0, during=None):
    command = [sys.executable, str(WORKER), str(tmp_path), json.dumps({str(k): v for k, v in plan.items()})]
    out, err = io.StringIO(), io.StringIO()
    launcher = Launcher(command, num_proc, rank_timeout=rank_timeout, out=out, err=err, env=ENV, backend="tf")
    if during:
        threading.Thread(target=during, daemon=True).start()
    code, message = launcher.run()
    assert all(worker.code is not None for worker in launcher.ranks)  # none left behind
    return code, message, out.getvalue(), err.getvalue(), launcher


def test_each_worker_gets_its_own_tf_config_and_they_meet_on_its_ports(tmp_path):
    code, message, out, _, _ = launch({}, tmp_path, num_proc=3)
    assert (code, message) == (0, None), out
    seen = records(tmp_path, 3)
    workers = seen[0]["tf_config"]["cluster"]["worker"]
    assert len(set(workers)) == 3 and all(address.startswith("localhost:") for address in workers)
    for index, record in enumerate(seen):
        assert record["tf_config"] == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    assert "[worker 1] worker 1 met the others" in out and "[worker 2] worker 2 met the others" in out
    assert "worker 0 met the others" in out.splitlines()  # worker 0's output unprefixed


def test_a_failed_worker_is_named_with_its_last_error_line(tmp_path):
    code, message, out, err, _ = launch({0: "wait", 1: "fail"}, tmp_path)
    assert code == 1
    assert message == "worker 1 failed (exit code 1): Error: worker-specific trouble"
    assert "[worker 1] some progress" in out and "[worker 1] Error: worker-specific trouble" in err


def test_a_worker_killed_from_outside_is_named_and_the_others_are_ended(tmp_path):
    def kill_worker_1():
        os.kill(records(tmp_path, 2)[1]["pid"], signal.SIGKILL)

    code, message, _, _, launcher = launch({0: "wait", 1: "wait"}, tmp_path, during=kill_worker_1)
    assert (code, message) == (1, "worker 1 failed (killed by SIGKILL)")
    # Worker 0 would have slept 600 s: the launcher ended it.
    assert launcher.ranks[0].code == -signal.SIGTERM


def test_a_stopped_worker_is_named_as_hung_after_rank_timeout_and_the_job_ends(tmp_path):
    def stop_worker_1():
        os.kill(records(tmp_path, 2)[1]["pid"], signal.SIGSTOP)

    code, message, _, _, launcher = launch({0: "wait", 1: "wait"}, tmp_path, rank_timeout=1, during=stop_worker_1)
    assert code == 1
    assert message == ("worker 1 hung: stopped, not answering the other workers (rank_timeout_secs: 1 s); "
                       "the job was ended")
    assert launcher.ranks[1].code == -signal.SIGKILL  # a stopped process takes no SIGTERM
    assert not any(_alive(worker.process.pid) for worker in launcher.ranks)


# Each case waits a second for a second signal that must not come: SIGINT's with -m slow.
@pytest.mark.parametrize("number, code", [(signal.SIGTERM, 143),
                                          pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)])
def test_a_signal_to_the_launcher_reaches_every_worker_once(tmp_path, number, code):
    def signal_when_started():
        records(tmp_path, 2)
        os.kill(os.getpid(), number)

    got, message, _, _, _ = launch({0: "count_signals", 1: "count_signals"}, tmp_path, during=signal_when_started)
    assert (got, message) == (code, None)
    assert [(tmp_path / f"signals{index}").read_text() for index in (0, 1)] == ["1", "1"]


@pytest.mark.parametrize("plan, expected", [
    ({0: "exit:2", 1: "exit:2"}, (2, None)),  # every worker refused the config and said why
    ({0: "exit:3", 1: "exit:3"}, (3, None)),  # a sweep's pruner stopped the trial
    ({0: "exit:143", 1: "exit:143"}, (143, None)),
    ({0: "wait", 1: "exit:134"}, (1, "worker 1 failed (exit code 134)")),
    ({0: "exit:2", 1: "wait"}, (2, "worker 0 failed (exit code 2)")),
])
def test_exit_codes_are_passed_on_as_for_horovod_ranks(tmp_path, plan, expected):
    code, message, _, _, _ = launch(plan, tmp_path)
    assert (code, message) == expected


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend"):
        Launcher(["true"], 2, backend="mpi")


def test_tf_config_plan_fills_hosts_in_order_with_free_local_ports():
    plan = TFConfigPlan("localhost:2,127.0.0.1:2", 3)
    configs = [json.loads(env["TF_CONFIG"]) for _, _, env in plan.ranks]
    workers = configs[0]["cluster"]["worker"]
    assert [address.rpartition(":")[0] for address in workers] == ["localhost", "localhost", "127.0.0.1"]
    assert len({address.rpartition(":")[2] for address in workers}) == 3
    assert [local for _, local, _ in plan.ranks] == [True, True, True]
    assert [config["task"]["index"] for config in configs] == [0, 1, 2]


def test_a_remote_host_gets_slurms_port_rule_and_the_local_workers_a_reachable_name():
    import socket

    plan = TFConfigPlan("localhost:1,far-away.invalid:2", 3)
    workers = json.loads(plan.ranks[0][2]["TF_CONFIG"])["cluster"]["worker"]
    assert workers[0].rpartition(":")[0] == socket.gethostname()  # not "localhost": the others must reach it
    assert workers[1:] == ["far-away.invalid:8888", "far-away.invalid:8889"]
    assert [local for _, local, _ in plan.ranks] == [True, False, False]
    assert plan.remote_argv("far-away.invalid", "cd /x ; env A=1 python")[:1] == ["ssh"]


# -- `opt-train train --np N`, the real CLI launcher -------------------------------------------------


def cli_env(outdir, plan=None):
    return {**ENV, "PYTHONPATH": f"{HERE / 'launched'}{os.pathsep}{REPO}", "TF_WORKER_OUTDIR": str(outdir),
            "TF_WORKER_PLAN": json.dumps({str(k): v for k, v in (plan or {}).items()}), "TF_CPP_MIN_LOG_LEVEL": "3"}


def config_file(tmp_path, text=""):
    path = tmp_path / "run.yaml"
    path.write_text(f"max_steps: 10\nlogdir: {tmp_path / 'run'}\nprint_samples_steps: 5\n{text}")
    return path


def np_command(config, *extra):
    return [sys.executable, "-m", "opt_train", "train", "--np", "2", "--config", str(config), *extra]


def run_np(tmp_path, plan=None, config_text="", extra=()):
    config = config_file(tmp_path, config_text)
    job = subprocess.run(np_command(config, *extra), cwd=REPO, env=cli_env(tmp_path, plan), capture_output=True,
                         text=True, timeout=WAIT_SECONDS)
    return job, config


def test_np_starts_tf_workers_of_the_same_command_without_np(tmp_path):
    job, config = run_np(tmp_path, extra=("--set", "random_seed=3"))
    assert job.returncode == 0, job.stdout + job.stderr
    seen = records(tmp_path, 2)
    for index, record in enumerate(seen):
        # No backend in the config: tf workers, told so on their command line.
        assert record["argv"][1:] == ["-m", "opt_train", "train", "--config", str(config), "--set", "random_seed=3",
                                      "--set", "distributed=tf"]
        assert record["tf_config"]["task"]["index"] == index
        assert len(record["tf_config"]["cluster"]["worker"]) == 2
    # The config's notes are shown once, by the launcher (its workers are told OPT_TRAIN_LAUNCHED).
    assert job.stderr.count("print_samples_steps") == 1, job.stderr


def test_np_with_distributed_tf_adds_nothing_to_the_command(tmp_path):
    job, config = run_np(tmp_path, config_text="distributed: tf\nnum_gpus: 2\n")
    assert job.returncode == 0, job.stdout + job.stderr
    assert records(tmp_path, 2)[1]["argv"][1:] == ["-m", "opt_train", "train", "--config", str(config)]


@needs_horovod
@pytest.mark.parametrize("config_text", ["distributed: horovod\n", "use_horovod: true\n"])
def test_np_with_distributed_horovod_starts_horovod_ranks(tmp_path, config_text):
    job, config = run_np(tmp_path, config_text=config_text)
    assert job.returncode == 0, job.stdout + job.stderr
    seen = records(tmp_path, 2)
    assert [(record["horovod_rank"], record["horovod_size"]) for record in seen] == [(0, 2), (1, 2)]
    assert all("tf_config" not in record for record in seen)
    assert seen[1]["argv"][1:] == ["-m", "opt_train", "train", "--config", str(config)]


# Worker 0 fails once worker 1 is gone, as in a collective (it does not sleep through the
# launcher's 5 s grace); worker 1 failed first: it is the one named.
def test_np_names_the_failed_worker_in_its_last_line(tmp_path):
    job, _ = run_np(tmp_path, plan={0: "peer", 1: "fail"})
    assert job.returncode == 1
    assert job.stderr.strip().splitlines()[-1] == "Error: worker 1 failed (exit code 1): Error: worker-specific trouble"
    assert "Traceback" not in job.stdout + job.stderr


# Worker 0 says it lost its peer and ends a second before worker 1 fails: seen to end first, it is
# still not the one named (before, the launcher named the first worker it saw end non-zero).
def test_np_names_the_failed_worker_not_one_that_only_lost_its_peer(tmp_path):
    job, _ = run_np(tmp_path, plan={0: "lost_peer_first", 1: "fail_after:1"})
    assert job.returncode == 1
    assert job.stderr.strip().splitlines()[-1] == "Error: worker 1 failed (exit code 1): Error: worker-specific trouble"


def test_in_a_sweeps_trial_the_failure_record_is_the_launchers_verdict_naming_the_failed_worker(tmp_path):
    """Each worker writes its failure record into the one logdir, and worker 0, which only lost
    its peer, writes last: the launcher's verdict, written once every worker ended, is what the
    sweep reads (before, the trial's reason was "a collective's peer is gone")."""
    logdir = tmp_path / "run"
    env = {**cli_env(tmp_path, {0: "peer", 1: "fail"}), **trial.describe(None, "study", 0, "eval/loss"),
           "TF_WORKER_LOGDIR": str(logdir)}
    job = subprocess.run(np_command(config_file(tmp_path)), cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=WAIT_SECONDS)
    assert job.returncode == 1, job.stdout + job.stderr
    verdict = "worker 1 failed (exit code 1): Error: worker-specific trouble"
    assert job.stderr.strip().splitlines()[-1] == f"Error: {verdict}"
    # The failed worker's own record was overwritten by worker 0's: nothing quoted lends its error.
    assert trial.read_failure(str(logdir)) == {"exit_code": 1, "error": "WorkerFailed", "key": None, "code": None,
                                               "message": verdict}


@pytest.mark.slow  # waits out a rank timeout; the launcher's own is test_a_stopped_worker_is_named_as_hung...
def test_np_hands_rank_timeout_secs_to_the_launcher(tmp_path):
    # Worker 0 fails once the launcher ended the stopped worker 1; the stopped one is named.
    job, _ = run_np(tmp_path, plan={0: "peer", 1: "stop"}, extra=("--set", "rank_timeout_secs=1"))
    assert job.returncode == 1
    assert job.stderr.strip().splitlines()[-1].startswith(
        "Error: worker 1 hung: stopped, not answering the other workers (rank_timeout_secs: 1 s)")


def test_np_checks_the_config_once_before_any_worker_starts(tmp_path):
    job, _ = run_np(tmp_path, config_text="rank_timeout_secs: 0\n")
    assert job.returncode == 2
    assert job.stderr.count("Error") == 1 and "rank_timeout_secs" in job.stderr
    assert not list(tmp_path.glob("worker*.json"))


def test_np_inside_a_worker_of_a_cluster_is_refused(tmp_path):
    config = config_file(tmp_path)
    env = {**cli_env(tmp_path), "TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                                         "task": {"type": "worker", "index": 0}})}
    job = subprocess.run(np_command(config), cwd=REPO, env=env, capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert job.returncode == 2 and "--np inside a worker of a 2-worker job (TF_CONFIG)" in job.stderr
    assert not list(tmp_path.glob("worker*.json"))


@pytest.mark.parametrize("number, code", [(signal.SIGTERM, 143),
                                          pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow)])
def test_a_signal_to_the_np_launcher_reaches_each_worker_once(tmp_path, number, code):
    config = config_file(tmp_path)
    job = subprocess.Popen(np_command(config), cwd=REPO, env=cli_env(tmp_path, {0: "count_signals", 1: "count_signals"}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        records(tmp_path, 2)
        job.send_signal(number)
        out, err = job.communicate(timeout=WAIT_SECONDS)
    finally:
        job.kill()
    assert job.returncode == code, out + err
    assert [(tmp_path / f"signals{index}").read_text() for index in (0, 1)] == ["1", "1"]
    assert "Error" not in err


def test_the_workers_do_not_outlive_a_killed_np_launcher(tmp_path):
    config = config_file(tmp_path)
    job = subprocess.Popen(np_command(config), cwd=REPO, env=cli_env(tmp_path, {0: "wait", 1: "wait"}),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = [record["pid"] for record in records(tmp_path, 2)]
        assert all(_alive(pid) for pid in pids)
        job.kill()  # SIGKILL: nothing is passed on; the kernel's PDEATHSIG ends the workers
        job.wait()
        deadline = time.monotonic() + WAIT_SECONDS
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        job.kill()
    assert not any(_alive(pid) for pid in pids), "a worker outlived its launcher"


def test_a_launched_worker_does_not_repeat_the_notes(tmp_path):
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    config = config_file(tmp_path)
    shown = CliRunner().invoke(group, ["validate", "--config", str(config)], env={"OPT_TRAIN_LAUNCHED": None})
    quiet = CliRunner().invoke(group, ["validate", "--config", str(config)], env={"OPT_TRAIN_LAUNCHED": "1"})
    assert shown.exit_code == quiet.exit_code == 0
    assert "note:" in shown.output and "print_samples_steps" in shown.output
    assert "note:" not in quiet.output
