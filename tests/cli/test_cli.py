"""The CLI from a user's seat: exit codes, error lines, and one end-to-end run per built-in model."""

import pytest

from tests.support import CONFIGS, NO_TENSORFLOW, main_code, read_json, run_python

TINY = {"print_loss_steps": 5, "save_summaries_steps": 5, "save_checkpoint_steps": 10}


def test_help_does_not_import_tensorflow():
    commands = ("train", "eval", "validate", "list", "lr", "sweep", "convert")
    done = run_python(main_code(["--help"], *([command, "--help"] for command in commands)))
    assert done.returncode == 0, done.stderr
    assert "train" in done.stdout and "validate" in done.stdout


def test_bad_config_is_one_line_exit_2_no_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("model: mlp\nmax_steps: 10\noptimizer: Adamm\n")
    code = main_code(["validate", "--config", config], on_exit="code = stop.code",
                     then=NO_TENSORFLOW + "sys.exit(code)\n")
    done = run_python(code)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "bad.yaml:3" in lines[0] and "optimizer" in lines[0] and "Adam" in lines[0]


def test_validate_prints_effective_config_and_global_batch(cli):
    result = cli("validate", "--config", CONFIGS / "default.yaml", "--set", "iter_size=4", "--np", "2")
    assert result.exit_code == 0, result.output
    assert "iter_size: 4" in result.output
    assert "global_batch: 512" in result.output  # 64 x 2 ranks x 4


def test_bad_optimizer_parameter_found_at_build_is_exit_2(cli, write_config):
    config = write_config({"max_steps": 2, "optimizer": "Adam", "optimizer_params": {"bta1": 0.9}})
    result = cli("train", "--config", config)
    assert result.exit_code == 2
    assert "optimizer_params" in result.output and "beta" in result.output
    assert "optimizer_params.bta1: unknown key; did you mean 'beta_1'? [unknown_key]" in result.output


@pytest.mark.parametrize(
    "optimizer, params, expected",
    [
        ("Adam", {"beta_1": "high"}, "optimizer_params.beta_1: must be a number. Received: 'high' [wrong_type]"),
        ("Momentum", {"learning_rate": 0.1}, "optimizer_params.momentum: is required"),
    ],
)
def test_errors_found_while_building_are_located_like_load_errors(cli, write_config, optimizer, params, expected):
    config = write_config({"max_steps": 2, "optimizer": optimizer, "optimizer_params": params})
    result = cli("train", "--config", config)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{config}:" in result.output and expected in result.output, result.output


MLP_DIGITS = {"model": "mlp", "model_params": {"hidden_units": [32]}, "data": "digits", "max_steps": 20,
              "batch_size_per_gpu": 16, **TINY}


@pytest.fixture(scope="module")
def mlp_digits_run(tmp_path_factory):
    """`(config, folder)`: MLP_DIGITS trained through the CLI once for the module, into folder/run."""
    from tests.support import train_in_process

    folder = tmp_path_factory.mktemp("mlp_digits")
    return train_in_process(folder, MLP_DIGITS)[0], folder


@pytest.mark.parametrize(
    "model, data, model_params, metric",
    [
        ("mlp", "digits", {"hidden_units": [32]}, "eval/accuracy"),  # the module's run (MLP_DIGITS)
        ("cnn", "digits", {"filters": [4], "dense_units": 16}, "eval/accuracy"),
        pytest.param("transformer", "reversal", {"d_model": 16, "num_heads": 2, "num_layers": 1, "ff_dim": 32},
                     "eval/perplexity", marks=pytest.mark.slow),  # 33 s measured on 2 loaded cores
        ("mlp", "synthetic_regression", {"hidden_units": [16]}, "eval/mse"),
    ],
)
def test_train_end_to_end_per_model(cli, write_config, tmp_path, request, model, data, model_params, metric):
    if (model, data) == ("mlp", "digits"):
        config, folder = request.getfixturevalue("mlp_digits_run")
        run = folder / "run"
    else:
        config = write_config(
            {"model": model, "model_params": model_params, "data": data, "max_steps": 20,
             "batch_size_per_gpu": 16, **TINY}
        )
        result = cli("train", "--config", config)
        assert result.exit_code == 0, result.output
        run = tmp_path / "run"
    final = read_json(run / "final_metrics.json")
    assert final["global_step"] == 20
    assert metric in final
    assert (run / "config.yaml").exists()
    assert (run / "metrics.jsonl").read_text().count("\n") >= 4
    assert list((run / "train").glob("events.out.tfevents.*"))
    assert (run / "checkpoints" / "checkpoint").exists()

    evaluated = cli("eval", "--config", config)
    assert evaluated.exit_code == 0, evaluated.output
    assert metric in evaluated.output


def test_list_shows_every_name_with_parameters_and_defaults(cli):
    from opt_train.lr_policies.registry import POLICY_NAMES
    from opt_train.optimizers.table import OPTIMIZER_NAMES

    result = cli("list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name in OPTIMIZER_NAMES:
        assert any(line.startswith(f"{name} ") for line in lines), name
    # An optimizer's parameters are on the line after its name and summary.
    assert any(line.startswith("Momentum ") and "momentum (required)" in after for line, after in zip(lines, lines[1:]))
    assert any(line.startswith("RMSProp ") and "epsilon=1e-10" in after for line, after in zip(lines, lines[1:]))
    for name in POLICY_NAMES:
        assert any(line.startswith(f"{name} ") for line in lines), name
    for name in ("mlp", "cnn", "transformer", "digits", "reversal", "npz", "csv", "Backoff", "larc_summaries"):
        assert name in result.output


@pytest.mark.slow  # 24 s measured on 2 loaded cores
def test_benchmark_times_training_alone_from_a_fresh_start(cli, mlp_digits_run):
    config, folder = mlp_digits_run  # a trained run: it leaves checkpoints behind
    result = cli("train", "--config", config, "--benchmark")
    assert result.exit_code == 0, result.output
    assert "resumed" not in result.output
    assert "benchmark:" in result.output and "ms/step" in result.output
    # The trained run is left alone: the benchmark runs in a fresh folder beside it.
    assert "benchmark/updates_timed" not in read_json(folder / "run" / "final_metrics.json")
    final = read_json(folder / "run-2" / "final_metrics.json")
    assert final["benchmark/updates_timed"] == 20 - 4  # warm-up: max_steps // 5
    assert final["benchmark/time_per_step"] > 0
