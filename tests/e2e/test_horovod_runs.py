"""`use_horovod: true` end to end: 2 Gloo ranks on CPU against one process on the larger batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.distributed import horovod_train_worker as worker
from tests.processes import JOB_TIMEOUT_SECONDS, LAUNCH_ENV, horovodrun, horovodrun_argv, needs_horovod
from tests.support import CONFIGS, REPO, rank_pid, read_json, read_jsonl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.horovod,
    needs_horovod,
]

# This checkout's opt_train (the `opt-train` console script may belong to another install).
OPT_TRAIN = (sys.executable, "-m", "opt_train")
# The tests that read the session's `horovod_runs` go to the xdist worker of the other tests
# that read it (tests/e2e/test_equal_to_one_process.py), which trains it once.
shares_horovod_runs = pytest.mark.xdist_group("distributed-equal")


def assert_same_values(actual, expected, atol):
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, rtol=0, atol=atol, err_msg=f"variable #{i}")


@shares_horovod_runs
@pytest.mark.parametrize("name", list(worker.HOROVOD_RUNS))
def test_both_ranks_end_with_identical_weights(horovod_runs, name):
    final_0, values_0 = horovod_runs(name, 0)
    final_1, values_1 = horovod_runs(name, 1)
    assert final_0["global_step"] == final_1["global_step"] == worker.STEPS
    assert_same_values(values_1, values_0, atol=0)


@shares_horovod_runs
def test_the_skipped_update_does_not_count_toward_max_steps_on_any_rank(horovod_runs):
    """OpenSeq2Seq's counting under Horovod: the ranks skip the same update (the verdict is
    collective), so each applies max_steps updates and reads one update's batches more."""
    import tensorflow as tf

    for rank in (0, 1):
        assert horovod_runs("overflow", rank)[0]["global_step"] == worker.STEPS
    reader = tf.train.load_checkpoint(str(horovod_runs.outdir / "overflow_logdir" / "checkpoints"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == worker.STEPS
    assert reader.get_tensor("micro_batches/.ATTRIBUTES/VARIABLE_VALUE") == worker.STEPS + 1


# One `--benchmark` launch for two claims (a benchmark trains as any run does, without
# checkpoints, evaluations and summaries in its timed updates): rank 0 alone writes and
# reports, and the benchmark's figures are both ranks' together. Rank 0 writing the
# checkpoints and evaluations of a run on 2 ranks: tests/distributed/test_launcher.py's sweep.
MAX_STEPS = 20
BENCH_START = 10  # the warm-up updates, untimed


@pytest.fixture(scope="module")
def benchmark_launch(tmp_path_factory):
    """`horovodrun ... opt-train train --benchmark` of configs/horovod.yaml: (the finished job, its logdir)."""
    logdir = tmp_path_factory.mktemp("benchmark") / "run"
    job = horovodrun(
        *OPT_TRAIN, "train", "--config", str(CONFIGS / "horovod.yaml"), "--benchmark",
        "--set", f"max_steps={MAX_STEPS}", "--set", f"bench_start={BENCH_START}", "--set", "print_loss_steps=5",
        "--set", f"logdir={logdir}",
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    return job, logdir


def test_cli_launch_writes_on_rank_0_only(benchmark_launch):
    job, logdir = benchmark_launch
    assert read_json(logdir / "final_metrics.json")["global_step"] == MAX_STEPS
    steps = [r["step"] for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r]
    assert steps == [5, 10, 15, 20]  # one writer: no line twice
    assert "global batch 64" in job.stdout + job.stderr
    # Progress comes from rank 0 alone; rank 1's own log says which rank it is, and its own end. Before
    # them it may say that it waits for rank 0 to start (after WAIT_NOTE_SECONDS: on a loaded machine).
    rank_1 = [line.split(":", 1)[1] for line in job.stdout.splitlines()
              if line.startswith("[1]<stdout>:") and "waiting for rank 0 to start" not in line]
    assert len(rank_1) == 2 and rank_1[0].startswith("rank 1 of 2: global batch 64 = 2 ranks x 1 replica")
    assert rank_1[1].startswith(f"done: step {MAX_STEPS} (rank 1 of 2)"), rank_1


def test_benchmark_sums_samples_per_second_over_ranks(benchmark_launch):
    """`--benchmark` under 2 ranks: the samples timed and the samples/s are both ranks' together.

    Nothing here depends on how loaded the machine is: the samples counted are fixed
    by the config, and a sum of two positive rates exceeds rank 0's own rate (the
    timing ratio itself is the benchmark harness's business).
    """
    job, logdir = benchmark_launch
    final = read_json(logdir / "final_metrics.json")
    rank_0_rate = 32 / final["benchmark/time_per_step"]  # batch_size_per_gpu in configs/horovod.yaml
    assert final["benchmark/updates_timed"] == MAX_STEPS - BENCH_START
    assert final["benchmark/samples_timed"] == (MAX_STEPS - BENCH_START) * 32 * 2
    assert final["benchmark/samples_per_sec"] > rank_0_rate
    assert "benchmark:" in job.stdout


def test_a_signal_to_one_rank_stops_both_at_the_same_update(tmp_path):
    """SIGTERM to rank 1 alone: both ranks stop at one update, rank 0 saves there, nobody hangs."""
    import tensorflow as tf

    logdir = tmp_path / "run"
    job = subprocess.Popen(
        horovodrun_argv(
            *OPT_TRAIN, "train", "--config", str(CONFIGS / "horovod.yaml"), "--set", "max_steps=100000",
            "--set", "print_loss_steps=5", "--set", "save_checkpoint_steps=100000",
            "--set", "eval_steps=null", "--set", f"logdir={logdir}",
        ),
        cwd=REPO, env=LAUNCH_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 300
        records = logdir / "metrics.jsonl"
        while time.monotonic() < deadline and not (
            records.exists() and any(r.get("step", 0) >= 20 for r in read_jsonl(records))
        ):
            time.sleep(0.2)
        pid = rank_pid(1, str(logdir))
        assert pid is not None, "rank 1's process not found"
        os.kill(pid, signal.SIGTERM)
        output, _ = job.communicate(timeout=JOB_TIMEOUT_SECONDS)
    finally:
        job.kill()
    assert job.returncode != 0
    last = read_jsonl(logdir / "metrics.jsonl")[-1]
    assert last["interrupted"] == "SIGTERM", output[-3000:]
    saved = tf.train.latest_checkpoint(str(logdir / "checkpoints"))
    assert saved is not None and saved.endswith(f"ckpt-{last['step']}"), output[-3000:]
    assert f"interrupted by SIGTERM at step {last['step']}: checkpoint saved" in output
