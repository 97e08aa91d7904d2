"""Resume: a run stopped and restarted ends bit-for-bit where an uninterrupted run ends."""

import json
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tests.support import checkpoint_tensors, kill_while_saving, read_json

# Dropout (RNG state), momentum slots and a decaying lr all have to come back.
RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [16], "dropout": 0.2},
    "data": "digits",
    "batch_size_per_gpu": 16,
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.05, "momentum": 0.9},
    "lr_policy": "exp",
    "lr_policy_params": {"decay_steps": 10, "decay_rate": 0.5},
    "print_loss_steps": 5,
    "save_checkpoint_steps": 10,
    "random_seed": 3,
}


# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


@pytest.mark.slow  # 22 s measured on 2 loaded cores: three runs
def test_resumed_run_equals_uninterrupted_run(cli, write_config, tmp_path):
    whole = write_config({**RUN, "max_steps": 30, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0

    first_leg = write_config({**RUN, "max_steps": 15, "logdir": str(tmp_path / "legs")}, "leg1.yaml")
    assert cli("train", "--config", first_leg).exit_code == 0
    second_leg = write_config({**RUN, "max_steps": 30, "logdir": str(tmp_path / "legs")}, "leg2.yaml")
    result = cli("train", "--config", second_leg)
    assert result.exit_code == 0, result.output
    assert "resumed from" in result.output

    expected, actual = checkpoint_tensors(tmp_path / "whole"), checkpoint_tensors(tmp_path / "legs")
    assert expected.keys() == actual.keys()
    assert sum(name.startswith("model_variables/") for name in expected) == 5  # 4 weights + RNG
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    assert read_json(tmp_path / "legs" / "final_metrics.json")["global_step"] == 30


@pytest.mark.slow  # 6 s on 2 cores
def test_random_seed_makes_a_run_reproducible(cli, write_config, tmp_path):
    states = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        config = write_config({**RUN, "max_steps": 10, "random_seed": seed, "logdir": str(tmp_path / name)}, f"{name}.yaml")
        assert cli("train", "--config", config).exit_code == 0
        states[name] = checkpoint_tensors(tmp_path / name)
    for key in states["a"]:
        np.testing.assert_array_equal(states["a"][key], states["b"][key], err_msg=key)
    assert any(not np.array_equal(states["a"][k], states["c"][k]) for k in states["a"])


@pytest.mark.slow
def test_a_run_killed_while_saving_resumes_from_a_loadable_checkpoint(cli, write_config, tmp_path):
    """SIGKILL a run that saves every update, then resume it (in this process): the index never points at a half checkpoint."""
    config = write_config({**RUN, "max_steps": 100000, "save_checkpoint_steps": 1, "print_loss_steps": 1000})
    index = tmp_path / "run" / "checkpoints" / "checkpoint"
    kill_while_saving(config, index, settle_seconds=1.5)
    assert index.exists()
    killed_at = tf.train.latest_checkpoint(str(index.parent))
    reader = tf.train.load_checkpoint(killed_at)  # loadable, not torn
    step = int(reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))
    assert step >= 1

    resumed = cli("train", "--config", config, "--set", f"max_steps={step + 5}")
    assert resumed.exit_code == 0, resumed.output[-2000:]
    # The newest checkpoint that restores: the one the index names, or the next one when the
    # kill came after its files were complete and before the index named it (seen once in CI-like runs).
    found = re.search(r"resumed from \S*ckpt-(\d+) at step (\d+)", resumed.output)
    assert found, resumed.output[-2000:]
    assert found.group(1) == found.group(2) and int(found.group(2)) in (step, step + 1)


@pytest.mark.slow  # 3 s on 2 cores
def test_restarting_a_finished_run_keeps_its_figures(cli, write_config, tmp_path):
    config = write_config({**RUN, "max_steps": 10, "logdir": str(tmp_path / "run")})
    assert cli("train", "--config", config).exit_code == 0
    before = read_json(tmp_path / "run" / "final_metrics.json")
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())

    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "nothing to train: step 10 has reached max_steps" in result.output
    after = read_json(tmp_path / "run" / "final_metrics.json")
    assert np.isfinite(before["train/loss"])
    assert after == before  # same loss, step and skipped count; the same weights evaluate the same
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == checkpoints


def _read_records(logdir):
    path = logdir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Ctrl-C from outside, here. A scheduler's SIGTERM takes the same handler (training/interrupt.py's SIGNALS):
# its exit 143, its line and its exact resume (every figure and tensor) are tests/training/test_stop_figures.py's
# on-SIGTERM case, and a SIGTERM sent from outside is test_tf_launch.py's, to the launcher.
@pytest.mark.slow
@pytest.mark.parametrize("sent", [signal.SIGINT], ids=["SIGINT"])
def test_a_signalled_run_saves_where_it_stopped_and_resumes_exactly(sent, cli, write_config, tmp_path):
    """Ctrl-C: a checkpoint at an update boundary, exit 128 + signal."""
    leg = {**RUN, "max_steps": 100000, "save_checkpoint_steps": 100000, "logdir": str(tmp_path / "legs")}
    config = write_config(leg, "legs.yaml")
    job = subprocess.Popen([sys.executable, "-m", "opt_train", "train", "--config", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(r["step"] >= 20 for r in _read_records(tmp_path / "legs")) and time.monotonic() < deadline:
            time.sleep(0.1)
        job.send_signal(sent)
        _, stderr = job.communicate(timeout=120)
    finally:
        job.kill()
    assert job.returncode == 128 + sent, stderr[-2000:]
    step = _read_records(tmp_path / "legs")[-1]["step"]
    assert _read_records(tmp_path / "legs")[-1]["interrupted"] == signal.Signals(sent).name
    assert f"interrupted by {signal.Signals(sent).name} at step {step}: checkpoint saved" in stderr
    assert "Traceback" not in stderr
    saved = tf.train.latest_checkpoint(str(tmp_path / "legs" / "checkpoints"))
    assert saved.endswith(f"ckpt-{step}") and step >= 20

    # Resumed to step + 10, it ends where a run of step + 10 updates without a stop ends.
    resumed = cli("train", "--config", config, "--set", f"max_steps={step + 10}")
    assert resumed.exit_code == 0, resumed.output
    whole = write_config({**leg, "max_steps": step + 10, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0
    expected, actual = checkpoint_tensors(tmp_path / "whole"), checkpoint_tensors(tmp_path / "legs")
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
