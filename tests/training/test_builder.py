"""What building a run leaves in the caller's process (opt_train/training/builder.py)."""

import keras

from opt_train.config import load_config
from tests.support import write_run

MIXED = {"model": "mlp", "model_params": {"hidden_units": [8]}, "data": "digits", "dtype": "mixed",
         "batch_size_per_gpu": 16, "max_steps": 1, "print_loss_steps": 1, "export": False}


def test_train_and_evaluate_give_a_python_caller_its_global_dtype_policy_back(tmp_path):
    """Keras's own global policy is what the caller's next model is built with: float16 after a mixed run
    (`build_run` sets it, as a command does once per process) until `train` and `evaluate` restored it."""
    from opt_train.training import evaluate, train

    config = load_config([str(write_run(tmp_path, MIXED))])
    assert keras.config.dtype_policy().name == "float32"
    assert train(config)["global_step"] == 1
    assert keras.config.dtype_policy().name == "float32"
    assert "eval/loss" in evaluate(config)
    assert keras.config.dtype_policy().name == "float32"
    assert keras.layers.Dense(2).compute_dtype == "float32"
