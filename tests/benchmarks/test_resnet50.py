"""Smoke test of the ResNet-50 harness at tiny sizes: the JSON has every figure; no timing is asserted."""

import json

import pytest

from benchmarks import resnet50


def test_overrides_make_imagenet_shaped_batches_of_the_example_config():
    from opt_train.config import load_config

    sets = resnet50.overrides(dtype="mixed", batch=32, image_size=224, classes=1000, steps=10)
    config = load_config([resnet50.CONFIG], sets)
    assert config.model == {"keras_application": "ResNet50"}
    assert (config.data_params["height"], config.data_params["width"], config.data_params["num_classes"]) == (
        224, 224, 1000)
    # The train split (80%) holds the prefetched batches.
    assert int(config.data_params["num_examples"] * 0.8) >= 32 * resnet50.PREFETCHED_BATCHES
    assert config.dtype == "mixed" and config.loss_scaling == "Backoff"
    assert config.eval_steps is None and config.save_checkpoint_steps is None and config.print_loss_steps == 10


@pytest.mark.slow
def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "r.json"
    assert resnet50.main(["--quick", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["images_per_sec"]) == {"opt_train", "tape_loop", "keras_fit"}
    assert all(value > 0 for value in result["images_per_sec"].values())
    assert set(result["ratios"]) >= {"opt_train/keras_fit", "opt_train/tape_loop"}
    assert result["target"]["key"] == "opt_train/keras_fit" and isinstance(result["target"]["met"], bool)
    assert result["setup"]["quick"] is True and result["meta"]["tensorflow"]
