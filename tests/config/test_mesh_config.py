"""`mesh`, `layouts`, `mesh_batch_axis` from YAML: the global batch and memory plan `validate` prints, and its
refusals (one line naming the key and file:line, exit 2), without TensorFlow."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import yaml

from opt_train.config import ConfigError, load_config
from opt_train.config.schema import NOT_RUN_KEYS
from tests.support import LAUNCH_VARIABLES

CLEAN = dict.fromkeys(LAUNCH_VARIABLES)
MESH = "mesh: {batch: 2, model: 2}\nlayouts:\n  '.*kernel': [null, model]\n"
LINE = re.compile(r"memory per device(?: without the mesh)?: weights ([\d.]+) (B|KiB|MiB|GiB), "
                  r"optimizer state ([\d.]+) (B|KiB|MiB|GiB), total ([\d.]+) (B|KiB|MiB|GiB)")
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text("max_steps: 10\n" + text)
    return path


def run_cli(*args):
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    return CliRunner().invoke(group, [str(a) for a in args], env=CLEAN, catch_exceptions=False)


def memory(output):
    """[(weights, state, total)] in bytes (to the printed precision) of each memory line."""
    return [tuple(float(match[i]) * UNIT[match[i + 1]] for i in (1, 3, 5)) for match in LINE.finditer(output)]


def test_placement_keys_do_not_define_the_run():
    # The model axis and the layouts may change on resume; the batch axis changes the global batch,
    # which the derived figures (and the logdir check) carry.
    assert {"mesh", "layouts", "mesh_batch_axis"} <= NOT_RUN_KEYS


def test_the_global_batch_is_the_batch_axis_times_the_per_device_batch_and_iter_size(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, MESH + "batch_size_per_gpu: 8\niter_size: 3\n"))
    assert result.exit_code == 0, result.output
    figures = yaml.safe_load(result.output.split("# derived")[1])
    assert figures["global_batch"] == 8 * 2 * 3 and figures["replicas_per_worker"] == 2
    # digits: 1,438 train examples in batches of the batch axis's 2 x 8, every 3 of them an update
    assert figures["micro_batches_per_epoch"] == 1438 // 16
    assert figures["steps_per_epoch"] == 1438 // 16 // 3


def test_rmsprop_runs_on_a_mesh_when_centered_whose_kernel_has_a_layout_rule(tmp_path):
    config = load_config([write(tmp_path, MESH + "optimizer: RMSProp\noptimizer_params: {centered: true}\n")])
    assert config.optimizer == "RMSProp"


def test_a_mesh_without_the_batch_axis_replicates_the_batch(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, "mesh: {model: 2}\nbatch_size_per_gpu: 8\n"))
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output.split("# derived")[1])["global_batch"] == 8


def test_validate_prints_the_memory_plan_with_and_without_the_mesh(tmp_path):
    from opt_train.data.sources import load_digits_source
    from opt_train.distributed.mesh_layout import plan_memory
    from opt_train.models.size import variable_shapes

    result = run_cli("validate", "--config", write(tmp_path, MESH))
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("memory per device")]
    assert len(lines) == 2 and lines[1].startswith("memory per device without the mesh: ")
    (sharded, alone) = memory(result.output)
    # The default MLP on digits with Adam: every kernel halved, the biases whole.
    task = load_digits_source(0.2, 0).task
    shapes = variable_shapes("mlp", {"hidden_units": [256, 128]}, task)
    kernels = sum(4 * math.prod(shape) for path, shape in shapes if path.endswith("kernel"))
    biases = sum(4 * math.prod(shape) for path, shape in shapes if path.endswith("bias"))
    assert alone[0] == pytest.approx(kernels + biases, rel=1e-3)
    assert sharded[0] == pytest.approx(kernels / 2 + biases, rel=1e-3)
    # Adam: m and v per weight, TF1's two beta powers, iterations and the learning rate
    exact = plan_memory([(p, s, "float32") for p, s in shapes], optimizer="Adam", mesh={"batch": 2, "model": 2},
                        layouts={".*kernel": [None, "model"]})
    assert sharded[1] == pytest.approx(exact.optimizer_state, rel=1e-3)
    assert exact.optimizer_state == 2 * (kernels / 2 + biases) + 8 + 3 * 4


def test_every_config_gets_one_memory_line_and_a_factory_model_waits_for_its_build(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, ""))
    assert result.exit_code == 0, result.output
    assert len(memory(result.output)) == 1
    (tmp_path / "my_models.py").write_text("def build(task):\n    raise NotImplementedError\n")
    result = run_cli("validate", "--config", write(tmp_path, "model: {factory: 'my_models:build'}\n"))
    assert result.exit_code == 0, result.output
    assert "memory per device: unknown until built (a factory model)" in result.output
    assert not memory(result.output)


@pytest.mark.parametrize("text, key, code, words", [
    (MESH + "num_gpus: 2\n", "mesh", "conflict", "num_gpus"),
    (MESH + "use_horovod: true\n", "mesh", "conflict", "Horovod"),
    (MESH + "distributed: horovod\n", "mesh", "conflict", "Horovod"),
    ("mesh: {batch: 2}\nlayouts:\n  '.*kernel': [null, model]\n", "layouts", "unknown_name", "lacks"),
    ("layouts:\n  '.*kernel': [null, model]\n", "layouts", "conflict", "need a mesh"),
    ("mesh: {batch: 2, model: 2}\nlayouts:\n  '(kernel': [null, model]\n", "layouts", "wrong_type", "regular expr"),
    ("mesh: {data: 2}\nmesh_batch_axis: batch_axis\n", "mesh_batch_axis", "unknown_name", "lacks"),
    ("mesh: {batch: 0}\n", "mesh", "out_of_range", ">= 1"),
    (MESH + "optimizer: RMSProp\n", "optimizer", "conflict", "RMSProp cannot run on a mesh"),
    (MESH + "optimizer: Adadelta\n", "optimizer", "conflict", "KerasAdadelta"),
])
def test_refusals_known_from_the_config_alone(tmp_path, text, key, code, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    issue = next(issue for issue in caught.value.issues if issue.key == key)
    assert issue.code == code and words in issue.message
    written = ("max_steps: 10\n" + text).splitlines()
    assert issue.line == 1 + next(i for i, line in enumerate(written) if line.startswith(key + ":"))
    result = run_cli("validate", "--config", path)
    assert result.exit_code == 2
    assert f"{path}:{issue.line}: {key}:" in result.output and "Traceback" not in result.output


def test_a_groups_optimizer_that_cannot_run_on_a_mesh_is_refused_at_the_group(tmp_path):
    groups = ("optimizer_groups:\n  - {variables: bias, lr_multiplier: 0.5}\n"
              "  - {variables: kernel, optimizer: RMSProp}\n")
    path = write(tmp_path, MESH + groups)
    result = run_cli("validate", "--config", path)
    assert result.exit_code == 2
    assert "optimizer_groups[1].optimizer:" in result.output and "RMSProp cannot run on a mesh" in result.output
    assert "Traceback" not in result.output
    # Groups whose optimizers can run there validate, the memory plan counting each group's state.
    momentum = groups.replace("RMSProp}", "Momentum, optimizer_params: {momentum: 0.9}}")
    result = run_cli("validate", "--config", write(tmp_path, MESH + momentum))
    assert result.exit_code == 0, result.output


def test_validate_np_accepts_a_mesh_whose_batch_axis_the_workers_split(tmp_path):
    """2 workers share a 2x2 mesh: each reads one batch shard of 32; the global batch is one process's."""
    result = run_cli("validate", "--config", write(tmp_path, MESH + "batch_size_per_gpu: 32\n"), "--np", 2)
    assert result.exit_code == 0, result.output
    figures = yaml.safe_load(result.output.split("# derived", 1)[1])
    assert figures["world_size"] == 2 and figures["replicas_per_worker"] == 1 and figures["mesh_devices"] == 4
    assert figures["global_batch"] == 64  # 32 x batch axis 2, as on one process


