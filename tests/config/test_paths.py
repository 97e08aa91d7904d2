"""The one path rule (relative to the file that set the value; `--set` and logdir from the current directory)
and `base:` + another model / data starting that block afresh."""

import os

import numpy as np
import pytest

from opt_train.config import ConfigError, load_config


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_data_and_model_paths_are_relative_to_the_file_that_set_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the current directory is not the config's folder
    (tmp_path / "project" / "data").mkdir(parents=True)
    np.savez(tmp_path / "project" / "data" / "a.npz", x=np.zeros((4, 2)), y=np.arange(4) % 2)
    base = _write(tmp_path / "project" / "base.yaml", "data: npz\ndata_params: {path: data/a.npz}\nmax_steps: 2\n")
    child = _write(tmp_path / "project" / "sub" / "run.yaml", "base: ../base.yaml\nlogdir: runs/x\n")
    config = load_config([child])
    assert config.data_params["path"] == str(tmp_path / "project" / "data" / "a.npz")
    assert config.logdir == "runs/x"  # the exception: where the command runs
    assert base.exists()


def test_a_set_path_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    np.savez(tmp_path / "here" / "b.npz", x=np.zeros((4, 2)), y=np.arange(4) % 2)
    config_file = _write(tmp_path / "cfg" / "run.yaml", "data: npz\ndata_params: {path: nowhere.npz}\nmax_steps: 2\n")
    monkeypatch.chdir(tmp_path / "here")
    config = load_config([config_file], ["data_params.path=b.npz"])
    assert config.data_params["path"] == str(tmp_path / "here" / "b.npz")


def test_a_missing_file_is_file_not_found_with_the_resolved_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config_file = _write(tmp_path / "cfg" / "run.yaml", "data: csv\ndata_params: {path: table.csv}\nmax_steps: 2\n")
    _write(tmp_path / "table.csv", "a,b\n1,0\n")  # beside the current directory: not the one meant
    with pytest.raises(ConfigError) as caught:
        load_config([config_file])
    (issue,) = caught.value.issues
    assert (issue.key, issue.code, issue.line) == ("data_params.path", "file_not_found", 2)
    assert os.path.join(str(tmp_path), "cfg", "table.csv") in str(caught.value)


def test_tfrecord_globs_resolve_per_item_and_must_match(tmp_path):
    _write(tmp_path / "shards" / "train-0.tfrecord", "")
    features = "features: {x: {dtype: float32, shape: [2]}, y: {dtype: int64}}"
    text = (f"data: tfrecord\ndata_params:\n  train_files: [shards/train-*.tfrecord]\n"
            f"  eval_files: shards/eval-*.tfrecord\n  {features}\n  x: x\n  y: y\n  num_classes: 2\nmax_steps: 2\n")
    with pytest.raises(ConfigError) as caught:
        load_config([_write(tmp_path / "run.yaml", text)])
    assert [(i.key, i.code) for i in caught.value.issues] == [("data_params.eval_files", "file_not_found")]
    assert str(tmp_path / "shards" / "eval-*.tfrecord") in str(caught.value)


def test_base_with_another_model_or_data_starts_that_block_afresh(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 2)), y=np.arange(4) % 2)
    _write(tmp_path / "base.yaml", "model: mlp\nmodel_params: {hidden_units: [8], dropout: 0.1}\n"
                                   "data: synthetic_classification\ndata_params: {num_features: 3}\nmax_steps: 2\n")
    same = load_config([_write(tmp_path / "same.yaml", "base: base.yaml\nmodel: MLP\nmodel_params: {dropout: 0.2}\n")])
    assert same.model_params == {"hidden_units": [8], "dropout": 0.2}  # the same model: merged
    assert same.data_params == {"num_features": 3}
    other = load_config([_write(tmp_path / "other.yaml", "base: base.yaml\nmodel: cnn\ndata: npz\n"
                                                         "data_params: {path: a.npz}\n")])
    assert other.model_params == {} and other.data_params == {"path": str(tmp_path / "a.npz")}
    # Before this rule the base's hidden_units reached the cnn: an unknown_key at a line of the base.
    assert other.model == "cnn"
