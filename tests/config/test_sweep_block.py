"""The `sweep:` block is judged by the config layer: `validate`, `train` and `sweep` refuse a bad block alike, each
problem at its full key, file and line, exit 2 (TF-free)."""

import pytest
from click.testing import CliRunner

from opt_train.cli.main import cli
from opt_train.config import ConfigError, load_config
from tests.support import CONFIGS

BLOCK = """max_steps: 2
sweep:
  grid:
    logdir: [a, b]
    optimizer_params.learning_rate: [0.1, 0.01]
  random:
    sweep.metric: {choice: [x]}
  pruner: {median: {n_startup: 2}}
  sampler: tpee
  trials: 0
"""
# The problems of BLOCK, each at its key and line.
EXPECTED = {
    "sweep.grid.logdir": (4, "conflict"),
    "sweep.random.sweep.metric": (7, "conflict"),
    "sweep.pruner.median.n_startup": (8, "unknown_key"),
    "sweep.sampler": (9, "unknown_name"),
    "sweep.trials": (10, "out_of_range"),
}


@pytest.fixture
def bad(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(BLOCK)
    return path


def test_loading_the_config_reports_every_bad_sweep_key_at_its_line(bad):
    with pytest.raises(ConfigError) as error:
        load_config([str(bad)])
    found = {issue.key: (issue.line, issue.code) for issue in error.value.issues}
    assert found == EXPECTED
    assert all(issue.file == str(bad) for issue in error.value.issues)


@pytest.mark.parametrize("command", [["validate"], ["sweep", "--dry-run"], ["train"]])
def test_validate_train_and_sweep_refuse_it_alike(bad, command, tmp_path):
    result = CliRunner().invoke(cli, [*command, "-c", str(bad)])
    assert result.exit_code == 2, result.output
    assert f"Error: {bad}:4: sweep.grid.logdir: is set by the sweep for every trial and cannot be swept [conflict]" \
        in result.output
    for key, (line, code) in EXPECTED.items():
        assert f"{bad}:{line}: {key}: " in result.output and f"[{code}]" in result.output
    assert "Traceback" not in result.output


def test_a_good_block_loads_and_the_command_line_still_completes_it():
    config = load_config([str(CONFIGS / "sweep.yaml")])
    assert config.sweep["trials"] == 4
    # Ranges without draws are fine in YAML: `--random N` may give them.
    load_config([str(CONFIGS / "default.yaml")],
                ["sweep.random={optimizer_params.learning_rate: {log_uniform: [0.0001, 0.1]}}"])


def test_an_option_that_names_a_reserved_key_is_reported_at_the_option():
    result = CliRunner().invoke(cli, ["sweep", "-c", str(CONFIGS / "default.yaml"), "--grid", "logdir=a,b", "--dry-run"])
    assert result.exit_code == 2
    assert "--grid: logdir: is set by the sweep for every trial and cannot be swept [conflict]" in result.output


# `sweep.metric` against what a trial of this config reports (`eval_metric_names`: the task's, `loss`, `metrics`).
METRIC_HEAD = "max_steps: 2\neval_steps: 2\n"


@pytest.mark.parametrize("text, line, said", [
    ("sweep:\n  grid: {optimizer_params.learning_rate: [0.1, 0.01]}\n  metric: eval/acuracy\n", 5,
     "did you mean 'eval/accuracy'?"),
    ("data: synthetic_regression\nsweep: {repeats: 2, metric: eval/accuracy}\n", 4,
     "(regression runs report train/loss, global_step, skipped_steps, eval/loss, eval/mse, eval/mae)"),
    ("metrics: [sparse_top_k_categorical_accuracy]\nsweep: {repeats: 2, metric: eval/sparse_top_k_acuracy}\n", 4,
     "did you mean 'eval/sparse_top_k_categorical_accuracy'?"),
])
def test_validate_refuses_a_sweep_metric_no_trial_reports_in_one_line(tmp_path, text, line, said):
    path = tmp_path / "run.yaml"
    path.write_text(METRIC_HEAD + text)
    result = CliRunner().invoke(cli, ["validate", "-c", str(path)])
    assert result.exit_code == 2, result.output
    [error] = [row for row in result.output.splitlines() if row.startswith("Error:")]
    assert error.startswith(f"Error: {path}:{line}: sweep.metric: no trial reports ")
    assert error.endswith("[unknown_name]")
    assert said in error
    assert "Traceback" not in result.output


def test_a_sweep_metric_of_the_configs_own_metrics_or_run_figures_loads(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(METRIC_HEAD + "metrics: [sparse_top_k_categorical_accuracy]\n"
                    "sweep: {repeats: 2, metric: eval/sparse_top_k_categorical_accuracy}\n")
    assert load_config([str(path)]).sweep["metric"] == "eval/sparse_top_k_categorical_accuracy"
    load_config([str(path)], ["sweep.metric=train/loss"])
    load_config([str(path)], ["data=synthetic_regression", "metrics=[]", "sweep.metric=eval/mae"])
