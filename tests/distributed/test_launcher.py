"""`opt-train train --np N`: the config checked once, ranks' exit codes passed on, a hung or dead rank named."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opt_train.distributed.launcher import exit_code
from opt_train.distributed.names import is_lost_peer_line
from opt_train.distributed.worker_process import process_state
from tests.processes import horovodrun_argv, needs_horovod
from tests.support import CONFIGS, REPO, rank_pid, read_json, read_jsonl, run_python

horovod = needs_horovod
JOB_TIMEOUT_SECONDS = 600
RANK_TIMEOUT = 5
# From the signal to the launcher's exit: the rank timeout, the healthy rank's own exit
# (TensorFlow teardown on a loaded 2-core host took up to ~5 s) and the launcher's grace.
END_BOUND = RANK_TIMEOUT + 25
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))


def train_argv(logdir, *extra):
    return [
        sys.executable, "-m", "opt_train", "train", "--np", "2", "--config", str(CONFIGS / "horovod.yaml"),
        "--set", "print_loss_steps=5", "--set", "eval_steps=null", "--set", f"logdir={logdir}", *extra,
    ]


# -- checks made once, before any rank starts ------------------------------------------


def test_np_with_horovod_not_installed_is_refused_naming_the_key_before_any_rank(cli, tmp_path, monkeypatch):
    # Without use_horovod, --np starts tf.distribute workers (tests/distributed/test_tf_launcher.py).
    monkeypatch.setitem(sys.modules, "horovod", None)  # as on a machine without Horovod
    result = cli("train", "--np", 2, "--config", CONFIGS / "horovod.yaml", "--set", f"logdir={tmp_path / 'run'}")
    assert result.exit_code == 2
    assert "use_horovod" in result.output and "install_horovod.sh" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_a_bad_config_is_one_error_exit_2_before_any_rank(cli, tmp_path):
    result = cli("train", "--np", 2, "--config", CONFIGS / "horovod.yaml",
                 "--set", "rank_timeout_secs=0", "--set", f"logdir={tmp_path / 'run'}")
    assert result.exit_code == 2
    assert "rank_timeout_secs" in result.output
    assert result.output.count("Error") == 1  # checked once, not once per rank
    assert not (tmp_path / "run").exists()


def test_hosts_without_np_is_a_usage_error(cli):
    result = cli("train", "--hosts", "localhost:2", "--config", CONFIGS / "horovod.yaml")
    assert result.exit_code == 2 and "--np" in result.output


@pytest.mark.parametrize("hosts, words", [("localhost", "not HOST:SLOTS"), ("localhost:0", "not HOST:SLOTS"),
                                          ("localhost:1", "1 slots for --np 2")])
def test_bad_hosts_are_one_line_exit_2_before_any_rank(cli, tmp_path, hosts, words):
    result = cli("train", "--np", 2, "--hosts", hosts, "--config", CONFIGS / "horovod.yaml",
                 "--set", f"logdir={tmp_path / 'run'}")
    assert result.exit_code == 2 and "--hosts" in result.output and words in result.output
    assert not (tmp_path / "run").exists()


def test_rank_timeout_secs_defaults_to_60_and_is_not_run_defining(cli):
    from opt_train.config import load_config
    from opt_train.config.schema import NOT_RUN_KEYS

    assert load_config([str(CONFIGS / "horovod.yaml")]).rank_timeout_secs == 60
    assert "rank_timeout_secs" in NOT_RUN_KEYS


def test_process_state_reads_stopped_like_ps():
    child = subprocess.Popen(["sleep", "60"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        ps = subprocess.run(["ps", "-o", "stat=", "-p", str(child.pid)], capture_output=True, text=True)
        assert process_state(child.pid) == ps.stdout.strip()[:1] == "T"
        os.kill(child.pid, signal.SIGCONT)
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) is None


@pytest.mark.parametrize("code, expected", [(0, 0), (1, 1), (2, 2), (3, 3), (130, 130), (143, 143), (-9, 1), (134, 1)])
def test_exit_codes_passed_on(code, expected):
    assert exit_code(code) == expected


# What a rank's command line does once its command ended, in a fresh process without TensorFlow:
# stand-ins for TensorFlow (loaded) and Horovod (initialized: its init registers its shutdown as an
# exit hook, as `horovod.common.basics.HorovodBasics.init` does), an object that writes down the
# interpreter's teardown if it finalizes it, then `opt-train --help` as a rank.
RANK_EXIT = """
import atexit, os, sys, types
os.environ["HOROVOD_RANK"] = "1"
sys.modules["tensorflow"] = types.ModuleType("tensorflow")
atexit.register(lambda: print("horovod shut down", flush=True))
class Finalized:
    def __del__(self):
        print("interpreter teardown", flush=True)
