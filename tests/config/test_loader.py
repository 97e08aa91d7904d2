"""Loading: type coercions, the to_dict round trip, locations, and no TensorFlow."""

import subprocess
import sys
import textwrap

import pytest
import yaml

from opt_train.config import ConfigError, LarcParams, TrainConfig, derived, load_config

RICH = """\
model: mlp
model_params:
  hidden_units: [16, 8]
data: digits
batch_size_per_gpu: 16
eval_batch_size: 64
num_epochs: 3
optimizer: MomentumOptimizer
optimizer_params:
  learning_rate: 1e-2
  momentum: 0.9
lr_policy: poly_decay
lr_policy_params:
  power: 2.0
  min_lr: 1e-5
warmup: {steps: 10}
dtype: mixed
loss_scaling: logmax
loss_scaling_params: {log_max: 8.0}
on_nonfinite: stop
max_consecutive_overflows: null
iter_size: 2
larc_params:
  larc_eta: 2e-3
  larc_mode: scale
regularizer: l1_l2
regularizer_params: {l1: 0.0, l2: 1e-4}
freeze_variables_regex: "^dense_1/"
summaries: [learning_rate, global_gradient_norm, larc_summaries]
logdir: runs/rich
save_checkpoint_steps: null
num_checkpoints: 2
save_summaries_steps: 10
print_loss_steps: 5
eval_steps: 50
random_seed: 7
jit_compile: true
sweep: {grid: {optimizer_params.learning_rate: [0.1, 0.01]}}
"""


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_every_field_has_exactly_one_rule():
    from opt_train.config.validate import FIELD_RULES

    assert list(FIELD_RULES) == list(TrainConfig().to_dict())


def test_larc_defaults_are_openseq2seqs_and_eta_is_required(tmp_path):
    config = load_config([write(tmp_path, "max_steps: 10\nlarc_params: {larc_eta: 0.002}\n")])
    assert dict(config.larc_params) == {"larc_eta": 0.002, "larc_mode": "clip", "min_update": 1e-7, "epsilon": 1e-7}


def test_rich_config_is_typed_and_canonical(tmp_path):
    config = load_config([write(tmp_path, RICH)])
    assert config.optimizer == "Momentum"
    assert config.optimizer_params == {"learning_rate": 0.01, "momentum": 0.9}
    assert config.lr_policy == "poly"
    assert config.lr_policy_params == {"power": 2.0, "min_lr": 1e-5}
    assert config.loss_scaling == "LogMax"
    assert config.larc_params == LarcParams(larc_eta=2e-3, larc_mode="scale")
    assert config.summaries == ("learning_rate", "global_gradient_norm", "larc_summaries")
    assert config.num_epochs == 3.0 and isinstance(config.num_epochs, float)
    assert config.max_consecutive_overflows is None and config.save_checkpoint_steps is None


def test_to_dict_round_trips_through_yaml(tmp_path):
    config = load_config([write(tmp_path, RICH)])
    dumped = yaml.safe_dump(config.to_dict(), sort_keys=False)
    again = load_config([write(tmp_path, dumped, "again.yaml")])
    assert again == config
    assert again.to_dict() == config.to_dict()


def test_to_dict_is_a_copy(tmp_path):
    config = load_config([write(tmp_path, RICH)])
    config.to_dict()["optimizer_params"]["learning_rate"] = 5.0
    assert config.optimizer_params["learning_rate"] == 0.01


@pytest.mark.parametrize(
    "line, field, expected",
    [
        ("max_steps: 1e3", "max_steps", 1000),
        ("max_steps: 20.0", "max_steps", 20),
        ("num_epochs: '1.5'", "num_epochs", 1.5),
        ("num_epochs: 2", "num_epochs", 2.0),
        ("max_grad_norm: '1e-1'", "max_grad_norm", 0.1),
        ("loss_scaling: 128", "loss_scaling", 128.0),
        ("loss_scaling: '1e3'", "loss_scaling", 1000.0),
        ("loss_scaling: DYNAMIC", "loss_scaling", "Dynamic"),
        ("dtype: Mixed_BFloat16", "dtype", "mixed_bfloat16"),
        ("regularizer: L2", "regularizer", "l2"),
        ("optimizer: my_pkg.optim.Fancy", "optimizer", "my_pkg.optim.Fancy"),
        ("model: {factory: 'my_pkg.models:build'}", "model", {"factory": "my_pkg.models:build"}),
        ("model_params:", "model_params", {}),
        ("summaries:", "summaries", ()),
    ],
)
def test_values_are_coerced_to_their_field_type(tmp_path, line, field, expected):
    # The user code named must exist (validate finds it without importing it).
    (tmp_path / "my_pkg").mkdir()
    for name, text in (("__init__", ""), ("optim", "class Fancy:\n    pass\n"), ("models", "def build(task):\n    pass\n")):
        (tmp_path / "my_pkg" / f"{name}.py").write_text(text)
    text = line + "\n" if line.startswith(("max_steps", "num_epochs")) else f"max_steps: 3\n{line}\n"
    value = getattr(load_config([write(tmp_path, text)]), field)
    assert value == expected and type(value) is type(expected)


def test_locate_falls_back_to_the_enclosing_key(tmp_path):
    config = load_config([write(tmp_path, "max_steps: 3\noptimizer_params:\n  learning_rate: 0.1\n")])
    path = str(tmp_path / "run.yaml")
    assert config.locate("optimizer_params.learning_rate") == (path, 3)
    assert config.locate("optimizer_params.beta_1") == (path, 2)
    assert config.locate("dtype") == (None, None)


def test_issue_for_a_problem_found_later(tmp_path):
    # A class by dotted path: only its constructor knows its parameters, so beta_1 loads.
    text = "max_steps: 3\noptimizer_params:\n  beta_1: 1.5\noptimizer: examples.my_optimizer.SignSGD\n"
    config = load_config([write(tmp_path, text)])
    issue = config.issue("optimizer_params.beta_1", "must be in [0, 1)", "out_of_range", 1.5)
    assert issue.format() == (
        f"{tmp_path / 'run.yaml'}:3: optimizer_params.beta_1: must be in [0, 1). Received: 1.5 [out_of_range]"
    )
    assert str(ConfigError([issue])) == issue.format()


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        TrainConfig().max_steps = 3


@pytest.mark.parametrize("world_size, iter_size, expected", [(1, 1, 32), (4, 1, 128), (4, 3, 384)])
def test_derived_global_batch(world_size, iter_size, expected):
    config = TrainConfig(max_steps=1, iter_size=iter_size)
    figures = derived(config, world_size=world_size)
    assert figures["global_batch"] == expected and figures["world_size"] == world_size


def test_loading_imports_neither_tensorflow_nor_click(tmp_path):
    path = write(tmp_path, RICH)
    script = (
        "import sys\n"
        "from opt_train.config import load_config, ConfigError\n"
        f"load_config([{path!r}])\n"
        "try:\n"
        f"    load_config([{path!r}], ['optimizer=Adamm', 'dtype=x'])\n"
        "except ConfigError:\n"
        "    pass\n"
        "print(sorted(m for m in ('tensorflow', 'keras', 'click') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
