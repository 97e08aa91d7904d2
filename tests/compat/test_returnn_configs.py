"""RETURNN configs, transcribed: `convert returnn` maps each as RETURNN means it, and the result validates and trains."""

import math
import pathlib

import pytest

from opt_train.config import load_config
from opt_train.convert import convert
from tests.compat.runs import train_two_updates
from tests.support import write_run

HERE = pathlib.Path(__file__).parent / "returnn"

# Read off each fixture by hand: the opt-train values RETURNN's keys mean, and keys that must be
# listed as not carried.
EXPECTED = {
    "native_lstm_12ax.config": (
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.01, "epsilon": 1e-16}, "num_epochs": 5.0},
        ("network", "batch_size", "max_seqs", "chunking", "train", "dev", "model"),
    ),
    "maxgradnorm_lstm_12ax.config": (
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.01, "epsilon": 1e-16}, "num_epochs": 100.0,
         "max_grad_norm": None},
        ("network", "batch_size", "max_seqs", "save_interval", "maximize_grad_norm"),
    ),
    "lua_torch_layer.config": (
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.01, "epsilon": 1e-16}, "num_epochs": 100.0},
        ("network", "batch_size", "save_interval"),
    ),
    "rhn_enwik8.config": (
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.001, "epsilon": 1e-8},
         "num_epochs": 150.0, "logdir": "/tmp/returnn/rhn-enwik8", "gradient_transforms": []},
        ("network", "max_seqs"),
    ),
    "timit_lstm_ctc.config": (
        {"optimizer": "ReturnnNadam", "optimizer_params": {"learning_rate": 0.001, "epsilon": 1e-16},
         "num_epochs": 100.0,
         "logdir": "/tmp/returnn/timit",
         "gradient_transforms": [{"factory": "gradient_noise", "params": {"stddev": 0.1}, "after": "finite"}],
         "lr_control": {"mode": "newbob", "monitor": "loss", "decay": 0.8, "growth": 1.0,
                        "relative_error_threshold": -0.01, "relative_error_div_by_old": False,
                        "relative_error_relative_lr": True, "min_learning_rate": 0.0}},
        ("network", "batch_size", "max_seqs", "eval_steps"),
    ),
    "transformer_noam.config": (
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 1, "epsilon": 1e-8}, "num_epochs": 20.0,
         "lr_policy": "transformer",
         "lr_policy_params": {"d_model": 512, "warmup_steps": 25000, "step_offset": 0}},
        ("network", "batch_size", "max_seqs", "extern_data"),
    ),
    "conformer_schedule.py": (
        {"optimizer": "ReturnnNadam", "optimizer_params": {"learning_rate": 0.0001, "epsilon": 1e-8},
         "num_epochs": 1000.0, "iter_size": 2, "max_grad_norm": 1.0, "lr_policy": "piecewise",
         "lr_control": {"mode": "newbob", "monitor": "loss", "decay": 0.5, "growth": 1.0,
                        "relative_error_threshold": -0.01, "relative_error_div_by_old": False,
                        "relative_error_relative_lr": False, "min_learning_rate": 0.001 / 50}},
        ("batch_size", "max_seqs", "eval_steps"),
    ),
}
# The built-in model and data a user fills in where RETURNN had `network` and `train`.
SWAP = {"model": "mlp", "model_params": {"hidden_units": [8]}, "data": "synthetic_classification",
        "data_params": {"num_examples": 256}, "batch_size_per_gpu": 8, "eval_steps": 1}


def converted(name, tmp_path):
    """`opt-train convert returnn` of fixture `name`, with the model and data filled in as a second layer."""
    out = tmp_path / "converted.yaml"
    out.write_text(convert("returnn", str(HERE / name)).to_yaml())
    return out, write_run(tmp_path, SWAP, "swap.yaml")


def test_the_suite_has_five_or_more_returnn_configs():
    assert set(EXPECTED) <= {path.name for path in HERE.iterdir()}
    assert len(EXPECTED) >= 5


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_convert_carries_what_returnn_means(name, tmp_path):
    out, _ = converted(name, tmp_path)
    # Validates as converted with a model and data named, and eval_steps filled in where the
    # comments ask for it (RETURNN's newbob decides once per epoch).
    config = load_config([out], ["eval_steps=50", "model=mlp", "data=digits"]).to_dict()
    values, dropped = EXPECTED[name]
    for key, value in values.items():
        assert config[key] == value, key
    comments = out.read_text().partition("# Not carried")[2]
    for key in dropped:
        assert f"#   {key}: " in comments, key


def test_learning_rates_switch_at_each_epoch_boundary(tmp_path):
    """`learning_rates`: epoch k trains at the k-th value from its first update; the last value holds."""
    out, swap = converted("conformer_schedule.py", tmp_path)
    config = load_config([out, swap])
    base = config.optimizer_params["learning_rate"]
    rates = [base] + [base * rate for rate in config.lr_policy_params["decay_rates"]]
    assert config.lr_policy_params["boundaries"] == [1, 2, 3]
    assert config.lr_policy_params["switch_on_boundary"] is True
    assert rates == pytest.approx([0.0001, 0.0004, 0.0007, 0.001], rel=1e-12)


def test_a_file_that_is_no_returnn_config_is_refused(tmp_path, cli):
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    result = cli("convert", "returnn", other)
    assert result.exit_code == 2
    assert "not a RETURNN config" in result.output


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=pytest.mark.slow) if name != "conformer_schedule.py" else name
             for name in sorted(EXPECTED)]
)
def test_converted_config_trains(name, tmp_path):
    out, swap = converted(name, tmp_path)
    config, final = train_two_updates([out, swap], tmp_path / "run")
    assert final["global_step"] == 2
    assert math.isfinite(final["train/loss"])