held = Finalized()
sys.argv = ["opt-train", "--help"]
from opt_train.cli.main import main
main()
"""


def test_a_horovod_rank_shuts_horovod_down_and_ends_without_the_interpreters_teardown():
    # The teardown of TensorFlow took a rank seconds after `done:` (up to ~15 s on a loaded host).
    job = run_python(RANK_EXIT)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.splitlines()[-1] == "horovod shut down", job.stdout[-3000:]
    assert "interpreter teardown" not in job.stdout


# -- real ranks --------------------------------------------------------------------------


def _alive(pid):
    return process_state(pid) not in (None, "Z")  # an orphan's zombie may wait for a reaper


def _start(logdir, *extra):
    return subprocess.Popen(train_argv(logdir, *extra), cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for_training(job, logdir, step=10):
    records = logdir / "metrics.jsonl"
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while time.monotonic() < deadline and job.poll() is None:
        if records.exists() and any(r.get("step", 0) >= step for r in read_jsonl(records)):
            return
        time.sleep(0.2)
    raise AssertionError("training did not start: " + (job.communicate()[0] or "")[-3000:])


# A dead rank (SIGKILL) is this hung one's end too (the launcher kills it after the timeout, and
# rank 0 then meets a lost peer); the launcher's verdict on a killed worker is the same Launcher's
# on real tf.distribute workers (tests/e2e/test_tf_launch.py, the killed-and-run-again test) and
# on stand-in ranks (TestVerdicts.test_a_killed_rank_is_named_and_the_others_are_ended).
@pytest.mark.slow
@horovod
def test_a_hung_rank_ends_the_job_within_the_timeout_naming_it(tmp_path):
    logdir = tmp_path / "run"
    job = _start(logdir, "--set", "max_steps=100000", "--set", "save_checkpoint_steps=null",
                 "--set", f"rank_timeout_secs={RANK_TIMEOUT}")
    try:
        _wait_for_training(job, logdir)
        pid = rank_pid(1, str(logdir))
        assert pid is not None, "rank 1's process not found"
        os.kill(pid, signal.SIGSTOP)
        signalled = time.monotonic()
        output, _ = job.communicate(timeout=JOB_TIMEOUT_SECONDS)
        ended = time.monotonic()
    finally:
        job.kill()
    assert job.returncode == 1, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "rank 1 hung" in last, output[-3000:]
    assert "Traceback" not in output, output[-6000:]
    # Before, a stopped rank ended the job after Gloo's fixed 30 s (~42 s in all), naming rank 0.
    assert ended - signalled < END_BOUND, output[-3000:]


# SIGTERM to the launcher: the same Launcher passes it to each worker once (TestVerdicts, on
# stand-in ranks) and exits 143 with a checkpoint at the stop, shown on real tf.distribute workers
# (tests/e2e/test_tf_launch.py); real Horovod ranks stopping together on it with a checkpoint there:
# tests/e2e/test_horovod_runs.py (a SIGTERM to one rank).


# -- under horovodrun --------------------------------------------------------------------


@pytest.mark.slow
@horovod
def test_ranks_given_different_configs_stop_at_start_naming_the_key(tmp_path):
    logdir = tmp_path / "run"
    rank_command = shlex.join([
        sys.executable, "-m", "opt_train", "train", "--config", str(CONFIGS / "horovod.yaml"),
        "--set", "max_steps=5", "--set", f"logdir={logdir}",
    ]) + ' --set "random_seed=$HOROVOD_RANK"'
    job = subprocess.run(horovodrun_argv("sh", "-c", rank_command), cwd=REPO, env=ENV, capture_output=True,
                         text=True, timeout=JOB_TIMEOUT_SECONDS)
    output = job.stdout + job.stderr
    assert job.returncode != 0
    refusals = [line for line in output.splitlines() if "ranks were given different configs" in line]
    assert len(refusals) == 2, output[-3000:]  # each rank says it, with its own value
    assert all("random_seed" in line and "logdir" not in line for line in refusals)
    assert any("random_seed 1 on rank 1" in line for line in refusals), output[-3000:]
    assert not (logdir / "checkpoints").exists()


@pytest.mark.slow
@horovod
def test_under_horovodrun_a_stopped_rank_ends_the_job_after_rank_timeout_secs(tmp_path):
    logdir = tmp_path / "run"
    job = subprocess.Popen(
        horovodrun_argv(
            sys.executable, "-m", "opt_train", "train", "--config", str(CONFIGS / "horovod.yaml"),
            "--set", "max_steps=100000", "--set", "print_loss_steps=5", "--set", "eval_steps=null",
            "--set", "save_checkpoint_steps=null", "--set", f"rank_timeout_secs={RANK_TIMEOUT}",
            "--set", f"logdir={logdir}",
            # Rank 1 is stopped: horovodrun's SIGTERM to it is only waited on (10 s) before its SIGKILL.
            grace_seconds=0.5),
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        _wait_for_training(job, logdir)
        pid = rank_pid(1, str(logdir))
        assert pid is not None, "rank 1's process not found"
        os.kill(pid, signal.SIGSTOP)
        signalled = time.monotonic()
        output, _ = job.communicate(timeout=JOB_TIMEOUT_SECONDS)
        ended = time.monotonic()
    finally:
        job.kill()
    assert job.returncode != 0
    # horovodrun cannot tell which rank hung; rank 0 says one did not answer in time, or, when the
    # launcher's kill of the stopped rank came before Gloo's timeout, that its connection broke.
    assert (f"another rank did not answer within {RANK_TIMEOUT} s" in output
            or "another rank failed or was stopped" in output), output[-3000:]
    assert ended - signalled < END_BOUND, output[-3000:]


@pytest.mark.slow
@horovod
def test_the_ranks_do_not_outlive_a_killed_launcher(tmp_path):
    # No output after the start line, so no rank learns of the launcher's death from a broken pipe.
    logdir = tmp_path / "run"
    job = _start(logdir, "--set", "max_steps=10000000", "--set", "print_loss_steps=10000000",
                 "--set", "save_checkpoint_steps=null", "--set", "save_summaries_steps=null")
    try:
        for line in job.stdout:
            if line.startswith("training "):
                break
        ranks = [rank_pid(rank, str(logdir)) for rank in (0, 1)]
        assert None not in ranks
        time.sleep(1)  # into the first update (a signal before it is taken at the same boundary)
        job.kill()
        job.wait()
        deadline = time.monotonic() + 300  # far less than the 10^7 updates asked for
        while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        job.kill()
    assert not any(_alive(pid) for pid in ranks), "a rank outlived its launcher"


# -- the launcher's verdicts, on real child processes (no TensorFlow) ------------------------

# Each rank runs this with its HOROVOD_RANK; `plan` maps a rank to what it does.
RANK_SCRIPT = """
import os, signal, sys, time
rank = int(os.environ["HOROVOD_RANK"])
assert os.environ["HOROVOD_SIZE"] == "2" and os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"]
action = {plan!r}.get(rank, "sleep")
if action == "fail":
    print("some progress", flush=True)
    print("Error: rank-specific trouble", file=sys.stderr, flush=True)
    sys.exit(1)
