"""Workers of a cluster end together; each one's own output says which worker it is, its global batch, how it ended.

Two real `opt-train train` workers, each started as a cluster launcher starts them (its
own TF_CONFIG, no `--np`), with the chief's link to worker 1 slowed (`SlowLink`): what
the chief sends worker 1 arrives 0.3 s late. A collective ends on worker 1 as soon as it
has the chief's part; the chief's request for worker 1's part is then still on the
way. Before `Backend.leave()`, worker 1 exited right there and the chief failed on its
last all-reduce ("Socket closed"), as it did at random in 1 of ~10 `--np 2 --benchmark`
runs on a loaded machine.

The same job's output is each worker's own log (what a pod's log shows): before, worker 1's
log stayed empty all run, and no line said how many workers and replicas ran.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.distributed.slow_link import SlowLink
from tests.processes import JOB_TIMEOUT_SECONDS, free_ports, tf_config
from tests.support import REPO, read_json, unlaunched_environ

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("opt_train.distributed.tfdist") is None,
                       reason="the tf.distribute backend is not in this checkout"),
]

DELAY = 0.3  # seconds; far longer than a worker takes from its last collective to its exit
BATCH = 16
ITER_SIZE = 2  # 2 micro-batches an update: the global batch has every factor
RUN = f"""\
model: mlp
model_params: {{hidden_units: [8]}}
data: digits
distributed: tf
batch_size_per_gpu: {BATCH}
iter_size: {ITER_SIZE}
optimizer: Adam
max_steps: 8
print_loss_steps: 4
save_summaries_steps: null
save_checkpoint_steps: null
eval_steps: null
export: false
rank_timeout_secs: 60
"""


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """`opt-train train` of RUN as 2 workers, the chief reaching worker 1 through the link.

    Returns (each worker's (exit code, stdout, stderr), logdir).
    """
    tmp_path = tmp_path_factory.mktemp("slow-link")
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    logdir = tmp_path / "run"
    command = [sys.executable, "-m", "opt_train", "train", "--config", str(config), "--set", f"logdir={logdir}"]
    chief, worker = free_ports(2)
    with SlowLink(worker, DELAY) as link:
        # The chief reaches worker 1 through the link; worker 1 listens on its own port.
        tf_configs = [tf_config([chief, link.port], 0), tf_config([chief, worker], 1)]
        jobs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=unlaunched_environ(TF_CONFIG=text, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3"))
                for text in tf_configs]
        try:
            outputs = [job.communicate(timeout=JOB_TIMEOUT_SECONDS) for job in jobs]
        finally:
            for job in jobs:
                job.kill()
    return [(job.returncode, out, err) for job, (out, err) in zip(jobs, outputs)], logdir


# A `--benchmark` run (where the early exit was seen) ends the same way: Session.finish's last
# collectives (there the figures' two `allreduce_scalar`, here the carried loss's and the final
# save's), then the same `Backend.leave()`. Its figures summed over the processes: Horovod's in
# tests/e2e/test_horovod_runs.py; tf.distribute workers' `allreduce_scalar` sum in
# tests/e2e/test_equal_to_one_process.py.
def test_the_chief_ends_well_when_its_link_to_a_worker_is_slow(workers):
    jobs, logdir = workers
    for index, (code, out, err) in enumerate(jobs):
        assert code == 0, f"worker {index}:\n{out[-3000:]}\n{err[-3000:]}"
    assert read_json(logdir / "final_metrics.json")["global_step"] == 8
    assert "done: step 8" in jobs[0][1]


def test_each_worker_says_which_it_is_and_ends_with_its_own_done_line(workers):
    jobs, logdir = workers
    batch = (f"global batch {2 * 1 * BATCH * ITER_SIZE} = 2 workers x 1 replica x batch_size_per_gpu {BATCH} "
             f"x iter_size {ITER_SIZE}")
    (_, chief_out, _), (_, worker_out, _) = jobs
    assert [chief_out.splitlines()[0], worker_out.splitlines()[0]] == [
        f"worker 0 of 2 (the chief: reports progress, writes checkpoints and summaries): {batch}",
        f"worker 1 of 2: {batch}"], jobs
    # The chief's own lines as before: its start line's global batch is the same figure.
    assert "updates, global batch 64" in chief_out and chief_out.strip().splitlines()[-1].startswith("done: step 8;")
    assert worker_out.strip().splitlines()[-1] == (
        f"done: step 8 (worker 1 of 2); worker 0 reports the figures in logdir {logdir}"), jobs
    assert "step 4/8" not in worker_out  # progress from the chief alone


# Each worker's own `interrupted` line: tests/e2e/test_tf_launch.py's SIGTERM to the launcher.
