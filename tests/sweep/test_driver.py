"""The sweep driver on a real SQLite Optuna study with a stand-in trainer (a tiny script): records, skipping,
resuming, adopting, interrupts, two workers, a killed driver. The worker that is killed, and one of two workers
sharing a study, are processes of their own; every other sweep runs in the test's process.

The real `opt-train train` path is covered by tests/e2e/test_sweep.py; here each trial takes
milliseconds, so every branch of the driver is cheap to reach.
"""

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from tests.support import CONFIGS, REPO, read_json, read_jsonl, rest_of_output, run_python
from tests.sweep.fake_plan import running

# Reads the trial's --set overrides; writes a failure record on its first attempt at lr 7777; "diverges"
# above lr 1000, is "interrupted" at lr 13
# (Ctrl-C: exit 130) and 14 (SIGTERM: exit 143) unless resumed, sleeps lr - 100 seconds
# for lr in (100, 200), trains at lr 300 until the sweep folder holds a file `release`, "resumes" when its logdir
# already has a checkpoint. Each start appends the GPUs it was given and the time to logdir/gpus.
FAKE_TRAINER = """
import json, os, sys, time
sets = dict(a.split("=", 1) for a in sys.argv[sys.argv.index("train") + 1:] if "=" in a)
logdir, lr = sets["logdir"], float(sets["optimizer_params.learning_rate"])
os.makedirs(logdir, exist_ok=True)
open(os.path.join(logdir, "gpus"), "a").write(os.environ.get("CUDA_VISIBLE_DEVICES", "") + " " + str(time.time()) + "\\n")
checkpoint = os.path.join(logdir, "ckpt")
resumed = os.path.exists(checkpoint)
if resumed:
    print("resumed from", checkpoint)
open(checkpoint, "w").write("5")
while lr == 300 and not os.path.exists(os.path.join(os.path.dirname(logdir), "release")):
    time.sleep(0.05)
if 100 < lr < 200:
    time.sleep(lr - 100)
if lr in (13, 14) and not resumed:
    sys.exit({13: 130, 14: 143}[lr])
if lr == 7777:  # the first attempt writes a failure record; the retry dies without one
    if not resumed:
        json.dump({"exit_code": 1, "error": "TrainingFailed", "key": None, "code": None, "message": "first attempt"},
                  open(os.path.join(logdir, "failure.json"), "w"))
    print("Error: second attempt" if resumed else "Error: the log's words", file=sys.stderr)
    sys.exit(1)
if lr > 1000:
    print("step 10 loss nan")
    print("Error: stopped at step 10: 3 consecutive non-finite steps (the log's words)", file=sys.stderr)
    open(os.path.join(logdir, "metrics.jsonl"), "a").write(json.dumps({"step": 10, "stopped": "3 consecutive non-finite steps"}) + "\\n")
    sys.exit(1)
json.dump({"eval/accuracy": 1 - lr, "global_step": 5}, open(os.path.join(logdir, "final_metrics.json"), "w"))
"""


@pytest.fixture
def make_plan(tmp_path):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    config = str(CONFIGS / "default.yaml")

    def make(rates, out="out", **options):
        base = load_config([config])
        grid = ("optimizer_params.learning_rate=" + ",".join(str(rate) for rate in rates),)
        plan = plan_sweep([config], [], base, SweepOptions(grids=grid, metric="eval/accuracy", **options), tmp_path / out)
        return running(plan, script)

    return make


@pytest.mark.slow  # 5 s on 2 cores
def test_records_ranks_and_skips_on_the_next_run(make_plan):
    plan = make_plan([0.5, 0.1, 5000.0])
    messages = []
    result = run_sweep(plan, parallel=2, report=messages.append)
    statuses = {row["overrides"]["optimizer_params.learning_rate"]: row["status"] for row in result.rows}
    assert statuses == {0.5: "ok", 0.1: "ok", 5000.0: "failed"}
    failed = next(row for row in result.rows if row["status"] == "failed")
    assert failed["reason"] == "stopped at step 10: 3 consecutive non-finite steps"  # the record, not the log
    assert read_json(os.path.join(failed["logdir"], "trial.json"))["exit_code"] == 1
    lines = result.table.splitlines()
    assert [line.split()[1] for line in lines[1:]] == ["0.1", "0.5", "5000"]
    assert not result.all_failed
    assert sum("started" in message for message in messages) == 3
    assert len(read_jsonl(os.path.join(plan.out, "results.jsonl"))) == 3

    again = run_sweep(plan, parallel=2, report=messages.append)
    assert again.table == result.table
    assert len(read_jsonl(os.path.join(plan.out, "results.jsonl"))) == 3
    assert sum("started" in message for message in messages) == 3  # nothing ran again
    assert "0 trials queued" in messages[-1]


