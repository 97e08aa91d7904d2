"""A problem found while building a run (data, model) is filed at its full config key with its own code,
not at the surrounding section: `batch_size_per_gpu: 5000` is `batch_size_per_gpu`, not `data_params`."""

import numpy as np
import pytest

from tests.support import REPO, one_error_line

CASES = [
    # (config text, the key and code the one error line must name)
    ("data: digits\nbatch_size_per_gpu: 5000\n", "config.yaml:2: batch_size_per_gpu:", "[out_of_range]"),
    ("data: {factory: 'examples.my_data:make'}\ndata_params: {points_per_arm: 10, arms: 3, num_classes: 3}\n"
     f"python_path: {REPO}\nbatch_size_per_gpu: 5000\n", "config.yaml:4: batch_size_per_gpu:", "[out_of_range]"),
    ("model: cnn\ndata: synthetic_classification\n", "config.yaml:1: model:", "[conflict]"),
    ("model: {factory: 'not_a_model:build'}\n", "config.yaml:1: model.factory:", "[wrong_type]"),
    ("model: {keras_application: MobileNet}\nmodel_params: {include_top: true}\n"
     "data: npz\ndata_params: {path: images.npz, task: regression}\nbatch_size_per_gpu: 4\n", "config.yaml:2: model_params.include_top:",
     "[conflict]"),
]


@pytest.mark.parametrize("text, where, code", CASES, ids=["batch_size", "batch_size_of_a_factory", "cnn_on_flat_inputs", "factory_returns_no_model",
                                                         "include_top_on_regression"])
def test_a_build_problem_names_its_full_key_and_code(cli, tmp_path, monkeypatch, text, where, code):
    # 32x32 RGB images with a regression target, for the architecture that only classifies with its top
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "images.npz", x=rng.random((20, 32, 32, 3), dtype=np.float32), y=rng.random(20))
    (tmp_path / "not_a_model.py").write_text("def build():\n    return {'layers': 2}\n")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(text + f"max_steps: 2\nlogdir: {tmp_path / 'run'}\n")
    result = cli("train", "--config", config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert line.startswith(f"Error: {config.parent}/{where}") and line.endswith(code), line
    assert not (tmp_path / "run").exists()
