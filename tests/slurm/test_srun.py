"""Training under a real SLURM (tests/slurm/conftest.py): `srun -n 2 opt-train train` and a requeued batch job.

`srun -n 2` with `distributed: tf` reads the step's SLURM variables, forms a two-worker
cluster and equals one process on the doubled batch; a training job that SLURM requeues
(`scontrol requeue`: SIGTERM, then the job runs again from the queue) checkpoints at one
update, resumes, and ends equal to a run that was never stopped.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tests.e2e.test_tf_launch import assert_equal_runs
from tests.e2e.test_tf_launch import losses as _losses
from tests.e2e.test_tf_launch import model_weights as _tensors
from tests.support import REPO, read_json, read_jsonl, unlaunched_environ

pytestmark = pytest.mark.slow

JOB_TIMEOUT_SECONDS = 600
RUN = """\
model: mlp
model_params: {hidden_units: [8]}
data: digits
batch_size_per_gpu: 16
optimizer: Adam
optimizer_params: {learning_rate: 0.01}
max_steps: 60
print_loss_steps: 10
save_summaries_steps: null
eval_steps: null
"""


def _environ(cluster):
    return {**unlaunched_environ(TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO)),
            "SLURM_CONF": cluster.environ["SLURM_CONF"]}


def _srun(cluster, *argv):
    return subprocess.run(["srun", *map(str, argv)], cwd=REPO, env=_environ(cluster), capture_output=True,
                          text=True, timeout=JOB_TIMEOUT_SECONDS)


def test_srun_two_tasks_equal_one_process_on_the_doubled_batch(slurm_cluster, tmp_path, cli):
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    logdir = tmp_path / "srun"
    job = _srun(slurm_cluster, "-n", 2, sys.executable, "-m", "opt_train", "train", "--config", config,
                "--set", "distributed=tf", "--set", f"logdir={logdir}")
    output = job.stdout + job.stderr
    assert job.returncode == 0, output[-4000:]
    assert "global batch 32" in output, output[-4000:]
    one = cli("train", "--config", config, "--set", "batch_size_per_gpu=32", "--set", f"logdir={tmp_path / 'one'}")
    assert one.exit_code == 0, one.output[-4000:]
    assert read_json(logdir / "final_metrics.json")["global_step"] == 60
    assert_equal_runs(logdir, tmp_path / "one", range(10, 61, 10))


def test_a_requeued_training_job_resumes_and_equals_an_uninterrupted_run(slurm_cluster, tmp_path, cli):
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    logdir = tmp_path / "requeued"
    settings = ["--set", "max_steps=6000", "--set", "print_loss_steps=100", "--set", "save_checkpoint_steps=100000"]
    command = " ".join([sys.executable, "-m", "opt_train", "train", "--config", str(config), *settings,
                        "--set", f"logdir={logdir}"])
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--requeue", "--open-mode=append", f"--output={tmp_path / 'job.out'}",
         f"--chdir={REPO}", "--wrap", f"exec {command}"],
        env=_environ(slurm_cluster), capture_output=True, text=True, check=True, timeout=60)
    job_id = submitted.stdout.strip().split(";")[0]
    records = logdir / "metrics.jsonl"
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if records.exists() and any(record.get("step", 0) >= 100 for record in read_jsonl(records)):
            break
        assert slurm_cluster.queued(job_id), (tmp_path / "job.out").read_text()[-3000:]
        time.sleep(0.2)
    slurm_cluster.run("scontrol", "requeue", job_id)
    while time.monotonic() < deadline and not (logdir / "final_metrics.json").exists():
        time.sleep(0.5)
    while time.monotonic() < deadline and slurm_cluster.queued(job_id):
        time.sleep(0.5)
    output = (tmp_path / "job.out").read_text()
    interrupted = [record for record in read_jsonl(records) if record.get("interrupted")]
    assert [record["interrupted"] for record in interrupted] == ["SIGTERM"], output[-4000:]
    assert "resumed from" in output, output[-4000:]
    assert read_json(logdir / "final_metrics.json")["global_step"] == 6000, output[-4000:]
    one = cli("train", "--config", config, *settings, "--set", f"logdir={tmp_path / 'one'}")
    assert one.exit_code == 0, one.output[-4000:]
    # The interval the requeue cut is averaged over two processes: equal to float rounding.
    resumed, reference = _losses(logdir), _losses(tmp_path / "one")
    assert sorted(resumed) == sorted(reference)
    for step, loss in reference.items():
        assert abs(resumed[step] - loss) <= 1e-6, (step, resumed[step], loss)
    weights, expected = _tensors(logdir), _tensors(tmp_path / "one")
    assert expected and sorted(weights) == sorted(expected)
    for key, value in expected.items():
        assert np.array_equal(weights[key], value), key
