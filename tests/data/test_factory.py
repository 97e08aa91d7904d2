"""`data: {factory: ...}`: the user's unbatched tf.data pipeline, sharded, shuffled, batched; errors at data.factory."""

import numpy as np
import pytest

from opt_train.data import build_data
from opt_train.data.factory import FactoryError
from tests.data.factories import user_data
from tests.support import read_json

MODULE = "tests.data.factories.user_data"


def ids(dataset, batches):
    return [int(v) for batch in dataset.take(batches) for v in batch[0].numpy()[:, 0]]


def test_params_go_to_the_function_and_ranks_share_every_epoch():
    user_data.CALLS.clear()
    spec = {"factory": f"{MODULE}:make"}
    params = {"n": 40, "task": "classification", "num_classes": 4}
    shards = [build_data(spec, params, batch_size=5, seed=1, rank=r, size=2) for r in range(2)]
    assert user_data.CALLS[:2] == [{"split": "train", "n": 40, "scale": 1.0}, {"split": "eval", "n": 40, "scale": 1.0}]
    assert shards[0].eval is None and shards[0].steps_per_epoch == 4 and shards[0].train_examples == 40
    assert shards[0].task.input_shape == (3,) and shards[0].task.num_classes == 4
    streams = [ids(d.train, 8) for d in shards]
    for epoch in (0, 1):
        assert sorted(streams[0][epoch * 20:(epoch + 1) * 20] + streams[1][epoch * 20:(epoch + 1) * 20]) == list(range(40))
    assert streams[0][:20] != streams[0][20:]  # reshuffled each epoch
    batch = next(iter(shards[0].train))
    assert batch[0].dtype.name == "float32" and batch[1].dtype.name == "int32"
    # the same stream from a position as skipped
    whole = ids(shards[1].train, 8)
    assert ids(shards[1].train_from(5), 3) == whole[25:40]


def test_a_function_that_takes_rank_and_size_shards_itself_with_weights():
    user_data.CALLS.clear()
    spec = {"factory": f"{MODULE}:make_weighted"}
    data = build_data(spec, {"num_classes": 4}, batch_size=4, seed=9, rank=1, size=2)
    assert user_data.CALLS[0] == {"split": "train", "rank": 1, "size": 2, "seed": 9}
    assert data.steps_per_epoch == 5  # its own 20 examples, not sharded again
    x, y, w = next(iter(data.train))
    np.testing.assert_allclose(w.numpy(), np.linspace(0.5, 2.0, 40)[x.numpy()[:, 0].astype(int)], rtol=1e-6)
    assert sorted(ids(data.train, 5)) == list(range(1, 40, 2))


def test_unknown_cardinality_is_counted():
    data = build_data({"factory": f"{MODULE}:make_filtered"}, {"num_classes": 4}, batch_size=10, seed=0)
    assert data.train_examples == 30 and data.steps_per_epoch == 3


@pytest.mark.parametrize("target, needle", [
    ("tests.data.factories.missing:make", "cannot import module 'tests.data.factories.missing'"),
    (f"{MODULE}:nope", f"module '{MODULE}' has no function 'nope'"),
    ("tests.data.factories.broken_import:make", "RuntimeError: cannot open /data/corpus"),
    (f"{MODULE}:returns_a_list", "must return a tf.data.Dataset or None. Received: list"),
    (f"{MODULE}:yields_dicts", "must yield (x, y) or (x, y, sample_weight)"),
    (f"{MODULE}:raises", "raised KeyError: \"no column 'pixels' in train\""),
])
def test_factory_problems_are_factory_errors(target, needle):
    with pytest.raises(FactoryError) as caught:
        build_data({"factory": target}, {"num_classes": 4}, batch_size=4, seed=0)
    assert needle in str(caught.value)


def test_the_users_traceback_lines_point_at_their_code():
    with pytest.raises(FactoryError) as caught:
        build_data({"factory": f"{MODULE}:raises"}, {"num_classes": 4}, batch_size=4, seed=0)
    details = caught.value.details  # shown above the error line
    assert "user_data.py" in details and "in helper_that_fails" in details and "raise KeyError" in details
    assert "opt_train/data" not in details


def test_cli_error_names_data_factory_and_exits_2(cli, write_config):
    config = write_config({"data": {"factory": f"{MODULE}:raises"}, "data_params": {"num_classes": 4},
                           "max_steps": 2})
    result = cli("train", "--config", config)
    assert result.exit_code == 2
    last = result.output.splitlines()[-1]
    assert last.startswith("Error: ") and "config.yaml:" in last and "data.factory: " in last
    # The user's own frames stand above the line, opt-train's never.
    assert result.output.startswith("Traceback (most recent call last, your code):")
    assert "opt_train/" not in result.output


def test_validate_rejects_a_bad_spec_and_missing_num_classes(cli, write_config):
    config = write_config({"data": {"factory": "not a path"}, "max_steps": 2})
    result = cli("validate", "--config", config)
    assert result.exit_code == 2 and "factory" in result.output
    config = write_config({"data": {"factory": f"{MODULE}:make"}, "data_params": {"n": 3}, "max_steps": 2})
    result = cli("validate", "--config", config)
    assert result.exit_code == 2 and "data_params.num_classes" in result.output


def test_the_example_config_trains(cli, tmp_path):
    from tests.support import CONFIGS

    result = cli("train", "--config", CONFIGS / "my_data.yaml", "--set", "max_steps=30", "--set", "eval_steps=15",
                 "--set", f"logdir={tmp_path / 'run'}", "--set", "data_params.weight_outer=true")
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["global_step"] == 30 and 0 <= final["eval/accuracy"] <= 1


def test_eval_without_an_eval_split_says_so(cli, write_config):
    config = write_config({"data": {"factory": f"{MODULE}:make"}, "data_params": {"num_classes": 4}, "max_steps": 2})
    assert cli("train", "--config", config).exit_code == 0  # a checkpoint to evaluate
    result = cli("eval", "--config", config)
    assert result.exit_code == 1
    assert f"{MODULE}:make has no eval split to evaluate on" in result.output and "Traceback" not in result.output