def test_a_sweep_ends_when_its_last_trial_does_not_at_the_next_look_for_orphans(make_plan, monkeypatch):
    """With nothing left to claim and nobody else's trial running, the worker looks at once: it
    used to wait for its next look for a dead driver's trials (every 2 s) before it could end."""
    from opt_train.sweep import worker

    monkeypatch.setattr(worker, "ORPHAN_POLL_SECONDS", 300.0)
    started = time.monotonic()
    (row,) = run_sweep(make_plan([0.5])).rows
    assert row["status"] == "ok"
    assert time.monotonic() - started < 300  # ended by the trial, not by the look's period


@pytest.mark.slow  # 7 s on 2 cores
def test_failed_trials_rerun_only_on_request_in_their_own_folder(make_plan):
    plan = make_plan([0.5, 5000.0])
    first = run_sweep(plan)
    failed_dir = next(row["logdir"] for row in first.rows if row["status"] == "failed")
    run_sweep(plan)
    assert "resumed from" not in open(os.path.join(failed_dir, "train.log")).read()
    again = run_sweep(plan, retry_failed=True)
    assert "resumed from" in open(os.path.join(failed_dir, "train.log")).read()
    assert len(again.rows) == 2  # the retry replaces the failed attempt in the table
    assert len(read_jsonl(os.path.join(plan.out, "results.jsonl"))) == 3


@pytest.mark.slow  # two sweep runs, each starting its study
def test_the_reason_is_the_failure_record_of_this_attempt_never_an_earlier_ones(make_plan):
    plan = make_plan([7777])
    (first,) = run_sweep(plan).rows
    assert first["reason"] == "first attempt"  # the record, not the log's last Error: line
    (again,) = run_sweep(plan, retry_failed=True).rows
    assert again["reason"] == "second attempt"  # the driver removed the first attempt's record
    assert not os.path.exists(os.path.join(again["logdir"], "failure.json"))


@pytest.mark.slow  # 9 s on 2 cores
def test_an_interrupted_trial_stays_running_and_resumes_on_the_next_run(make_plan):
    plan = make_plan([13, 14, 0.5])
    result = run_sweep(plan)
    assert sorted(row["status"] for row in result.rows) == ["ok", "running", "running"]
    interrupted = [row["logdir"] for row in result.rows if row["status"] == "running"]
    for logdir in interrupted:
        assert not os.path.exists(os.path.join(logdir, "trial.json"))
    assert len(read_jsonl(os.path.join(plan.out, "results.jsonl"))) == 1
    again = run_sweep(plan)
    assert [row["status"] for row in again.rows] == ["ok"] * 3
    for logdir in interrupted:
        assert "resumed from" in open(os.path.join(logdir, "train.log")).read()


@pytest.mark.slow  # 3 s on 2 cores
def test_trials_finished_outside_the_sweep_are_adopted(make_plan):
    from opt_train.sweep import preview_trials

    plan = make_plan([0.25])
    (trial,) = preview_trials(plan)  # what --print-commands names it
    logdir = plan.logdir(trial)
    os.makedirs(logdir)
    with open(os.path.join(logdir, "final_metrics.json"), "w") as handle:
        json.dump({"eval/accuracy": 0.5, "global_step": 9}, handle)
    open(os.path.join(logdir, "config.yaml"), "w").write("{}\n")
    result = run_sweep(plan)
    assert not os.path.exists(os.path.join(logdir, "train.log"))  # nothing was run
    (record,) = read_jsonl(os.path.join(plan.out, "results.jsonl"))
    assert record["status"] == "ok" and record["metrics"]["global_step"] == 9
    assert result.rows[0]["metrics"]["eval/accuracy"] == 0.5


def test_every_trial_failing_is_reported(make_plan):
    assert run_sweep(make_plan([2000.0, 3000.0]), parallel=2).all_failed


@pytest.mark.slow  # 3 s on 2 cores
def test_resolved_configs_are_written_before_trials_start(make_plan):
    plan = make_plan([0.125])
    (row,) = run_sweep(plan).rows
    import yaml

    resolved = yaml.safe_load(open(os.path.join(row["logdir"], "config.yaml")))
    assert resolved["optimizer_params"]["learning_rate"] == 0.125
    assert resolved["logdir"] == row["logdir"]


