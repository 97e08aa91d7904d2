"""`deterministic: true`: two runs of one config give bitwise-equal weights and figures; another seed does not."""

import json

import numpy as np
import pytest

from tests.support import END_WITHOUT_TEARDOWN, SMALL_RUN, run_python, write_run

pytestmark = pytest.mark.slow  # two training processes, three runs

# Dropout draws from the seeded generators; max_grad_norm adds a reduction over every gradient.
RUN = {**SMALL_RUN, "model_params": {"hidden_units": [16], "dropout": 0.3}, "max_steps": 12,
       "print_loss_steps": 3, "eval_steps": 6, "max_grad_norm": 1.0, "deterministic": True}
# `opt-train train` for each config named, one after the other, in one process; without the
# end-of-run export (no test here looks at it: conftest.py's no_export, in that process).
TRAIN = ("import sys\nfrom opt_train.cli.main import main\nfrom opt_train.training import export\n"
         "export.export_at_end = lambda run, say: None\nfor config in sys.argv[1:]:\n"
         "    try:\n        main(['train', '--config', config])\n"
         "    except SystemExit as stop:\n        assert not stop.code, stop.code\n" + END_WITHOUT_TEARDOWN)


def _config(folder, **changes):
    return write_run(folder, {**RUN, **changes})


def _train(*configs):
    done = run_python(TRAIN, *configs)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count("deterministic: op determinism on") == len(configs)


def _read(folder):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(folder / "run" / "checkpoints"))
    weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
               if name.startswith(("model_variables/", "optimizer/"))}
    records = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        record.pop("samples_per_sec", None)  # a timing, the one figure that is not the run's
    return weights, records


def test_two_deterministic_runs_are_bitwise_equal_and_another_seed_is_not(tmp_path):
    # The two equal runs in two processes; the other seed's after the second, in its process
    # (op determinism is on for the whole process, so not in this one).
    _train(_config(tmp_path / "a"))
    _train(_config(tmp_path / "b"), _config(tmp_path / "c", random_seed=1))
    first_weights, first_records = _read(tmp_path / "a")
    second_weights, second_records = _read(tmp_path / "b")
    assert len(first_weights) > 4 and first_weights.keys() == second_weights.keys()
    for name, value in first_weights.items():
        assert value.tobytes() == second_weights[name].tobytes(), name
    assert json.dumps(first_records) == json.dumps(second_records)  # every float to the last bit

    other_weights, _ = _read(tmp_path / "c")
    assert any(not np.array_equal(value, other_weights[name]) for name, value in first_weights.items())