def test_validate_np_accepts_the_chiefs_decisions_on_a_mesh_across_workers(tmp_path):
    """lr_control, early_stopping and restore_best_checkpoint: the workers share the chief's figures
    (`controls.shared_figures`; tests/e2e/test_mesh_workers.py trains them)."""
    decisions = ("eval_steps: 5\nrestore_best_checkpoint: true\nearly_stopping: {monitor: loss, patience: 2}\n"
                 "lr_control: {mode: plateau, monitor: loss}\n")
    result = run_cli("validate", "--config", write(tmp_path, MESH + decisions), "--np", 2)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text, key, words", [
    # The batch axis not outermost: each worker's devices would hold both batch shards.
    ("mesh: {model: 2, batch: 2}\n", "mesh", "put 'batch' first"),
    ("mesh: {batch: 3}\n", "mesh", "cannot be shared evenly by 2 processes"),
    ("mesh: {model: 4}\n", "mesh", "needs the batch axis"),
    # Fully sharded: the chief, evaluating alone, could not gather a kernel split across the workers.
    ("mesh: {batch: 4}\nlayouts:\n  '.*kernel': [batch, null]\n", "layouts", "spans the 2 processes"),
])
def test_validate_and_train_np_refuse_a_mesh_the_workers_cannot_share(tmp_path, text, key, words):
    path = write(tmp_path, text + f"logdir: {tmp_path / 'run'}\n")
    line = 1 + next(i for i, written in enumerate(("max_steps: 10\n" + text).splitlines())
                    if written.startswith(key + ":"))
    for command in ("validate", "train"):
        result = run_cli(command, "--np", 2, "--config", path)
        assert result.exit_code == 2, result.output
        assert f"{path}:{line}: {key}:" in result.output and words in result.output, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()  # refused before any worker started


