"""configs/mesh.yaml as a user runs it: `validate` shows what the layout saves, `train` trains it on a 2 x 2 mesh
of logical CPU devices in a fresh process and reaches the accuracy its one-process twin reaches."""

import subprocess
import sys

import pytest
import yaml

from tests.support import CONFIGS, REPO, bare_environ, read_json

ENV = bare_environ()


def test_the_mesh_example_validates_with_half_the_kernels_per_device(cli):
    result = cli("validate", "--config", CONFIGS / "mesh.yaml")
    assert result.exit_code == 0, result.output
    figures = yaml.safe_load(result.output.split("# derived")[1])
    assert figures["global_batch"] == 64 and figures["mesh_devices"] == 4
    memory = [line for line in result.output.splitlines() if line.startswith("memory per device")]
    assert len(memory) == 2 and "without the mesh" in memory[1]


@pytest.mark.slow  # a fresh process that imports TensorFlow and trains 60 updates on 4 logical devices
def test_the_mesh_example_trains_on_a_two_by_two_mesh_in_a_fresh_process(tmp_path):
    # 60 updates: one process reaches 0.86 there (0.80 at 30); a mesh trains as one process (test_mesh.py).
    overrides = [f"logdir={tmp_path}", "max_steps=60", "eval_steps=null", "save_checkpoint_steps=null",
                 "print_loss_steps=30"]
    job = subprocess.run(
        [sys.executable, "-m", "opt_train", "train", "--config", str(CONFIGS / "mesh.yaml"),
         *[arg for override in overrides for arg in ("--set", override)]],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV,
    )
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    output = job.stdout + job.stderr
    assert "the 4-device mesh runs on 4 logical CPU devices" in output
    assert "global batch 64" in output
    final = read_json(tmp_path / "final_metrics.json")
    assert final["global_step"] == 60 and final["eval/accuracy"] > 0.8


@pytest.mark.slow  # a fresh process that imports TensorFlow, refused at its build
def test_train_refuses_a_layout_that_does_not_fit_with_validates_line(tmp_path, cli):
    config = tmp_path / "misfit.yaml"
    # 10 classes do not split on a model axis of 4: the logits kernel is (128, 10)
    config.write_text("mesh: {batch: 1, model: 4}\nlayouts:\n  '.*kernel': [null, model]\nmax_steps: 5\n"
                      f"logdir: {tmp_path / 'run'}\n")
    validated = cli("validate", "--config", config)
    assert validated.exit_code == 2
    expected = validated.output.strip().splitlines()[-1]
    assert expected.startswith(f"Error: {config}:2: layouts:") and "does not divide" in expected
    job = subprocess.run([sys.executable, "-m", "opt_train", "train", "--config", str(config)],
                         cwd=REPO, capture_output=True, text=True, timeout=600, env=ENV)
    assert job.returncode == 2, job.stdout[-2000:] + job.stderr[-3000:]
    assert (job.stdout + job.stderr).strip().splitlines()[-1] == expected
    assert "Traceback" not in job.stderr
