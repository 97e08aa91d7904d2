"""Dead trials re-queued: a sweep worker SIGKILLed with its trial stops sending heartbeats; once the study holds the
trial stale (Optuna's heartbeat, twice --heartbeat-secs), the same sweep run again fails it, queues it again with its
folder and resumes it from its checkpoint, at most --max-trial-retries times, then records it failed with the reason.

The worker that dies is a real sweep process (SIGKILL); the run after it is the same sweep in the test's process,
on real SQLite and PostgreSQL studies; their trainer is a stand-in that checkpoints its step;
test_heartbeat_e2e_... runs the real trainer, and compares with an uninterrupted real trial that also serves
the real trial on a GPU this machine lacks (test_devices.py's, moved here to share it).
"""

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from unittest import mock

import pytest

from tests.support import CONFIGS, REPO, read_json, read_jsonl

WAIT_SECONDS = 120

# Counts steps 1..40 into logdir/ckpt and resumes from it; a first attempt (no checkpoint yet) stops at step 10 and
# waits there to be killed, or until the file RELEASE_FILE names exists. Its figures depend on the learning rate
# alone: any attempt that finishes reports them.
STEPPING_TRAINER = """
import json, os, sys, time
sets = dict(a.split("=", 1) for a in sys.argv[sys.argv.index("train") + 1:] if "=" in a)
logdir, lr = sets["logdir"], float(sets["optimizer_params.learning_rate"])
os.makedirs(logdir, exist_ok=True)
checkpoint = os.path.join(logdir, "ckpt")
start = int(open(checkpoint).read()) if os.path.exists(checkpoint) else 0
if start:
    print("resumed from step", start, flush=True)
for step in range(start + 1, 41):
    open(checkpoint + ".tmp", "w").write(str(step))
    os.replace(checkpoint + ".tmp", checkpoint)
    if step == 10 and not start:
        deadline = time.monotonic() + 600
        while not os.path.exists(os.environ["RELEASE_FILE"]) and time.monotonic() < deadline:
            time.sleep(0.05)
json.dump({"eval/accuracy": 1 - lr / 1000, "global_step": 40}, open(os.path.join(logdir, "final_metrics.json"), "w"))
"""

# A sweep worker in its own process: argv script config out rates heartbeat_secs max_retries [storage study].
WORKER = """
import sys
from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from tests.sweep.fake_plan import running

script, config, out, rates, beat, retries, *study = sys.argv[1:]

storage, name = study or (None, None)
options = SweepOptions(grids=("optimizer_params.learning_rate=" + rates,), metric="eval/accuracy",
                       storage=storage, study=name)
plan = plan_sweep([config], [], load_config([config]), options, out)
result = run_sweep(running(plan, script), 1, report=lambda text: print(text, flush=True),
                   heartbeat_secs=int(beat), max_trial_retries=int(retries))
print(result.summary, flush=True)
"""


def start_worker(tmp_path, rates, retries, study=(), heartbeat=1):
    (tmp_path / "worker.py").write_text(WORKER)
    (tmp_path / "stepping_train.py").write_text(STEPPING_TRAINER)
    argv = [sys.executable, str(tmp_path / "worker.py"), str(tmp_path / "stepping_train.py"),
            str(CONFIGS / "default.yaml"), str(tmp_path / "out"), ",".join(map(str, rates)), str(heartbeat),
            str(retries), *study]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RELEASE_FILE": str(tmp_path / "release")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def work_here(tmp_path, rates, retries, study=(), heartbeat=1):
    """What WORKER does, in this process (the run after the killed worker): its report lines and summary, as text."""
    from opt_train.config import load_config
    from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
    from tests.sweep.fake_plan import running

    config, script = str(CONFIGS / "default.yaml"), tmp_path / "stepping_train.py"
    storage, name = study or (None, None)
    options = SweepOptions(grids=("optimizer_params.learning_rate=" + ",".join(map(str, rates)),),
                           metric="eval/accuracy", storage=storage, study=name)
    plan = plan_sweep([config], [], load_config([config]), options, str(tmp_path / "out"))
    lines = []
    with mock.patch.dict(os.environ, {"RELEASE_FILE": str(tmp_path / "release")}):
        result = run_sweep(running(plan, script), 1, report=lines.append, heartbeat_secs=heartbeat,
                           max_trial_retries=retries)
    return "\n".join([*lines, result.summary])


def wait_for(condition, what, process=None):
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the worker ended before {what}: {process.communicate()[0]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"waited in vain for {what}")
        time.sleep(0.1)


def load_study(storage, name):
    import optuna

    return optuna.load_study(study_name=name, storage=storage)


