"""What a finished sweep's folder answers by itself: `sweep --status` in every form, and the HParams of its swept keys.

One real sweep (two tiny trials, each an `opt-train train` process) serves every test.
"""

import os
import subprocess
import sys

import pytest

from tests.support import SMALL_RUN, read_jsonl, write_run

# Two trainer processes (TensorFlow imported in each) for the module.
pytestmark = pytest.mark.slow

GRID = ["--grid", "optimizer_params.learning_rate=0.1,0.01"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """`(config path, sweep folder)` of a sweep run with a study name and a `--set` of its own."""
    folder = tmp_path_factory.mktemp("sweep-folder")
    config = write_run(folder, {**SMALL_RUN, "max_steps": 3, "eval_steps": 3, "print_loss_steps": 3, "export": False},
                       "x.yaml")
    out = folder / "S"
    done = subprocess.run(
        [sys.executable, "-m", "opt_train", "sweep", "-c", str(config), *GRID, "--set", "max_steps=2",
         "--study", "lrs", "--out", str(out), "--parallel", "2"],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return config, out


def _status(*args):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    return CliRunner().invoke(cli, ["sweep", "--status", *map(str, args)], catch_exceptions=False)


def _table(output):
    """The table and best-trial lines (the summary line names the folder as it was given)."""
    return [line for line in output.splitlines() if not line.startswith("2 trials:")]


def test_status_from_the_folder_alone_shows_every_trial_with_its_figures(sweep):
    _, out = sweep
    result = _status("--out", out)
    assert result.exit_code == 0, result.output
    records = read_jsonl(out / "results.jsonl")
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[1:] if line.startswith("trial-")}
    assert sorted(rows) == sorted(record["trial"] for record in records)
    for record in records:  # what the sweep recorded, as it printed it
        assert rows[record["trial"]][-1] == "ok"
        assert f"{record['metrics']['eval/loss']:.4g}" in rows[record["trial"]]
    assert "2 trials: 2 ok" in result.output and "best: trial-" in result.output


def test_status_inside_the_folder_with_no_flags_is_the_same_table(sweep, monkeypatch):
    _, out = sweep
    expected = _table(_status("--out", out).output)
    monkeypatch.chdir(out)
    result = _status()
    assert result.exit_code == 0, result.output
    assert _table(result.output) == expected


@pytest.mark.parametrize("extra", [[], GRID, [*GRID, "--set", "max_steps=5"]], ids=["config", "grid", "other-set"])
def test_status_with_the_config_is_the_same_table_whatever_grid_or_set(sweep, extra):
    config, out = sweep
    expected = _table(_status("--out", out).output)
    result = _status("-c", config, *extra, "--out", out)
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


def test_hparams_of_a_sweep_are_its_swept_keys_alone(sweep):
    _, out = sweep
    names, sessions = _hparams_table(out)
    # The base config's keys (batch_size_per_gpu, model_params.hidden_units, ...) are the same in
    # every trial: no column of theirs hides the swept learning rate.
    assert names == ["optimizer_params.learning_rate"]
    records = read_jsonl(out / "results.jsonl")
    assert sessions == {record["trial"]: record["overrides"] for record in records}
