"""End to end: a small learning-rate grid on the default config, one trial pruned, one diverging; then resume.

Every trial is a real `opt-train train` process; the sweep command that starts them runs in
the test's process (`opt_sweep`), as a user's `opt-train sweep` would, minus its start-up.
"""

import glob
import os
import subprocess
import traceback

import pytest
import yaml

from tests.support import CONFIGS, read_json, read_jsonl

pytestmark = pytest.mark.slow

SHORT = [
    "--set", "max_steps=40",
    "--set", "eval_steps=20",
    "--set", "save_checkpoint_steps=20",
    "--set", "save_summaries_steps=20",
    "--set", "print_loss_steps=10",
    "--set", "max_consecutive_overflows=3",
    "--set", "optimizer=GradientDescent",
]
ABSURD = 1e30  # float32 weights overflow: non-finite updates, then the run stops


def opt_sweep(command):
    """`opt-train sweep ARGS` (`command` is its arguments) in this process: exit code, stdout and stderr."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    result = CliRunner().invoke(cli, ["sweep", *map(str, command)], prog_name="opt-train")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(command, result.exit_code, result.stdout, stderr)


def table_rows(stdout):
    """The table's body lines (between the header and the summary line)."""
    lines = stdout.strip().splitlines()
    assert lines[0].split()[0] == "trial", stdout
    return lines[1:-1]


def logs(out):
    return {path: (os.path.getmtime(path), open(path).read()) for path in glob.glob(f"{out}/trial-*/train.log")}