if action == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if action == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
if action == "interrupted":
    sys.exit(143)
if action == "count_signals":
    seen = []
    signal.signal(signal.SIGTERM, lambda n, f: seen.append(n))
    open(sys.argv[1] + f".{{rank}}", "w").write("started")
    while not seen:
        time.sleep(0.05)
    time.sleep(1)  # a second signal would arrive meanwhile
    open(sys.argv[1] + f".{{rank}}", "w").write(str(len(seen)))
    sys.exit(143)
time.sleep(60)
"""


@horovod
class TestVerdicts:
    """The launcher's exit code and last line for what real ranks do."""

    @pytest.fixture(autouse=True)
    def short_grace(self, monkeypatch):
        """The launcher gives the other ranks 0.5 s, not 5, to end on their own after one failed:
        these sleep until ended, so the grace is only waiting here."""
        from opt_train.distributed import launcher

        monkeypatch.setattr(launcher, "GRACE_SECONDS", 0.5)

    def run(self, plan, tmp_path, rank_timeout=60.0, during=None):
        import io

        from opt_train.distributed.launcher import Launcher

        command = [sys.executable, "-c", RANK_SCRIPT.format(plan=plan), str(tmp_path / "signals")]
        out, err = io.StringIO(), io.StringIO()
        launcher = Launcher(command, 2, rank_timeout=rank_timeout, out=out, err=err)
        if during:
            import threading

            threading.Thread(target=during, daemon=True).start()
        code, message = launcher.run()
        assert all(rank.code is not None for rank in launcher.ranks)
        return code, message, out.getvalue(), err.getvalue()

    def test_a_failed_rank_is_named_with_its_last_error_line(self, tmp_path):
        code, message, out, err = self.run({1: "fail"}, tmp_path)
        assert code == 1
        assert message == "rank 1 failed (exit code 1): Error: rank-specific trouble"
        assert "[rank 1] some progress" in out and "[rank 1] Error: rank-specific trouble" in err

    def test_a_killed_rank_is_named_and_the_others_are_ended(self, tmp_path):
        code, message, _, _ = self.run({1: "kill"}, tmp_path)
        assert (code, message) == (1, "rank 1 failed (killed by SIGKILL)")

    # Waiting out a rank timeout, and a second for a second signal: the same Launcher's with
    # backend tf are in the fast subset (test_tf_launcher.py), these two with -m slow.
    @pytest.mark.slow
    def test_a_stopped_rank_is_named_as_hung_after_rank_timeout(self, tmp_path):
        code, message, _, _ = self.run({1: "stop"}, tmp_path, rank_timeout=1)
        assert code == 1 and message.startswith("rank 1 hung: stopped") and "1 s" in message

    def test_ranks_that_stopped_on_an_interrupt_pass_their_code_on_without_blame(self, tmp_path):
        code, message, _, _ = self.run({0: "interrupted", 1: "interrupted"}, tmp_path)
        assert (code, message) == (143, None)

    @pytest.mark.slow
    def test_sigterm_to_the_launcher_reaches_every_rank_once(self, tmp_path):
        marker = tmp_path / "signals"

        def send_when_started():
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all((tmp_path / f"signals.{rank}").exists() for rank in (0, 1)):
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                time.sleep(0.05)

        code, message, _, _ = self.run({0: "count_signals", 1: "count_signals"}, tmp_path,
                                       during=send_when_started)
        assert (code, message) == (143, None)
        assert [Path(f"{marker}.{rank}").read_text() for rank in (0, 1)] == ["1", "1"]