def stale_ids(storage, name):
    """A look at what any worker's next look would find stale: the trials Optuna's heartbeat of 1 s holds dead.

    One storage for every look (making one per look cost a second of CPU while the trial went stale).
    """
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        heartbeat = optuna.storages.RDBStorage(storage, heartbeat_interval=1)
    study = load_study(heartbeat, name)
    return lambda: study._storage._get_stale_trial_ids(study._study_id)


def kill_mid_trial(tmp_path, retries, study, trainer_too=True):
    """Starts a worker on one trial, SIGKILLs it (and its trainer) at step 10, waits until the study holds it stale."""
    worker = start_worker(tmp_path, [0.5], retries, study)
    checkpoint = lambda: [path for path in glob.glob(f"{tmp_path}/out/trial-*/ckpt") if open(path).read() == "10"]
    wait_for(checkpoint, "the trial's step 10", worker)
    if trainer_too:
        os.killpg(worker.pid, signal.SIGKILL)
    else:
        os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    storage, name = study or (f"sqlite:///{tmp_path}/out/study.db", "out")
    wait_for(stale_ids(storage, name), "the trial to be stale")
    return storage, name


@pytest.mark.slow  # a few seconds of waiting for the heartbeat's grace, and three worker processes
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_killed_workers_trial_is_queued_again_and_resumed_by_the_next_run(tmp_path, database, request):
    study = (request.getfixturevalue("postgres_url"), "shared") if database == "postgresql" else ()
    storage, name = kill_mid_trial(tmp_path, 2, study)
    output = work_here(tmp_path, [0.5], 2, study)
    assert "sent no heartbeat for 2 s: queued again (1 of --max-trial-retries 2); it resumes" in output, output
    trials = load_study(storage, name).get_trials()
    assert [trial.state.name for trial in trials] == ["FAIL", "COMPLETE"]
    retry = trials[1]
    assert retry.user_attrs["retry_of"] == 0 and retry.user_attrs["folder"] == trials[0].user_attrs["folder"]
    (record,) = read_jsonl(tmp_path / "out" / "results.jsonl")
    # The figures of an uninterrupted trial (the stand-in's for lr 0.5), from the run that resumed at step 10.
    assert record["status"] == "ok" and record["metrics"] == {"eval/accuracy": 1 - 0.5 / 1000, "global_step": 40}
    log = open(os.path.join(record["logdir"], "train.log")).read()
    assert log.count("$ ") == 2 and "resumed from step 10" in log, log


@pytest.mark.slow
def test_a_queued_trial_whose_trainer_still_runs_is_awaited_not_started_twice(tmp_path):
    # Only the worker dies: its trainer trains on in the trial's folder (and holds its lock). The next worker takes
    # the re-queued trial, waits for the folder, and records the run that trainer finished.
    kill_mid_trial(tmp_path, 2, (), trainer_too=False)
    out = tmp_path / "out"
    failures = []

    def taken_again():
        trials = load_study(f"sqlite:///{out}/study.db", "out").get_trials()
        return [trial.state.name for trial in trials] == ["FAIL", "RUNNING"]

    def release_once_taken_again():  # beside the next run, which waits for that trainer
        try:
            wait_for(taken_again, "the trial to be taken again")
        except AssertionError as error:
            failures.append(error)
        finally:
            (tmp_path / "release").write_text("")

    releaser = threading.Thread(target=release_once_taken_again, daemon=True)
    releaser.start()
    work_here(tmp_path, [0.5], 2)
    releaser.join()
    assert not failures, failures
    (record,) = read_jsonl(out / "results.jsonl")
    assert record["status"] == "ok" and record["metrics"]["global_step"] == 40
    log = open(os.path.join(record["logdir"], "train.log")).read()
    assert log.count("$ ") == 1 and "resumed from" not in log, log


@pytest.mark.slow
def test_a_trial_past_its_retries_fails_with_the_reason(tmp_path):
    kill_mid_trial(tmp_path, 0, ())
    output = work_here(tmp_path, [0.5], 0)
    reason = "sent no heartbeat for 2 s, after 0 retries (--max-trial-retries 0)"
    assert reason in output, output
    trials = load_study(f"sqlite:///{tmp_path}/out/study.db", "out").get_trials()
    # The last attempt of the trial holds its record (the study lists it in place of the silent one).
    assert [trial.state.name for trial in trials] == ["FAIL", "FAIL"]
    assert trials[1].user_attrs["retry_of"] == 0 and reason in trials[1].user_attrs["record"]["reason"]
    (record,) = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert record["status"] == "failed" and reason in record["reason"]
    assert read_json(os.path.join(record["logdir"], "trial.json"))["reason"] == record["reason"]
    # The next run has nothing left to do: the trial is not started a third time.
    assert open(os.path.join(record["logdir"], "train.log")).read().count("$ ") == 1


