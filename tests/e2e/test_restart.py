"""`opt-train train --np 2 --max-restarts 2` on real tf.distribute workers: worker 1 SIGKILLs itself in the first
attempt (tests/e2e/restart_model.py), the launcher relaunches the job from the newest checkpoint, and
the run ends with every tensor of its checkpoint byte-identical to an uninterrupted `--np 2` run's.

One real restart: each costs two more TensorFlow workers. Restarts in a row (the count in
OPT_TRAIN_RESTART_COUNT, fresh ports and every worker stopped at each, restarts exhausted) are
tests/distributed/test_restarts.py's, on stand-in workers; a second attempt resumes as the first does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.test_tf_launch import ENV, model_weights
from tests.processes import JOB_TIMEOUT_SECONDS
from tests.support import REPO, read_json

pytestmark = pytest.mark.slow

RUN = """\
model: {factory: "tests.e2e.restart_model:build"}
model_params: {hidden_units: 8, kill_at_call: 6, kill_worker: 1}
data: digits
batch_size_per_gpu: 16
optimizer: Adam
optimizer_params: {learning_rate: 0.01}
max_steps: 12
save_checkpoint_steps: 4
print_loss_steps: 4
save_summaries_steps: null
eval_steps: null
export: false
rank_timeout_secs: 5
"""


def train(tmp_path, name, kill_before):
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    argv = [sys.executable, "-m", "opt_train", "train", "--np", "2", "--max-restarts", "2", "--config", str(config),
            "--set", f"model_params.kill_before={kill_before}", "--set", f"logdir={tmp_path / name}"]
    job = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS)
    return job, tmp_path / name


def test_a_killed_job_restarts_and_ends_byte_identical_to_an_uninterrupted_one(tmp_path):
    job, logdir = train(tmp_path, "restarted", kill_before=1)
    assert job.returncode == 0, job.stderr[-4000:]
    restarts = [line for line in job.stderr.splitlines() if line.startswith("restart ")]
    assert len(restarts) == 1 and "restart 1 of 2: worker 1 failed (killed by SIGKILL)" in restarts[0], restarts
    # The first attempt got as far as its kill, update 6, and the next resumed from the checkpoint before it.
    output = job.stdout + job.stderr
    resumed = [line for line in output.splitlines() if "resumed from" in line]
    assert len(resumed) == 1 and "ckpt-4" in resumed[0], output[-4000:]

    reference, reference_dir = train(tmp_path, "uninterrupted", kill_before=0)
    assert reference.returncode == 0 and "restart " not in reference.stderr, reference.stderr[-4000:]
    assert read_json(logdir / "final_metrics.json")["global_step"] == 12
    weights, expected = model_weights(logdir), model_weights(reference_dir)
    assert expected and sorted(weights) == sorted(expected)
    for key, value in expected.items():
        assert weights[key].tobytes() == value.tobytes(), key