# One launch for two claims: `--np 2` trains one run that rank 0 alone writes and reports, and a
# sweep with --np runs its trial as that command (`opt-train train --np 2`, its output in train.log).
@pytest.mark.slow
@horovod
def test_a_sweep_with_np_runs_its_trials_through_the_launcher_as_one_run_written_by_rank_0(tmp_path):
    out = tmp_path / "sweep"
    job = subprocess.run(
        [sys.executable, "-m", "opt_train", "sweep", "-c", str(CONFIGS / "horovod.yaml"), "--np", "2",
         "--grid", "optimizer_params.learning_rate=0.05", "--set", "max_steps=20", "--set", "print_loss_steps=5",
         "--set", "eval_steps=10", "--set", "save_checkpoint_steps=10", "--metric", "eval/accuracy",
         "--mode", "max", "--out", str(out)],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS,
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    [record] = read_jsonl(out / "results.jsonl")
    assert record["status"] == "ok", record
    logdir = Path(record["logdir"])
    assert read_json(logdir / "final_metrics.json")["global_step"] == 20
    assert [r["step"] for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r] == [5, 10, 15, 20]
    log = (logdir / "train.log").read_text()
    assert log.startswith("$ ") and " train --np 2 " in log.splitlines()[0]
    assert "global batch 64" in log
    assert "[rank 1] step" not in log  # progress from rank 0 alone


@pytest.mark.parametrize("message, lost", [
    ("Horovod has been shut down. This was caused by an exception on one of the ranks", True),
    # Gloo's transport errors: which one the healthy rank sees depends on whether the
    # launcher's SIGKILL of a stopped rank or Gloo's own timeout comes first.
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Connection closed by peer [127.0.0.1]:20581", True),
    ("Read error [127.0.0.1]:62245: Connection reset by peer", True),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv", True),
    ("Incompatible shapes: [32,10] vs. [16,10]", False),
])
def test_a_collective_error_from_a_lost_peer_is_recognised(message, lost):
    from opt_train.distributed.horovod import is_lost_peer

    assert is_lost_peer(RuntimeError(message)) is lost


@pytest.mark.parametrize("message, says_timeout", [
    ("Horovod has been shut down. This was caused by an exception on one of the ranks", False),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:589] Connection closed by peer [127.0.0.1]:20581", False),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv", True),
])
def test_the_lost_peer_line_claims_a_timeout_only_when_gloo_timed_out(message, says_timeout, monkeypatch):
    """Rank 0 said "did not answer within 60 s" 1.6 s after its peer died: only a timeout may say so."""
    from opt_train.distributed.horovod import HorovodBackend

    monkeypatch.setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "60")
    backend = object.__new__(HorovodBackend)
    backend.__dict__["rank"] = 0
    line = backend.lost_peer(RuntimeError(message))
    assert line.startswith("rank 0: another rank ")
    assert ("did not answer within 60 s" in line) is says_timeout
    assert is_lost_peer_line(f"Error: {line}")  # the launcher blames this rank last


