"""`use_horovod: true` end to end: 2 Gloo ranks on CPU against one process on the larger batch."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.distributed import horovod_train_worker as worker
from tests.support import CONFIGS, REPO, rank_pid, read_json, read_jsonl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.horovod,
    pytest.mark.skipif(
        importlib.util.find_spec("horovod") is None,
        reason="Horovod is not installed (bash scripts/install_horovod.sh)",
    ),
]

WORKER = Path(worker.__file__).resolve()
JOB_TIMEOUT_SECONDS = 900  # far above a normal run; reaching it means a hang
TOLERANCE = 1e-5


def horovodrun_argv(*command):
    """`horovodrun -np 2 -H localhost:2 --gloo COMMAND...` as an argument list."""
    launcher = shutil.which("horovodrun")
    launch = [launcher] if launcher else [sys.executable, "-m", "horovod.runner.launch"]
    return [*launch, "-np", "2", "-H", "localhost:2", "--gloo", *command]


# This checkout's opt_train (the `opt-train` console script may belong to another install).
OPT_TRAIN = (sys.executable, "-m", "opt_train")
LAUNCH_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))


def horovodrun(*command):
    """`horovodrun -np 2 -H localhost:2 --gloo COMMAND...` as a finished subprocess."""
    return subprocess.run(
        horovodrun_argv(*command), cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True,
        timeout=JOB_TIMEOUT_SECONDS,
    )


@pytest.fixture(scope="module")
def horovod_runs(tmp_path_factory):
    """Every run of `worker.RUNS` on 2 ranks, in one launch; load(name, rank) -> (final, values)."""
    outdir = tmp_path_factory.mktemp("horovod_e2e")
    job = horovodrun(sys.executable, str(WORKER), str(outdir), *worker.RUNS)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]

    def arrays(path):
        saved = np.load(path)
        return [saved[key] for key in saved.files]  # arr_0, arr_1, ... in order

    def load(name, rank, initial=False):
        if initial:
            return arrays(outdir / f"{name}_rank{rank}_initial.npz")
        return read_json(outdir / f"{name}_rank{rank}.json"), arrays(outdir / f"{name}_rank{rank}.npz")

    load.outdir = outdir
    return load


@pytest.fixture(scope="module")
def single_runs(tmp_path_factory):
    """The single-process reference of each run, trained in this process on first use."""
    from opt_train.distributed import SingleProcess

    outdir = tmp_path_factory.mktemp("single_e2e")
    done = {}

    def run(name):
        if name not in done:
            config = worker.write_config(
                worker.config_payload(name, False, outdir / f"{name}_logdir"), outdir / f"{name}.yaml"
            )
            done[name] = worker.train_run(config, worker.recording(SingleProcess()))
        return done[name]

    run.outdir = outdir
    return run


def assert_same_values(actual, expected, atol):
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, rtol=0, atol=atol, err_msg=f"variable #{i}")


@pytest.mark.parametrize("name", list(worker.RUNS))
def test_both_ranks_end_with_identical_weights(horovod_runs, name):
    final_0, values_0 = horovod_runs(name, 0)
    final_1, values_1 = horovod_runs(name, 1)
    assert final_0["global_step"] == final_1["global_step"] == worker.STEPS
    assert_same_values(values_1, values_0, atol=0)


# What a checkpoint must agree on between runs; the pipeline's own state (e.g. the
# accumulators that only an iter_size run has) may differ in layout.
COMPARED = ("model_variables/", "optimizer/", "global_step/")


def checkpoint_values(logdir):
    """{key: value} of the latest checkpoint in logdir, for the keys starting with COMPARED."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(Path(logdir) / "checkpoints"))
    keys = [k for k in reader.get_variable_to_shape_map() if k.startswith(COMPARED)]
    return {k: reader.get_tensor(k) for k in keys}


@pytest.mark.parametrize("name", list(worker.RUNS))
def test_two_ranks_equal_one_process_on_the_larger_batch(horovod_runs, single_runs, name):
    # plain: 2 x 16 vs 32; iter_size: 2 ranks x 2 micro-batches x 8 vs 32; overflow: plain + a skip.
    # Compared through the checkpoints that rank 0 and the single process wrote.
    single_runs(name)
    distributed = checkpoint_values(horovod_runs.outdir / f"{name}_logdir")
    single = checkpoint_values(single_runs.outdir / f"{name}_logdir")
    assert sorted(distributed) == sorted(single)
    assert sum(k.startswith("model_variables/") for k in single) >= 4
    for key, value in single.items():
        np.testing.assert_allclose(distributed[key], value, rtol=0, atol=TOLERANCE, err_msg=key)


