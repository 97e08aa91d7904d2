"""The keys declared with `feeds=` reach `optimize_loss` through the builder, and `optimize_loss`'s
defaults are those keys' defaults (a Python caller and a YAML file that says nothing train alike)."""

import ast
import pathlib

import pytest

from opt_train.config import TrainConfig, load_config
from opt_train.config.schema import FEEDS, config_fields
from opt_train.distributed import get_backend
from tests.support import write_run

ROOT = pathlib.Path(__file__).parents[2]
EMPTY = object()  # a parameter without a default


def _same_default(declared, python):
    # None and an empty container both mean "none" to optimize_loss; a tuple is a list in YAML.
    def normal(value):
        if value in (None, (), [], {}):
            return None
        return list(value) if isinstance(value, tuple) else value

    return normal(declared) == normal(python)


def optimize_loss_defaults():
    """`optimize_loss`'s parameters and defaults, read from its source (no TensorFlow import)."""
    from opt_train.optimizers import names

    tree = ast.parse((ROOT / "opt_train" / "optimizers" / "pipeline.py").read_text())
    [function] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "optimize_loss"]
    arguments = function.args.args
    values = [EMPTY] * (len(arguments) - len(function.args.defaults)) + [
        eval(compile(ast.Expression(node), "pipeline.py", "eval"), {"names": names})
        for node in function.args.defaults
    ]
    return {argument.arg: value for argument, value in zip(arguments, values)}


def test_optimize_loss_defaults_are_the_keys_defaults():
    parameters = optimize_loss_defaults()
    defaults = {field.name: getattr(TrainConfig(), field.name) for field in config_fields()}
    assert set(FEEDS.values()) <= set(parameters)
    unequal = {
        key: (defaults[key], parameters[argument])
        for key, argument in FEEDS.items()
        if parameters[argument] is not EMPTY and not _same_default(defaults[key], parameters[argument])
    }
    assert not unequal, f"config default vs optimize_loss default: {unequal}"
    # The two that once differed (issue 27): OpenSeq2Seq's counting and its overflow bound.
    assert parameters["count_skipped_updates"] is False
    assert parameters["max_consecutive_overflows"] == 20


@pytest.mark.slow  # builds a model and a train op with TensorFlow: 36 s measured on 2 loaded cores
def test_a_config_s_pipeline_keys_reach_the_train_op(tmp_path):
    from opt_train.training.builder import build_run

    config = {
        "max_steps": 2, "batch_size_per_gpu": 8, "data": "synthetic_classification",
        "data_params": {"num_examples": 64, "num_features": 4, "num_classes": 2},
        "model_params": {"hidden_units": [4]}, "optimizer": "SGD", "optimizer_params": {"learning_rate": 0.1},
        "iter_size": 2, "max_grad_norm": 0.5, "loss_scaling": "Backoff", "count_skipped_updates": True,
        "summaries": ["gradients"], "freeze_variables_regex": "^dense_0/bias$",
    }
    loaded = load_config([str(write_run(tmp_path, config, "c.yaml"))])
    run = build_run(loaded, get_backend())
    op = run.train_op
    batch = next(iter(run.data.train))
    op.build(batch)
    assert op.micro_batches_per_update == 2 and op.count_skipped_updates is True
    assert op.loss_scaler.algorithm == "Backoff" and tuple(op.figures.summaries) == ("gradients",)
    assert type(op.optimizer).__name__ == "SGD"
    for _ in range(2):
        result = op(batch)
    assert "global_clipped_gradient_norm" in result  # max_grad_norm reached the pipeline
