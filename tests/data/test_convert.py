"""`opt-train data to-tfrecord`: the files, read back with TF's own parser, hold the .npz / .csv rows; the printed block trains."""

import numpy as np
import pytest
import tensorflow as tf
import yaml

from tests.support import read_json


def parse_all(pattern, compression, y_dtype):
    """Every Example of the files, in file order, parsed with tf.io.parse_single_example."""
    files = sorted(tf.io.gfile.glob(pattern))
    spec = {"x": tf.io.VarLenFeature(tf.float32), "y": tf.io.VarLenFeature(y_dtype)}
    rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files, compression)]
    xs = np.stack([tf.sparse.to_dense(r["x"]).numpy() for r in rows])
    ys = np.stack([tf.sparse.to_dense(r["y"]).numpy() for r in rows])
    return files, xs, ys


@pytest.mark.slow  # 4 s on 2 cores
def test_npz_to_gzip_shards_then_train(cli, write_config, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4, 2)).astype(np.float32)
    y = rng.integers(0, 3, size=60)
    np.savez(tmp_path / "arrays.npz", x=x, y=y)
    out = tmp_path / "records"
    result = cli("data", "to-tfrecord", tmp_path / "arrays.npz", "--out", out, "--shards", 3,
                 "--compression", "GZIP")
    assert result.exit_code == 0, result.output
    block = yaml.safe_load(result.output)
    assert block["data"] == "tfrecord"
    params = block["data_params"]
    assert params["features"] == {"x": {"dtype": "float32", "shape": [4, 2]}, "y": {"dtype": "int64", "shape": []}}
    assert params["num_classes"] == 3 and params["compression"] == "GZIP" and "eval_files" not in params

    files, xs, ys = parse_all(params["train_files"], "GZIP", tf.int64)
    assert [f.rsplit("/", 1)[1] for f in files] == [f"train-0000{i}-of-00003.tfrecord.gz" for i in range(3)]
    np.testing.assert_array_equal(xs, x.reshape(60, -1))
    np.testing.assert_array_equal(ys[:, 0], y)

    config = write_config({**block, "model": "mlp", "model_params": {"hidden_units": [8]},
                           "batch_size_per_gpu": 8, "max_steps": 12, "print_loss_steps": 4})
    trained = cli("train", "--config", config)
    assert trained.exit_code == 0, trained.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["global_step"] == 12 and np.isfinite(final["train/loss"])
    assert not any(key.startswith("eval/") for key in final)  # no eval files, no evaluation


def test_csv_regression_with_an_eval_split(cli, tmp_path):
    table = np.round(np.random.default_rng(1).normal(size=(20, 3)), 3)
    lines = ["a,b,target"] + [",".join(str(v) for v in row) for row in table]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "rec"
    result = cli("data", "to-tfrecord", tmp_path / "t.csv", "--out", out, "--shards", 2, "--task", "regression",
                 "--label-column", "target", "--eval-fraction", 0.25)
    assert result.exit_code == 0, result.output
    params = yaml.safe_load(result.output)["data_params"]
    assert params["compression"] == "none" and params["features"]["y"] == {"dtype": "float32", "shape": [1]}
    _, train_x, train_y = parse_all(params["train_files"], "", tf.float32)
    _, eval_x, eval_y = parse_all(params["eval_files"], "", tf.float32)
    assert len(train_x) == 15 and len(eval_x) == 5
    both = np.concatenate([np.concatenate([train_x, train_y], 1), np.concatenate([eval_x, eval_y], 1)])
    np.testing.assert_allclose(sorted(map(tuple, both)), sorted(map(tuple, table.astype(np.float32))))


def test_bad_source_exits_2_with_one_line(cli, tmp_path):
    (tmp_path / "x.txt").write_text("1,2\n")
    result = cli("data", "to-tfrecord", tmp_path / "x.txt", "--out", tmp_path / "o")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == ["Error: `path` must be a .npz or .csv file. "
                                                  f"Received: path='{tmp_path / 'x.txt'}'"]


@pytest.mark.slow  # 4 s on 2 cores
def test_the_readme_recipe_and_example_config_train(cli, tmp_path):
    """configs/tfrecord.yaml's recipe: digits as .npz, converted to GZIP shards, trained and evaluated."""
    from sklearn.datasets import load_digits

    from tests.support import CONFIGS

    digits = load_digits()
    np.savez(tmp_path / "digits.npz", x=digits.data / 16, y=digits.target)
    out = tmp_path / "data" / "digits"
    converted = cli("data", "to-tfrecord", tmp_path / "digits.npz", "--out", out, "--shards", 4,
                    "--compression", "GZIP", "--eval-fraction", 0.2)
    assert converted.exit_code == 0, converted.output
    example = yaml.safe_load((CONFIGS / "tfrecord.yaml").read_text())["data_params"]
    printed = yaml.safe_load(converted.output)["data_params"]
    assert {k: v for k, v in printed.items() if not k.endswith("_files")} == {
        k: v for k, v in example.items() if not k.endswith("_files") and k != "shuffle_buffer"}
    result = cli("train", "--config", CONFIGS / "tfrecord.yaml", "--set", f"data_params.train_files={printed['train_files']}",
                 "--set", f"data_params.eval_files={printed['eval_files']}", "--set", "max_steps=40",
                 "--set", "eval_steps=20", "--set", f"logdir={tmp_path / 'run'}")
    assert result.exit_code == 0, result.output
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["global_step"] == 40 and final["eval/accuracy"] > 0.5