@pytest.mark.parametrize("name", ["plain", "iter_size"])
def test_train_loss_is_the_global_batchs_as_one_process_on_it_reports(horovod_runs, single_runs, name):
    # Not rank 0's half-batch loss: metrics.jsonl of 2 ranks x 16 equals that of 1 process x 32.
    single_runs(name)

    def losses(logdir):
        return {r["step"]: r["loss"] for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r}

    distributed = losses(horovod_runs.outdir / f"{name}_logdir")
    single = losses(single_runs.outdir / f"{name}_logdir")
    assert sorted(distributed) == sorted(single) == list(range(4, worker.STEPS + 1, 4))
    for step, loss in single.items():
        assert distributed[step] == pytest.approx(loss, rel=1e-5, abs=1e-6), step


def test_an_overflow_on_one_rank_skips_the_update_on_both(horovod_runs, single_runs):
    for rank in (0, 1):
        final, _ = horovod_runs("overflow", rank)
        assert final["skipped_steps"] == 1, f"rank {rank}"
    assert single_runs("overflow")[0]["skipped_steps"] == 1
    # Backoff halved its scale once, on rank 0's records (the only ones written).
    records = read_jsonl(horovod_runs.outdir / "overflow_logdir" / "metrics.jsonl")
    scales = [r["loss_scale"] for r in records if "loss_scale" in r]
    assert scales and scales[-1] == 2.0**9


def test_the_skipped_update_does_not_count_toward_max_steps_on_any_rank(horovod_runs):
    """OpenSeq2Seq's counting under Horovod: the ranks skip the same update (the verdict is
    collective), so each applies max_steps updates and reads one update's batches more."""
    import tensorflow as tf

    for rank in (0, 1):
        assert horovod_runs("overflow", rank)[0]["global_step"] == worker.STEPS
    reader = tf.train.load_checkpoint(str(horovod_runs.outdir / "overflow_logdir" / "checkpoints"))
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == worker.STEPS
    assert reader.get_tensor("micro_batches/.ATTRIBUTES/VARIABLE_VALUE") == worker.STEPS + 1


@pytest.mark.parametrize("name", list(worker.RUNS))
def test_the_updates_moved_the_weights(horovod_runs, name):
    # Guards the comparisons above against runs that changed nothing.
    _, final = horovod_runs(name, 0)
    initial = horovod_runs(name, 0, initial=True)
    kernel = 0  # the first variable is the first layer's kernel
    assert np.max(np.abs(final[kernel] - initial[kernel])) > 1e-3


def test_cli_launch_writes_on_rank_0_only(tmp_path):
    logdir = tmp_path / "run"
    job = horovodrun(
        *OPT_TRAIN, "train", "--config", str(CONFIGS / "horovod.yaml"),
        "--set", "max_steps=20", "--set", "print_loss_steps=5", "--set", "eval_steps=10",
        "--set", "save_checkpoint_steps=10", "--set", f"logdir={logdir}",
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    assert read_json(logdir / "final_metrics.json")["global_step"] == 20
    steps = [r["step"] for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r]
    assert steps == [5, 10, 15, 20]  # one writer: no line twice
    assert "global batch 64" in job.stdout + job.stderr
    assert "[1]<stdout>:" not in job.stdout  # progress comes from rank 0 alone


def test_benchmark_sums_samples_per_second_over_ranks(tmp_path):
    """`--benchmark` under 2 ranks: the samples timed and the samples/s are both ranks' together.

    Nothing here depends on how loaded the machine is: the samples counted are fixed
    by the config, and a sum of two positive rates exceeds rank 0's own rate (the
    timing ratio itself is the benchmark harness's business).
    """
    logdir = tmp_path / "run"
    job = horovodrun(
        *OPT_TRAIN, "train", "--config", str(CONFIGS / "horovod.yaml"), "--benchmark",
        "--set", "max_steps=60", "--set", f"logdir={logdir}",
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    final = read_json(logdir / "final_metrics.json")
    rank_0_rate = 32 / final["benchmark/time_per_step"]  # batch_size_per_gpu in configs/horovod.yaml
    assert final["benchmark/updates_timed"] == 60 - 10
    assert final["benchmark/samples_timed"] == (60 - 10) * 32 * 2
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