@pytest.mark.parametrize("args, words", [
    (["--heartbeat-secs", "0"], "--heartbeat-secs: '0' is not a whole number >= 1"),
    (["--heartbeat-secs", "1.5"], "--heartbeat-secs: '1.5' is not a whole number >= 1"),
    (["--max-trial-retries", "-1"], "--max-trial-retries: '-1' is not a whole number >= 0"),
    (["--max-trial-retries", "many"], "--max-trial-retries: 'many' is not a whole number >= 0"),
])
def test_bad_heartbeat_options_are_one_line_exit_2(tmp_path, args, words):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    result = CliRunner().invoke(cli, ["sweep", "-c", str(CONFIGS / "default.yaml"), "--out", str(tmp_path / "out"),
                                      "--grid", "optimizer_params.learning_rate=0.1", *args])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"Error: {words}"], result.stderr
    assert not (tmp_path / "out").exists()


REAL = ["--grid", "optimizer_params.learning_rate=0.001", "--metric", "eval/accuracy", "--mode", "max",
        "--set", "max_steps=1000", "--set", "save_checkpoint_steps=50", "--set", "eval_steps=500",
        "--set", "save_summaries_steps=500", "--set", "print_loss_steps=500", "--heartbeat-secs", "1"]


def sweep_argv(out):
    return ["sweep", "-c", str(CONFIGS / "default.yaml"), "--out", str(out), *REAL]


def opt_sweep(out):
    """`opt-train sweep` of REAL into `out`, in its own process (to be killed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-m", "opt_train", *sweep_argv(out)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def opt_sweep_here(out, *extra, **env):
    """`opt-train sweep` of REAL into `out` in this process (its trials are processes, as always): exit code, output."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    result = CliRunner(env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **env}).invoke(
        cli, [*sweep_argv(out), *extra], prog_name="opt-train")
    return result.exit_code, result.stdout + result.stderr + repr(result.exception)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The record of REAL's trial run from start to end, on no GPU, neither killed nor given --gpus: the figures the
    real trials below are compared with."""
    out = tmp_path_factory.mktemp("uninterrupted") / "sweep"
    code, output = opt_sweep_here(out, CUDA_VISIBLE_DEVICES=None)  # None: unset
    assert code == 0, output[-4000:]
    (record,) = read_jsonl(out / "results.jsonl")
    return record


@pytest.mark.slow  # two sweeps of a real 1000-update trial (the second in this process), and the uninterrupted one
def test_heartbeat_e2e_a_real_trial_killed_mid_run_ends_with_an_uninterrupted_trials_figures(tmp_path, uninterrupted):
    out = tmp_path / "killed"
    worker = opt_sweep(out)
    saved = lambda: glob.glob(f"{out}/trial-*/checkpoints/checkpoint")
    wait_for(saved, "the trial's first checkpoint", worker)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()
    assert not glob.glob(f"{out}/trial-*/final_metrics.json"), "the kill came after the end"
    wait_for(stale_ids(f"sqlite:///{out}/study.db", "killed"), "the trial to be stale")
    code, output = opt_sweep_here(out)
    assert code == 0, output[-4000:]
    assert "queued again (1 of --max-trial-retries 2)" in output, output[-4000:]
    (resumed,) = read_jsonl(out / "results.jsonl")
    assert "resumed from" in open(os.path.join(resumed["logdir"], "train.log")).read()

    assert resumed["status"] == uninterrupted["status"] == "ok"
    assert resumed["metrics"]["global_step"] == 1000 and resumed["metrics"] == uninterrupted["metrics"]


@pytest.mark.slow  # a real trial (and the uninterrupted one)
def test_a_real_trial_on_a_gpu_this_machine_lacks_trains_on_the_cpu(tmp_path, uninterrupted):
    # The GPUs --gpus names are the user's word: on a machine without them each trial's TensorFlow sees no GPU
    # and trains on the CPU, with the figures the same trial has without --gpus. (Here, beside the uninterrupted
    # trial it is compared with; tests/sweep/test_devices.py has the other device tests.)
    code, output = opt_sweep_here(tmp_path / "gpus", "--gpus", "3")
    assert code == 0, output[-4000:]
    (given,) = read_jsonl(tmp_path / "gpus" / "results.jsonl")
    assert given["status"] == uninterrupted["status"] == "ok"
    assert given["gpus"] == ["3"] and "gpus" not in uninterrupted
    assert given["metrics"] == uninterrupted["metrics"]
