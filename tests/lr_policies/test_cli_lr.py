"""`opt-train lr` through click's CliRunner: output, files, exit codes."""

import lr_reference as ref
import numpy as np
import pytest

BASE = {
    "model": "mlp",
    "data": "digits",
    "max_steps": 200,
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
    "lr_policy": "poly",
    "lr_policy_params": {"power": 2.0, "min_lr": 0.001},
}


def table(output):
    """{step: value} from the printed table."""
    rows = output.split("learning_rate\n", 1)[1].splitlines()
    return {int(step): float(value) for step, value in (row.split() for row in rows)}


def test_prints_the_schedule_of_the_run(cli, write_config):
    result = cli("lr", "--config", write_config(BASE), "--every", "50")
    assert result.exit_code == 0, result.output
    rows = table(result.output)
    assert sorted(rows) == [0, 50, 100, 150, 199]
    expected = ref.curve(ref.poly, sorted(rows), 0.1, decay_steps=200, power=2.0, min_lr=0.001)
    np.testing.assert_allclose([rows[s] for s in sorted(rows)], expected, rtol=1e-5)
    assert "peak:    0.1 (step 0)" in result.output


def test_iter_size_does_not_stretch_the_schedule(cli, write_config):
    plain = cli("lr", "--config", write_config(BASE), "--every", "20")
    accumulated = cli("lr", "--config", write_config({**BASE, "iter_size": 4}), "--every", "20")
    assert accumulated.exit_code == 0, accumulated.output
    assert table(accumulated.output) == table(plain.output)


def test_writes_csv_and_plot(cli, write_config, tmp_path):
    config = write_config({**BASE, "warmup": {"steps": 20}})
    result = cli("lr", "--config", config, "--csv", tmp_path / "lr.csv", "--plot", tmp_path / "lr.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "lr.csv").read_text().startswith("step,learning_rate\n0,0.0\n")
    assert (tmp_path / "lr.png").read_bytes()[:4] == b"\x89PNG"
    assert "warmup: 20 updates" in result.output
    rows = len((tmp_path / "lr.csv").read_text().splitlines()) - 1
    assert f"wrote {tmp_path / 'lr.csv'}: {rows} rows of step,learning_rate" in result.output
    assert f"wrote {tmp_path / 'lr.png'}: the learning rate over " in result.output


def test_epoch_run_counts_piecewise_boundaries_in_the_runs_epochs(cli, write_config):
    from opt_train.data import build_data

    config = {**BASE, "num_epochs": 4, "batch_size_per_gpu": 64, "lr_policy": "piecewise",
              "lr_policy_params": {"boundaries": [1, 2], "decay_rates": [0.5, 0.25]}}
    del config["max_steps"]
    # The epoch length training uses: this rank's batches per epoch of the real split.
    per_epoch = build_data("digits", {}, batch_size=64, seed=0).steps_per_epoch
    result = cli("lr", "--config", write_config(config), "--every", "1")
    assert result.exit_code == 0, result.output
    rows = table(result.output)
    assert max(rows) == 4 * per_epoch - 1
    # As TF's piecewise_constant: the old value holds at the boundary step itself.
    assert (rows[per_epoch], rows[per_epoch + 1]) == (0.1, 0.05)
    assert (rows[2 * per_epoch], rows[2 * per_epoch + 1]) == (0.05, 0.025)


@pytest.mark.parametrize(
    "override, key",
    [
        ("lr_policy_params.powr=2", "lr_policy_params"),
        ("warmup.steps=-3", "warmup"),
        ("lr_policy=polly", "lr_policy"),
    ],
)
def test_bad_policy_config_exits_2_naming_the_key(cli, write_config, override, key):
    result = cli("lr", "--config", write_config(BASE), "--set", override)
    assert result.exit_code == 2
    assert key in result.output and "Traceback" not in result.output


def test_says_which_optimizer_groups_train_at_a_multiple_of_the_rate(cli, write_config):
    groups = [{"variables": "bias$"}, {"variables": "^logits/", "lr_multiplier": 10}]
    result = cli("lr", "--config", write_config({**BASE, "optimizer_groups": groups}), "--every", "50")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        "the run's rate; these groups train at it times their lr_multiplier: optimizer_groups[1] x 10")
