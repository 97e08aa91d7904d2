"""A TFRecord run stopped inside an epoch and run again ends equal, tensor for tensor, to an uninterrupted run.

The first leg ends at its max_steps, in this process: where the pipeline stands is what its
checkpoint holds, however the process then ended. What a SIGKILL adds (the newest checkpoint
that restores, an index a save behind) does not depend on the dataset: it is
tests/e2e/test_resume.py's run killed while saving.
"""

import numpy as np
import pytest
import tensorflow as tf
import yaml

from tests.support import read_json, write_run

RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [16], "dropout": 0.2},
    "batch_size_per_gpu": 16,  # 200 train examples: 12 updates an epoch, 8 examples left out of each
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.05, "momentum": 0.9},
    "print_loss_steps": 1,
    "save_checkpoint_steps": 7,  # checkpoints fall inside epochs, never on their edges alone
    "save_summaries_steps": None,
    "random_seed": 3,
}


def _state(logdir):
    reader = tf.train.load_checkpoint(str(logdir / "checkpoints"))
    names = [n for n in reader.get_variable_to_shape_map() if not n.startswith(("_CHECKPOINTABLE", "save_counter"))]
    return {n: reader.get_tensor(n) for n in names}


# No test here looks at logdir/export: the runs in this process skip the end-of-run export (conftest.py: no_export).
@pytest.mark.slow
@pytest.mark.usefixtures("no_export")
def test_stopped_tfrecord_run_resumes_exactly(cli, tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(250, 6)).astype(np.float32), y=rng.integers(0, 3, size=250))
    converted = cli("data", "to-tfrecord", tmp_path / "d.npz", "--out", tmp_path / "rec", "--shards", 3,
                    "--compression", "GZIP", "--eval-fraction", 0.2)
    assert converted.exit_code == 0, converted.output
    block = yaml.safe_load(converted.output)
    block["data_params"]["shuffle_buffer"] = 50

    def config(name, max_steps):
        return write_run(tmp_path, {**RUN, **block, "max_steps": max_steps}, f"{name}.yaml", logdir=name)

    step = 16  # inside the second epoch (12 updates each), between its checkpoints at 14 and 21
    legs = config("legs", step)
    assert cli("train", "--config", legs).exit_code == 0
    end = step + 17  # past at least one more epoch edge

    resumed = cli("train", "--config", legs, "--set", f"max_steps={end}")
    assert resumed.exit_code == 0, resumed.output
    assert "resumed from" in resumed.output and f"at step {step}" in resumed.output
    assert cli("train", "--config", config("whole", end)).exit_code == 0

    expected, actual = _state(tmp_path / "whole"), _state(tmp_path / "legs")
    assert expected.keys() == actual.keys() and int(actual["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == end
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
    whole, legs_final = read_json(tmp_path / "whole" / "final_metrics.json"), read_json(tmp_path / "legs" / "final_metrics.json")
    assert whole["eval/accuracy"] == legs_final["eval/accuracy"]
