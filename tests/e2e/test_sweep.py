"""End to end: a small learning-rate grid on the default config, one trial pruned, one diverging; what its folder
answers by itself (`sweep --status` in every form, the HParams of its swept keys); then a rerun.

Every trial is a real `opt-train train` process; the sweep command that starts them runs in
the test's process (`opt_sweep`), as a user's `opt-train sweep` would, minus its start-up.
One sweep (the module's) serves every test but the refused trial's.
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


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    """`(command, folder, first run)` of the module's sweep, with a study name of its own (`--study lrs`).

    One sweep of three real trials for what took three sweeps and seven trials (and a fourth
    sweep of two, for the folder's tests below): a good rate finishes first (--parallel 1 runs the
    queue in order), lr 1e-7 barely moves and the median pruner stops it at an evaluation, the
    absurd rate diverges and fails. (Two trials at a time: tests/test_tracking.py's sweep. The
    ranking of several ok trials by the metric is the same table code whatever the trainer:
    tests/sweep/test_driver.py's records-and-ranks test.)
    """
    folder = tmp_path_factory.mktemp("grid")
    out = folder / "sweep"
    block = folder / "prune.yaml"
    block.write_text(
        "sweep:\n"
        "  grid: {optimizer_params.learning_rate: [0.5, 1.0e-7, 1.0e+30]}\n"  # 1.0e+30: ABSURD
        "  pruner: {median: {n_startup_trials: 1}}\n"
    )
    command = ["-c", CONFIGS / "default.yaml", "-c", block, *SHORT, "--set", "eval_steps=10",
               "--metric", "eval/accuracy", "--mode", "max", "--study", "lrs", "--out", out]
    first = opt_sweep(command)
    assert first.returncode == 0, first.stderr[-3000:]
    return command, out, first


def test_grid_sweep_ranks_records_failure_and_prunes(grid_sweep):
    _, out, first = grid_sweep
    records = read_jsonl(out / "results.jsonl")
    assert len(records) == 3
    by_rate = {record["overrides"]["optimizer_params.learning_rate"]: record for record in records}
    assert set(by_rate) == {0.5, 1e-7, ABSURD}
    failed = by_rate[ABSURD]
    assert failed["status"] == "failed" and failed["exit_code"] == 1
    assert failed["reason"].startswith("stopped at step"), failed["reason"]
    assert not os.path.exists(os.path.join(failed["logdir"], "final_metrics.json"))
    # The trainer's own failure record, which the sweep read the reason from.
    failure = read_json(os.path.join(failed["logdir"], "failure.json"))
    assert failure == {"exit_code": 1, "error": "TrainingFailed", "key": None, "code": None,
                       "message": failed["reason"]}
    good = by_rate[0.5]
    assert good["status"] == "ok" and good["reason"] is None
    assert good["metrics"] == read_json(os.path.join(good["logdir"], "final_metrics.json"))
    assert good["metrics"]["global_step"] == 40
    resolved = yaml.safe_load(open(os.path.join(good["logdir"], "config.yaml")))
    assert resolved["optimizer_params"]["learning_rate"] == 0.5
    assert resolved["logdir"] == good["logdir"]
    assert read_json(os.path.join(good["logdir"], "trial.json"))["status"] == "ok"

    # Pruned at an evaluation, below the good trial there, with its checkpoint of that step.
    pruned = by_rate[1e-7]
    assert pruned["status"] == "pruned" and pruned["exit_code"] == 3
    step = pruned["metrics"]["global_step"]
    assert step < 40 and step % 10 == 0
    assert pruned["metrics"]["eval/accuracy"] < good["metrics"]["eval/accuracy"]
    assert not os.path.exists(os.path.join(pruned["logdir"], "final_metrics.json"))
    import tensorflow as tf

    assert tf.train.latest_checkpoint(os.path.join(pruned["logdir"], "checkpoints")).endswith(f"-{step}")
    import optuna

    study = optuna.load_study(study_name="lrs", storage=f"sqlite:///{out}/study.db")
    states = {trial.params["optimizer_params.learning_rate"]: trial.state.name for trial in study.trials}
    assert states == {0.5: "COMPLETE", 1e-7: "PRUNED", ABSURD: "FAIL"}

    # The table: the ok trial first, then the pruned one, the failed trial last with its reason.
    rows = table_rows(first.stdout)
    assert [row.split()[0] for row in rows] == [good["trial"], pruned["trial"], failed["trial"]]
    assert rows[-2].endswith(f"pruned: stopped at step {step}")
    assert rows[-1].endswith(f"failed: {failed['reason']}")
    assert "3 trials: 1 ok, 1 pruned, 1 failed" in first.stdout

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


# What a finished sweep's folder answers by itself: `sweep --status` in every form, and the HParams of its
# swept keys (the module's sweep).

GRID = ["--grid", "optimizer_params.learning_rate=0.1,0.01"]


def _status(*args):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    return CliRunner().invoke(cli, ["sweep", "--status", *map(str, args)], catch_exceptions=False)


def _table(output):
    """The table and best-trial lines (the summary line names the folder as it was given)."""
    return [line for line in output.splitlines() if not line.startswith("3 trials:")]


def test_status_from_the_folder_alone_shows_every_trial_with_its_figures(grid_sweep):
    _, out, _ = grid_sweep
    result = _status("--out", out)
    assert result.exit_code == 0, result.output
    records = read_jsonl(out / "results.jsonl")
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:] if line.startswith("trial-")}
    assert sorted(rows) == sorted(record["trial"] for record in records)
    for record in records:  # what the sweep recorded, as it printed it
        assert f" {record['status']}" in rows[record["trial"]]
        if "eval/accuracy" in (record["metrics"] or {}):  # the sweep's metric
            assert f"{record['metrics']['eval/accuracy']:.4g}" in rows[record["trial"]].split()
    assert "3 trials: 1 ok, 1 pruned, 1 failed" in result.output and "best: trial-" in result.output


def test_status_inside_the_folder_with_no_flags_is_the_same_table(grid_sweep, monkeypatch):
    _, out, _ = grid_sweep
    expected = _table(_status("--out", out).output)
    monkeypatch.chdir(out)
    result = _status()
    assert result.exit_code == 0, result.output
    assert _table(result.output) == expected


@pytest.mark.parametrize("extra", [[], GRID, [*GRID, "--set", "max_steps=5"]], ids=["config", "grid", "other-set"])
def test_status_with_the_config_is_the_same_table_whatever_grid_or_set(grid_sweep, extra):
    command, out, _ = grid_sweep
    expected = _table(_status("--out", out).output)
    result = _status(*command[:4], *extra, "--out", out)  # its two -c
    assert result.exit_code == 0, result.output
    assert _table(result.output) == expected
    assert "stale" not in result.output


def test_status_where_no_sweep_ran_is_one_line_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _status()
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: no study in {tmp_path}: give the sweep's --out (or --storage and --study), or run inside its folder"]


def _hparams_table(folder):
    """What TensorBoard's HParams tab gets for `tensorboard --logdir folder`: the experiment's hparam names, and
    each session's `{name: value}` by its run, through TensorBoard's own loaders and hparams backend."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context, metadata

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(folder))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(folder))
    backend = backend_context.Context(base_plugin.TBContext(data_provider=provider, logdir=str(folder),
                                                            multiplexer=multiplexer))
    ctx = context.RequestContext()
    experiment = backend.experiment_from_metadata(
        ctx, "", True, backend.hparams_metadata(ctx, ""), backend.hparams_from_data_provider(ctx, "", None))
    sessions = {}
    for run, tags in multiplexer.PluginRunToTagToContent(metadata.PLUGIN_NAME).items():
        if metadata.SESSION_START_INFO_TAG in tags:
            start = metadata.parse_session_start_info_plugin_data(tags[metadata.SESSION_START_INFO_TAG])
            sessions[run] = {name: value.number_value for name, value in start.hparams.items()}
    return [info.name for info in experiment.hparam_infos], sessions