def test_a_tf_config_worker_refuses_a_mesh_the_workers_cannot_share_before_tensorflow_starts(tmp_path):
    """A worker a cluster launcher started (TF_CONFIG, not --np): `validate` and `train` ask as `--np 2` does."""
    import json

    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    text = "distributed: tf\nmesh: {model: 2, batch: 2}\n"
    path = write(tmp_path, text + f"logdir: {tmp_path / 'run'}\n")
    cluster = {"cluster": {"worker": ["localhost:23001", "localhost:23002"]}, "task": {"type": "worker", "index": 1}}
    env = {**CLEAN, "TF_CONFIG": json.dumps(cluster)}
    for command in ("validate", "train"):
        result = CliRunner().invoke(group, [command, "--config", str(path)], env=env, catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert f"{path}:3: mesh:" in result.output and "put 'batch' first" in result.output, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, words", [
    # 10 classes on a model axis of 4: the logits kernel (128, 10) cannot be split
    ("mesh: {batch: 1, model: 4}\nlayouts:\n  '.*kernel': [null, model]\n", "does not divide"),
    ("mesh: {batch: 2, model: 2}\nlayouts:\n  '.*kernel': [null, null, model]\n", "has 3 entries"),
    # a misspelt regex would leave every variable replicated without a word
    ("mesh: {batch: 2, model: 2}\nlayouts:\n  '.*kernle': [null, model]\n", "first match of no variable"),
])
def test_validate_refuses_a_layout_that_does_not_fit_the_built_in_models_shapes(tmp_path, text, words):
    path = write(tmp_path, text)
    result = run_cli("validate", "--config", path)
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and f"{path}:3: layouts:" in error[0] and words in error[0]


def test_validate_with_a_mesh_imports_no_tensorflow(tmp_path):
    path = write(tmp_path, MESH)
    code = ("import sys\nfrom opt_train.cli.main import main\n"
            "try:\n    main(['validate', '--config', sys.argv[1]])\nexcept SystemExit as stop:\n    assert not stop.code\n"
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'imported TensorFlow'\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "memory per device without the mesh" in done.stdout
