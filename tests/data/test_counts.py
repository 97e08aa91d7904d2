"""`validate` counts a built-in dataset's batches per epoch as `train` does, without TensorFlow.

The reference is the data `train` builds (`build_data` with the arguments
`training.builder.build_data_for` passes it: the worker's rank and count, its replicas'
batches together).
"""

from __future__ import annotations

import pytest

from opt_train.config import derived, load_config
from opt_train.data import build_data
from opt_train.errors import ParamError
from tests.support import write_run

CASES = [
    ("digits", {}, 64, 1, 1),
    ("digits", {"eval_fraction": 0.5}, 20, 3, 1),
    ("synthetic_classification", {"num_examples": 101, "eval_fraction": 0.33}, 8, 2, 2),
    ("synthetic_regression", {"num_examples": 50}, 16, 1, 1),
    ("reversal", {"num_examples": 100, "eval_fraction": 0.01}, 7, 2, 1),
    ("synthetic_images", {"num_examples": 40, "height": 8, "width": 8}, 4, 1, 3),
]


def _config(tmp_path, data, params, batch, replicas, distributed):
    return load_config([str(write_run(tmp_path, {
        "data": data, "data_params": params, "batch_size_per_gpu": batch, "distributed": distributed,
        "num_gpus": replicas if replicas > 1 else None, "max_steps": 10,
        "model": "transformer" if data == "reversal" else "mlp",
    }, "run.yaml", logdir=None))])


@pytest.mark.parametrize("data, params, batch, workers, replicas", CASES, ids=[c[0] for c in CASES])
def test_validate_counts_the_batches_per_epoch_train_builds(tmp_path, data, params, batch, workers, replicas):
    config = _config(tmp_path, data, params, batch, replicas, "tf" if workers * replicas > 1 else "none")
    built = build_data(data, params, batch_size=batch * replicas, seed=0, rank=workers - 1, size=workers)
    assert derived(config, world_size=workers)["steps_per_epoch"] == built.steps_per_epoch


def test_a_batch_larger_than_a_workers_examples_is_refused_by_validate_as_by_train(tmp_path, cli):
    config = _config(tmp_path, "synthetic_classification", {"num_examples": 64}, 5000, 1, "none")
    with pytest.raises(ParamError) as built:
        build_data(config.data, dict(config.data_params), batch_size=5000, seed=0)
    result = cli("validate", "--config", str(tmp_path / "run.yaml"))
    assert result.exit_code == 2
    # 64 examples, 13 held out: 51, the count train's build gives.
    assert built.value.message == "must be at most the train examples per rank (51)"
    assert result.output.strip().splitlines()[-1] == (
        f"Error: {tmp_path / 'run.yaml'}:4: batch_size_per_gpu: must be at most the train examples per rank (51). "
        "Received: 5000 [out_of_range]")


def test_with_replicas_the_refusal_names_one_replicas_share_of_the_examples_and_its_batch(tmp_path, cli):
    config = _config(tmp_path, "synthetic_classification", {"num_examples": 64}, 40, 2, "tf")
    with pytest.raises(ParamError) as built:
        build_data(config.data, dict(config.data_params), batch_size=2 * 40, seed=0, replicas=2)
    assert (built.value.message, built.value.value) == (
        "must be at most the train examples per rank (51) shared by its 2 replicas (25 each)", 40)
    result = cli("validate", "--config", str(tmp_path / "run.yaml"))
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].endswith(
        "batch_size_per_gpu: must be at most the train examples per rank (51) shared by its 2 replicas (25 each). "
        "Received: 40 [out_of_range]")


def test_files_and_your_own_pipelines_are_counted_when_read():
    from opt_train.data.counts import train_examples

    assert train_examples("csv", {"path": "t.csv", "eval_fraction": 0.2}) is None
    assert train_examples("tfrecord", {}) is None


@pytest.mark.parametrize("iter_size", [1, 2, 3])
def test_validate_counts_steps_per_epoch_in_updates_as_train(tmp_path, iter_size):
    """22 micro-batches with iter_size 2 are 11 updates: train's epoch (`run_length`), validate's steps_per_epoch."""
    from opt_train.training.builder import run_length

    path = tmp_path / "run.yaml"
    path.write_text(f"data: digits\nbatch_size_per_gpu: 32\niter_size: {iter_size}\nnum_epochs: 1\n")
    config = load_config([str(path)])
    built = build_data("digits", {}, batch_size=32, seed=0, rank=1, size=2)
    figures = derived(config, world_size=2)
    assert built.steps_per_epoch == 22
    assert figures["steps_per_epoch"] == run_length(config, built)[1] == 22 // iter_size
    assert figures.get("micro_batches_per_epoch") == (22 if iter_size > 1 else None)