# A sweep worker in its own process, running the stand-in trainer: argv script config out rates parallel
# [storage study]; SWEEP_GPUS: the GPUs it shares out (none when unset).
DRIVER = """
import os, sys
from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from tests.sweep.fake_plan import running

script, config, out, rates, parallel, *study = sys.argv[1:]

storage, name = study or (None, None)
options = SweepOptions(grids=("optimizer_params.learning_rate=" + rates,), metric="eval/accuracy",
                       storage=storage, study=name)
plan = plan_sweep([config], [], load_config([config]), options, out)
gpus = (tuple(os.environ["SWEEP_GPUS"].split(",")), "--gpus") if os.environ.get("SWEEP_GPUS") else ((), None)
result = run_sweep(running(plan, script), int(parallel), report=lambda text: print(text, flush=True), gpus=gpus)
print(result.summary, flush=True)
assert "tensorflow" not in sys.modules, "the sweep driver imported TensorFlow"
"""


def start_worker(tmp_path, rates, parallel=1, study=(), gpus=(), **popen):
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "fake_train.py").write_text(FAKE_TRAINER)
    argv = [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "fake_train.py"),
            str(CONFIGS / "default.yaml"), str(tmp_path / "out"), ",".join(map(str, rates)), str(parallel), *study]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "SWEEP_GPUS": ",".join(gpus)}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, **popen)


def sweep_here(tmp_path, rates, parallel=1, study=(), gpus=()):
    """What DRIVER does, in this process (a second worker, or the run after a killed one): its report lines, as text."""
    storage, name = study or (None, None)
    config = str(CONFIGS / "default.yaml")
    options = SweepOptions(grids=("optimizer_params.learning_rate=" + ",".join(map(str, rates)),),
                           metric="eval/accuracy", storage=storage, study=name)
    plan = plan_sweep([config], [], load_config([config]), options, str(tmp_path / "out"))
    lines = []
    result = run_sweep(running(plan, tmp_path / "fake_train.py"), parallel, report=lines.append,
                       gpus=(tuple(gpus), "--gpus") if gpus else ((), None))
    return "\n".join([*lines, result.summary])


def opened_study(worker):
    """The output lines of DRIVER process `worker` up to its first report: it has opened the study."""
    for line in worker.stdout:
        yield line
        if line.startswith("study "):
            return
    raise AssertionError("the worker ended before it opened the study")


def study_trials(out, storage=None, name="out"):
    import optuna

    study = optuna.load_study(study_name=name, storage=storage or f"sqlite:///{out}/study.db")
    return study.get_trials()


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_workers_of_one_study_run_each_trial_once(tmp_path, database, request):
    rates = [100.2 + index / 100 for index in range(6)]
    storage = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    study = (storage, "shared") if storage else ()
    # One worker in its own process, the other in this one, once the first has opened the study.
    worker = start_worker(tmp_path, rates, parallel=2, study=study)
    opened = "".join(opened_study(worker))
    here = sweep_here(tmp_path, rates, parallel=2, study=study)
    outputs = [opened + rest_of_output(worker, timeout=600), here]
    assert worker.returncode == 0, outputs
    trials = study_trials(tmp_path / "out", storage, "shared" if storage else "out")
    assert len(trials) == 6 and all(trial.state.name == "COMPLETE" for trial in trials)
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert sorted(r["overrides"]["optimizer_params.learning_rate"] for r in records) == sorted(rates)
    assert len({r["trial"] for r in records}) == 6
    assert sum(output.count(" started: ") for output in outputs) == 6, outputs
    for record in records:
        assert open(os.path.join(record["logdir"], "train.log")).read().count("$ ") == 1


@pytest.mark.slow
@pytest.mark.parametrize("kill_trials_too", [False, True])
def test_a_driver_killed_with_sigkill_is_finished_by_the_next_run(tmp_path, kill_trials_too):
    rates = [103.0, 0.5]
    worker = start_worker(tmp_path, rates, start_new_session=True)
    out = tmp_path / "out"
    while not glob.glob(f"{out}/trial-*/ckpt"):  # the first trial is training
        assert worker.poll() is None, worker.communicate()[0]
        time.sleep(0.1)
    if kill_trials_too:
        os.killpg(worker.pid, signal.SIGKILL)
    else:
        os.kill(worker.pid, signal.SIGKILL)  # its trial goes on and finishes alone
    worker.wait()
    sweep_here(tmp_path, rates)  # the next run, in this process
    assert sorted(trial.state.name for trial in study_trials(out)) == ["COMPLETE", "COMPLETE"]
    records = read_jsonl(out / "results.jsonl")
    assert sorted(r["overrides"]["optimizer_params.learning_rate"] for r in records) == sorted(rates)
    first = next(r for r in records if r["overrides"]["optimizer_params.learning_rate"] == 103.0)
    log = open(os.path.join(first["logdir"], "train.log")).read()
    assert log.count("$ ") == (2 if kill_trials_too else 1)
    assert ("resumed from" in log) == kill_trials_too
    if not kill_trials_too:
        # --parallel 1 counts the dead driver's trainer still running: the next trial starts after it ends.
        second = next(r for r in records if r["overrides"]["optimizer_params.learning_rate"] == 0.5)
        finished = os.path.getmtime(os.path.join(first["logdir"], "final_metrics.json"))
        assert os.path.getmtime(os.path.join(second["logdir"], "config.yaml")) >= finished