@pytest.mark.parametrize("error_class, says_timeout", [
    ("UnavailableError", False), ("CancelledError", False), ("AbortedError", False), ("DeadlineExceededError", True),
])
def test_a_tf_worker_claims_a_timeout_only_when_its_collective_timed_out(error_class, says_timeout):
    """Worker 0 said "did not answer within 60 s" when its peer had just exited ("Socket closed")."""
    import tensorflow as tf

    from opt_train.distributed.mesh import MeshBackend
    from opt_train.distributed.tfdist import StrategyBackend

    backend = object.__new__(StrategyBackend)
    backend.__dict__.update(_workers=2, _worker=0, rank_timeout=60)
    line = backend.lost_peer(getattr(tf.errors, error_class)(None, None, "Socket closed"))
    assert line.startswith("worker 0: another worker ")
    assert ("did not answer within 60 s" in line) is says_timeout
    assert backend.lost_peer(tf.errors.InvalidArgumentError(None, None, "Incompatible shapes")) is None
    mesh = object.__new__(MeshBackend)
    mesh.__dict__.update(_workers=2, _worker=0)
    mesh_line = mesh.lost_peer(getattr(tf.errors, error_class)(None, None, "Socket closed"))
    # The launcher blames a worker that says so last; a worker's own failure is not such a line.
    assert is_lost_peer_line(f"Error: {line}") and is_lost_peer_line(mesh_line)
    assert not is_lost_peer_line("Error: worker 0: another error in the model")