def test_hparams_of_a_sweep_are_its_swept_keys_alone(grid_sweep):
    _, out, _ = grid_sweep
    names, sessions = _hparams_table(out)
    # The base config's keys (batch_size_per_gpu, model_params.hidden_units, the --set ones, ...) are
    # the same in every trial: no column of theirs hides the swept learning rate.
    assert names == ["optimizer_params.learning_rate"]
    records = read_jsonl(out / "results.jsonl")
    assert sessions == {record["trial"]: record["overrides"] for record in records}


def test_a_rerun_runs_nothing_again_and_status_reads_the_study(grid_sweep):
    command, out, first = grid_sweep
    # Re-running: the study remembers every trial, so nothing runs again. (Replaced on purpose:
    # deleting a trial's final_metrics.json no longer makes it unfinished; the study is the
    # record. Resuming a trial left running is covered in test_driver.py.)
    before = logs(out)
    second = opt_sweep(command)
    assert second.returncode == 0, second.stderr[-3000:]
    assert logs(out) == before
    assert len(read_jsonl(out / "results.jsonl")) == 3
    order = [row.split()[0] for row in table_rows(first.stdout)]
    assert [row.split()[0] for row in table_rows(second.stdout)] == order
    assert "0 trials queued" in second.stderr

    status = opt_sweep(command + ["--status"])
    assert status.returncode == 0, status.stderr[-3000:]
    assert "3 trials: 1 ok, 1 pruned, 1 failed" in status.stdout
    assert "best: " in status.stdout