@pytest.mark.slow  # two sweep runs, one a process of its own
def test_a_killed_drivers_trainer_keeps_its_gpu_from_the_next_run(tmp_path):
    """The trainer a SIGKILLed driver left running on GPU 0 holds it: the next run (GPUs 0 and 1, --parallel 2)
    runs the other trials on GPU 1 alone until that trainer ends (before, it gave GPU 0 to a second trainer)."""
    import threading

    rates = [300.0, 0.5, 0.25]  # 300: trains until the test releases it, once the next run started a trial
    worker = start_worker(tmp_path, rates, gpus=("0", "1"), start_new_session=True)
    out = tmp_path / "out"
    while not glob.glob(f"{out}/trial-*/ckpt"):  # the first trial is training, on GPU 0
        assert worker.poll() is None, worker.communicate()[0]
        time.sleep(0.05)
    os.kill(worker.pid, signal.SIGKILL)  # its trainer goes on
    worker.wait()

    def release_once_another_trial_started():
        deadline = time.monotonic() + 120
        while len(glob.glob(f"{out}/trial-*/gpus")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        (out / "release").touch()

    releaser = threading.Thread(target=release_once_another_trial_started)
    releaser.start()
    sweep_here(tmp_path, rates, parallel=2, gpus=("0", "1"))
    releaser.join()
    records = {r["overrides"]["optimizer_params.learning_rate"]: r for r in read_jsonl(out / "results.jsonl")}
    assert sorted(records) == sorted(rates) and all(r["status"] == "ok" for r in records.values())

    def starts(rate):
        lines = open(os.path.join(records[rate]["logdir"], "gpus")).read().split()
        return list(zip(lines[::2], map(float, lines[1::2])))

    assert [gpus for gpus, _ in starts(300.0)] == ["0"]  # run once, by the killed driver
    orphan_end = os.path.getmtime(os.path.join(records[300.0]["logdir"], "final_metrics.json"))
    (first, started), = starts(0.5)  # the next run's first trial: the orphan still trained
    assert first == "1" and started < orphan_end
    (gpus, started), = starts(0.25)
    assert gpus == "1" or started >= orphan_end, (gpus, started, orphan_end)


def test_tpe_is_seeded_and_proposes_what_optunas_own_tpe_sampler_proposes():
    """Trial n is proposed by Optuna's TPESampler seeded with the trial's seed (SeedSequence([seed, n]))."""
    import numpy as np
    import optuna

    from opt_train.sweep import preview_trials

    config = str(CONFIGS / "default.yaml")
    block = {"optimizer_params.learning_rate": {"log_uniform": [1e-4, 1e-1]}}

    def proposals(seed):
        base = load_config([config])
        options = SweepOptions(random_trials=4, seed=seed, sampler="tpe")
        base = dataclasses.replace(base, sweep={"random": block})
        plan = plan_sweep([config], [], base, options, "unused")
        return [trial.values["optimizer_params.learning_rate"] for trial in preview_trials(plan)]

    study = optuna.create_study()
    expected = []
    for number in range(4):
        study.sampler = optuna.samplers.TPESampler(seed=int(np.random.SeedSequence([3, number]).generate_state(1)[0]))
        trial = study.ask()
        expected.append(trial.suggest_float("optimizer_params.learning_rate", 1e-4, 1e-1, log=True))
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert proposals(3) == expected
    assert proposals(3) == proposals(3) != proposals(4)


@pytest.mark.slow  # 4 s on 2 cores
def test_a_changed_base_config_gives_new_trials_and_lists_the_old_ones_as_stale(make_plan):
    plan = make_plan([0.5, 0.25])
    first = run_sweep(plan)
    changed = dataclasses.replace(plan, base_overrides=("max_steps=7",), base_digest="different")
    second = run_sweep(changed)
    assert sorted(row["status"] for row in second.rows) == ["ok", "ok", "stale", "stale"]
    stale = {row["trial"] for row in second.rows if row["status"] == "stale"}
    assert stale == {row["trial"] for row in first.rows}
    assert all(not row["metrics"] for row in second.rows if row["status"] == "stale")
    assert second.table.splitlines()[-1].split()[-1] == "stale"  # listed last, never ranked
    assert not second.all_failed


@pytest.mark.slow  # 5 s on 2 cores
def test_parameter_importances_come_from_optuna_with_enough_finished_trials(make_plan):
    plan = make_plan([0.5, 0.25, 0.125, 0.0625])
    result = run_sweep(plan, parallel=2)
    assert list(result.importances) == ["optimizer_params.learning_rate"]
    assert result.importances["optimizer_params.learning_rate"] == pytest.approx(1.0)
    assert make_plan([0.5, 0.25], out="small") and not run_sweep(make_plan([0.5, 0.25], out="small")).importances


# Source of study_of_four(keys): an in-memory study of four finished trials of generation "g" (and one of
# another) varying `keys`, for importances(); run here and in a fresh process.
STUDY_OF_FOUR = """
import optuna
from opt_train.sweep import study as studies

def study_of_four(keys):
    float_range = optuna.distributions.FloatDistribution(0.0, 10.0)
    study = optuna.create_study()
    for number, value in enumerate([0.1, 0.5, 0.3, 0.9, 7.0]):
        params = {key: float((number * (index + 2)) % 5) for index, key in enumerate(keys)}
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dict.fromkeys(keys, float_range), value=value,
            user_attrs={studies.GENERATION: "g" if number < 4 else "other"}))
    return study
"""


def test_importances_of_several_keys_are_optunas_over_the_trials_of_the_generation():
    import optuna

    from opt_train.sweep import study as studies

    namespace = {}
    exec(STUDY_OF_FOUR, namespace)
    study = namespace["study_of_four"](["a", "b"])
    found = studies.importances(study, "g")
    alone = optuna.create_study()
    alone.add_trials(study.trials[:4])
    assert found == optuna.importance.get_param_importances(alone, params=["a", "b"])
    assert set(found) == {"a", "b"} and sum(found.values()) == pytest.approx(1.0)


def test_one_varied_key_gets_importance_1_without_loading_optunas_evaluators():
    # What Optuna's normalized importances give one key, without the scikit-learn and SciPy
    # imports of optuna.importance (3 s of CPU at the end of every one-key sweep run).
    code = STUDY_OF_FOUR + (
        "import sys\n"
        "assert studies.importances(study_of_four(['lr']), 'g') == {'lr': 1.0}\n"
        "assert studies.importances(study_of_four(['lr']), 'other') == {}  # fewer than four trials\n"
        "loaded = sorted(name for name in ('sklearn', 'scipy', 'optuna.importance') if name in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("sampler", ["random", "tpe", "cmaes", "qmc"])
def test_every_sampler_proposes_values_inside_the_ranges(sampler):
    from opt_train.sweep import preview_trials

    config = str(CONFIGS / "default.yaml")
    ranges = {"optimizer_params.learning_rate": {"log_uniform": [1e-4, 1e-1]}, "iter_size": {"int_uniform": [1, 3]},
              "optimizer": {"choice": ["Adam", "SGD"]}}
    base = dataclasses.replace(load_config([config]), sweep={"random": ranges, "trials": 5, "sampler": sampler})
    trials = preview_trials(plan_sweep([config], [], base, SweepOptions(), "unused"))
    assert len(trials) == 5
    for trial in trials:
        values = trial.values
        assert 1e-4 <= values["optimizer_params.learning_rate"] <= 1e-1
        assert values["iter_size"] in (1, 2, 3) and values["optimizer"] in ("Adam", "SGD")


@pytest.mark.slow  # 3 s on 2 cores
def test_status_from_the_folder_alone_prints_the_whole_table_with_metrics(make_plan, cli):
    from opt_train.sweep import study_status

    plan = make_plan([0.5, 0.1, 5000.0])
    run_sweep(plan)
    expected, best = study_status(plan)  # what the full command's --status prints
    result = cli("sweep", "--status", "--out", plan.out)
    assert result.exit_code == 0, result.output
    assert expected.table in result.output
    assert "stale" not in result.output and "eval/accuracy" in result.output
    assert f"best: {best['trial']} eval/accuracy" in result.output
    assert sum(line.split()[-1] == "ok" for line in expected.table.splitlines()) == 2

    missing = cli("sweep", "--status", "--out", os.path.join(plan.out, "nothing"))
    assert missing.exit_code == 2 and "no study in" in missing.output
    assert cli("sweep", "--status").exit_code == 2