def test_grid_sweep_ranks_records_failure_prunes_and_resumes(tmp_path):
    # One sweep of four real trials for what took three sweeps and seven trials: two good rates
    # finish first (--parallel 1 runs the queue in order), lr 1e-7 barely moves and the median
    # pruner stops it at an evaluation, the absurd rate diverges and fails. (Two trials at a
    # time: tests/test_tracking.py's sweep.)
    out = tmp_path / "sweep"
    block = tmp_path / "prune.yaml"
    block.write_text(
        "sweep:\n"
        "  grid: {optimizer_params.learning_rate: [0.5, 0.3, 1.0e-7, 1.0e+30]}\n"  # 1.0e+30: ABSURD
        "  pruner: {median: {n_startup_trials: 2}}\n"
    )
    command = ["-c", CONFIGS / "default.yaml", "-c", block, *SHORT, "--set", "eval_steps=10",
               "--metric", "eval/accuracy", "--mode", "max", "--out", out]
    first = opt_sweep(command)
    assert first.returncode == 0, first.stderr[-3000:]

    records = read_jsonl(out / "results.jsonl")
    assert len(records) == 4
    by_rate = {record["overrides"]["optimizer_params.learning_rate"]: record for record in records}
    assert set(by_rate) == {0.5, 0.3, 1e-7, ABSURD}
    failed = by_rate[ABSURD]
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert failed["reason"].startswith("stopped at step"), failed["reason"]
    assert not os.path.exists(os.path.join(failed["logdir"], "final_metrics.json"))
    # The trainer's own failure record, which the sweep read the reason from.
    failure = read_json(os.path.join(failed["logdir"], "failure.json"))
    assert failure == {"exit_code": 1, "error": "TrainingFailed", "key": None, "code": None,
                       "message": failed["reason"]}
    for rate in (0.5, 0.3):
        record = by_rate[rate]
        assert record["status"] == "ok" and record["reason"] is None
        assert record["metrics"] == read_json(os.path.join(record["logdir"], "final_metrics.json"))
        assert record["metrics"]["global_step"] == 40
        resolved = yaml.safe_load(open(os.path.join(record["logdir"], "config.yaml")))
        assert resolved["optimizer_params"]["learning_rate"] == rate
        assert resolved["logdir"] == record["logdir"]
        assert read_json(os.path.join(record["logdir"], "trial.json"))["status"] == "ok"

    # Pruned at an evaluation, below both good trials there, with its checkpoint of that step.
    pruned = by_rate[1e-7]
    assert pruned["status"] == "pruned" and pruned["exit_code"] == 3
    step = pruned["metrics"]["global_step"]
    assert step < 40 and step % 10 == 0
    assert pruned["metrics"]["eval/accuracy"] < min(by_rate[rate]["metrics"]["eval/accuracy"] for rate in (0.5, 0.3))
    assert not os.path.exists(os.path.join(pruned["logdir"], "final_metrics.json"))
    import tensorflow as tf

    assert tf.train.latest_checkpoint(os.path.join(pruned["logdir"], "checkpoints")).endswith(f"-{step}")
    import optuna

    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{out}/study.db")
    states = {trial.params["optimizer_params.learning_rate"]: trial.state.name for trial in study.trials}
    assert states == {0.5: "COMPLETE", 0.3: "COMPLETE", 1e-7: "PRUNED", ABSURD: "FAIL"}

    # The table: ok trials best eval/accuracy first, then the pruned one, the failed trial last with its reason.
    rows = table_rows(first.stdout)
    ok_by_accuracy = sorted((r for r in records if r["status"] == "ok"), key=lambda r: (-r["metrics"]["eval/accuracy"], r["trial"]))
    assert [row.split()[0] for row in rows] == [r["trial"] for r in ok_by_accuracy] + [pruned["trial"], failed["trial"]]
    assert rows[-2].endswith(f"pruned: stopped at step {step}")
    assert rows[-1].endswith(f"failed: {failed['reason']}")
    assert "4 trials: 2 ok, 1 pruned, 1 failed" in first.stdout

    # HParams: the experiment in DIR, one session per trial logdir.
    assert glob.glob(f"{out}/events.out.tfevents.*")
    for record in records:
        assert glob.glob(os.path.join(record["logdir"], "events.out.tfevents.*"))
    # TensorBoard's Scalars tab: a trial's figures only in its train and eval runs (loss on one card).
    from tensorboard.backend.event_processing import plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer().AddRunsFromDirectory(str(out))
    multiplexer.Reload()
    scalar_runs = multiplexer.PluginRunToTagToContent("scalars")
    ok = [r for r in records if r["status"] == "ok"]
    assert {os.path.relpath(r["logdir"], out) + "/eval" for r in ok} <= set(scalar_runs)
    assert all(os.path.basename(run) in ("train", "eval") for run in scalar_runs), sorted(scalar_runs)

    # Re-running: the study remembers every trial, so nothing runs again. (Replaced on purpose:
    # deleting a trial's final_metrics.json no longer makes it unfinished; the study is the
    # record. Resuming a trial left running is covered in test_driver.py.)
    before = logs(out)
    second = opt_sweep(command)
    assert second.returncode == 0, second.stderr[-3000:]
    assert logs(out) == before
    assert len(read_jsonl(out / "results.jsonl")) == 4
    assert [row.split()[0] for row in table_rows(second.stdout)] == [row.split()[0] for row in rows]
    assert "0 trials queued" in second.stderr

    status = opt_sweep(command + ["--status"])
    assert status.returncode == 0, status.stderr[-3000:]
    assert "4 trials: 2 ok, 1 pruned, 1 failed" in status.stdout
    assert "best: " in status.stdout


def test_a_trial_refused_while_its_run_is_built_records_the_full_key(tmp_path):
    # The config loads (the sweep checks every trial's first), but the CSV has a label 2
    # that 2 classes cannot hold: only the trainer, reading the file, finds it.
    (tmp_path / "t.csv").write_text("a,b,label\n" + "".join(f"{i},{i % 2},{i % 3}\n" for i in range(20)))
    config = tmp_path / "csv.yaml"
    config.write_text(f"model: mlp\ndata: csv\ndata_params:\n  path: t.csv\n  label_column: label\n"
                      f"batch_size_per_gpu: 4\nmax_steps: 2\nlogdir: {tmp_path / 'run'}\n")
    out = tmp_path / "sweep"
    done = opt_sweep(["-c", config, "--out", out, "--grid", "data_params.num_classes=2"])
    assert done.returncode == 1, done.stderr[-3000:]
    assert "every trial failed" in done.stderr  # its only trial
    (record,) = read_jsonl(out / "results.jsonl")
    assert record["status"] == "failed" and record["exit_code"] == 2
    failure = read_json(os.path.join(record["logdir"], "failure.json"))
    assert failure["exit_code"] == 2 and failure["error"] == "ConfigError"
    assert (failure["key"], failure["code"]) == ("data_params.num_classes", "out_of_range")
    assert "data_params.num_classes: must exceed every label (the largest is 2)" in failure["message"]
    assert record["reason"] == failure["message"]
