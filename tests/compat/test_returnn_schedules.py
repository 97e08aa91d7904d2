"""RETURNN's learning-rate rules, written the RETURNN way, against NumPy transcriptions of RETURNN's code.

References, re-computed here from RETURNN's own definitions (returnn/learning_rate_control.py,
docs/configuration_reference/optimizer_settings.rst):
- `learning_rates = [r1, r2, ...]`: epoch e (1-based) trains at r_e on all its updates; an
  epoch past the list gets the last epoch's rate (ConstantLearningRate).
- Noam as RETURNN's docs write it: `learning_rate * d^-0.5 * min(n^-0.5, n * W^-1.5)` with
  `n = global_train_step`, the updates applied before this one (returnn/tf/updater.py
  increments it after the optimizer op).
"""

import pathlib

import json

import numpy as np
import pytest

from opt_train.config import load_config
from opt_train.convert import convert
from tests.support import write_run

HERE = pathlib.Path(__file__).parent / "returnn"
RATES = [0.0001, 0.0004, 0.0007, 0.001]


def returnn_learning_rates(updates, updates_per_epoch, rates):
    """The rate of each update 1..`updates` under RETURNN's per-epoch list."""
    update = np.arange(1, updates + 1)
    epoch = (update - 1) // updates_per_epoch + 1
    return np.asarray(rates, np.float64)[np.minimum(epoch, len(rates)) - 1]


@pytest.fixture
def returnn_config(tmp_path):
    """A RETURNN config with a per-epoch list, converted, with a tiny model and data layered over it."""
    source = tmp_path / "returnn.config"
    source.write_text(
        "adam = True\n"
        "learning_rate = 0.0005\n"
        f"learning_rates = {RATES!r}\n"
        "num_epochs = 6\n"
        "accum_grad_multiple_step = 2\n"
    )
    converted = tmp_path / "converted.yaml"
    converted.write_text(convert("returnn", str(source)).to_yaml())
    # 48 examples, some held out for eval: 4 training batches of 8, 2 updates per epoch (iter_size 2).
    swap = write_run(tmp_path, {
        "model": "mlp", "model_params": {"hidden_units": [4]}, "data": "synthetic_classification",
        "data_params": {"num_examples": 48}, "batch_size_per_gpu": 8,
    }, "swap.yaml")
    return [converted, swap]


def _updates_per_epoch(config):
    from opt_train.distributed import SingleProcess
    from opt_train.training.builder import build_data_for, run_length

    return run_length(config, build_data_for(config, SingleProcess()))


def test_converted_learning_rates_hold_each_epoch_from_its_first_update(returnn_config):
    config = load_config(returnn_config)
    max_steps, per_epoch = _updates_per_epoch(config)
    from opt_train.training.builder import learning_rate_schedule

    schedule, _ = learning_rate_schedule(config, max_steps, per_epoch)
    # schedule(t) is the rate of update t + 1 (t updates applied before it).
    got = np.asarray(schedule(np.arange(max_steps)), np.float64)
    expected = returnn_learning_rates(max_steps, per_epoch, RATES)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # The last update of epoch 1 and the first of epoch 2, named.
    assert got[per_epoch - 1] == pytest.approx(RATES[0], rel=1e-6)
    assert got[per_epoch] == pytest.approx(RATES[1], rel=1e-6)
    # Past the list, its last value.
    assert got[-1] == pytest.approx(RATES[-1], rel=1e-6)


def test_opt_train_lr_prints_returnns_rates(cli, returnn_config, tmp_path):
    config = load_config(returnn_config)
    max_steps, per_epoch = _updates_per_epoch(config)
    args = [item for path in returnn_config for item in ("--config", path)]
    result = cli("lr", *args, "--every", "1", "--csv", tmp_path / "lr.csv")
    assert result.exit_code == 0, result.output
    rows = np.loadtxt(tmp_path / "lr.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(rows[:, 0], np.arange(max_steps))
    np.testing.assert_allclose(rows[:, 1], returnn_learning_rates(max_steps, per_epoch, RATES), rtol=1e-6)


def test_training_logs_returnns_rate_on_each_update(returnn_config, tmp_path):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.loop import Session

    config = load_config(returnn_config, ["save_summaries_steps=1", "print_loss_steps=1"])
    session = Session(build_run(config, get_backend()))
    try:
        session.start(resume=False)
        session.loop(until=5)
        per_epoch = session.run.updates_per_epoch
        session.finish()
    finally:
        session.close()
    assert per_epoch == 2
    logged = {}
    for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "learning_rate" in record:
            logged[record["step"]] = record["learning_rate"]
    # A record's step counts the updates including its own.
    steps = sorted(logged)
    assert steps == [1, 2, 3, 4, 5]
    np.testing.assert_allclose([logged[s] for s in steps], returnn_learning_rates(5, per_epoch, RATES), rtol=1e-6)


def returnn_noam(global_train_step, learning_rate, warmup_n, model_d):
    """RETURNN's documented `noam(n=global_train_step, ...)` times its learning_rate, in float64."""
    n = np.asarray(global_train_step, np.float64)
    with np.errstate(divide="ignore"):
        shape = np.minimum(np.power(n, -0.5), n * np.power(float(warmup_n), -1.5))
    return learning_rate * np.power(float(model_d), -0.5) * shape


def test_returnns_noam_converts_to_returnns_numbers(tmp_path):
    converted = tmp_path / "noam.yaml"
    converted.write_text(convert("returnn", str(HERE / "transformer_noam.config")).to_yaml())
    config = load_config([converted], ["model=mlp", "data=digits"])
    from opt_train.training.builder import learning_rate_schedule

    schedule, _ = learning_rate_schedule(config, 300000, 1)
    warmup = 25000
    # schedule(t): the rate of the update made when t updates were applied (global_train_step t).
    steps = np.array([0, 1, warmup, 10 * warmup])
    got = np.asarray(schedule(steps), np.float64)
    expected = returnn_noam(steps, 1.0, warmup, 512)
    assert got[0] == 0.0 == expected[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_openseq2seqs_transformer_policy_keeps_its_own_origin():
    from opt_train.lr_policies import functional

    # OpenSeq2Seq's transformer_policy: n = global_step + 1, so its first update is not 0.
    got = float(functional.transformer_policy(0, 2.0, 512, 4000))
    assert got == pytest.approx(2.0 * 512**-0.5 * 4000**-1.5, rel=1e-6)
    assert float(functional.transformer_policy(4000, 2.0, 512, 4000, step_offset=0)) == pytest.approx(
        float(returnn_noam(4000, 2.0, 4000, 512)), rel=1e-6)
