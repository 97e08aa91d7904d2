"""The sweep driver on a real SQLite Optuna study with a stand-in trainer (a tiny script): records, skipping,
resuming, adopting, interrupts, two workers, a killed driver.

The real `opt-train train` path is covered by test_sweep_e2e.py; here each trial takes
milliseconds, so every branch of the driver is cheap to reach.
"""

import dataclasses
import json
import os
import sys

import pytest

from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from opt_train.sweep.plan import SweepPlan
from tests.support import CONFIGS, read_json, read_jsonl

# Reads the trial's --set overrides; "diverges" above lr 1000, is "interrupted" at lr 13
# (Ctrl-C: exit 130) and 14 (SIGTERM: exit 143) unless resumed, sleeps lr - 100 seconds
# for lr in (100, 200), "resumes" when its logdir already has a checkpoint.
FAKE_TRAINER = """
import json, os, sys, time
sets = dict(a.split("=", 1) for a in sys.argv[sys.argv.index("train") + 1:] if "=" in a)
logdir, lr = sets["logdir"], float(sets["optimizer_params.learning_rate"])
os.makedirs(logdir, exist_ok=True)
checkpoint = os.path.join(logdir, "ckpt")
resumed = os.path.exists(checkpoint)
if resumed:
    print("resumed from", checkpoint)
open(checkpoint, "w").write("5")
if 100 < lr < 200:
    time.sleep(lr - 100)
if lr in (13, 14) and not resumed:
    sys.exit({13: 130, 14: 143}[lr])
if lr > 1000:
    print("step 10 loss nan")
    print("Error: stopped at step 10: 3 consecutive non-finite steps (the log's words)", file=sys.stderr)
    open(os.path.join(logdir, "metrics.jsonl"), "a").write(json.dumps({"step": 10, "stopped": "3 consecutive non-finite steps"}) + "\\n")
    sys.exit(1)
json.dump({"eval/accuracy": 1 - lr, "global_step": 5}, open(os.path.join(logdir, "final_metrics.json"), "w"))
"""


@dataclasses.dataclass(frozen=True)
class FakePlan(SweepPlan):
    script: str = ""

    def command(self, trial, python=None):
        return [sys.executable, self.script, *super().command(trial)[1:]]


@pytest.fixture
def make_plan(tmp_path):
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    config = str(CONFIGS / "default.yaml")

    def make(rates, out="out", **options):
        base = load_config([config])
        grid = ("optimizer_params.learning_rate=" + ",".join(str(rate) for rate in rates),)
        plan = plan_sweep([config], [], base, SweepOptions(grids=grid, metric="eval/accuracy", **options), tmp_path / out)
        fields = {field.name: getattr(plan, field.name) for field in dataclasses.fields(SweepPlan)}
        return FakePlan(**fields, script=str(script))

    return make


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


def test_resolved_configs_are_written_before_trials_start(make_plan):
    plan = make_plan([0.125])
    (row,) = run_sweep(plan).rows
    import yaml

    resolved = yaml.safe_load(open(os.path.join(row["logdir"], "config.yaml")))
    assert resolved["optimizer_params"]["learning_rate"] == 0.125
    assert resolved["logdir"] == row["logdir"]
