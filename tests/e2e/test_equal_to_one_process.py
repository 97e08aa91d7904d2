"""Every backend past one process equals one process on the doubled batch: Horovod ranks, tf.distribute replicas and workers.

2 Horovod ranks x 16, 2 replicas in one process x 16 (logical CPU devices) and 2
MultiWorkerMirroredStrategy workers x 16 (started by hand, a TF_CONFIG each) against
1 process x 32: the same final weights and optimizer state, the same reported losses,
the same skipped updates (plain float32 and mixed precision), also with iter_size and
with sparse (embedding) gradients, and with optimizer groups. Compared through the checkpoints the chief wrote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.distributed import horovod_train_worker as worker
from tests.support import read_json, read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("distributed-equal")]

TOLERANCE = 1e-5  # weights after worker.STEPS (8) updates
# float16 sums a batch of 16 and one of 32 in different orders: a float16 rounding step
# (~1e-3 relative) on gradients, up to a few 1e-4 on weights and slots after 24 updates (8 here).
MIXED_TOLERANCE = 1e-3
LOSS_TOLERANCE = 1e-4  # reported losses
# What a checkpoint must agree on between runs; the pipeline's own state (e.g. the
# accumulators that only an iter_size run has) may differ in layout.
COMPARED = ("model_variables/", "optimizer/", "global_step/")
BACKENDS = ("horovod", "replicas", "workers")


def runs_of(backend):
    """The runs each backend trains: hand-started workers leave XLA and mixed precision to the
    replicas, which run the same cross-replica stages (suite time: each worker run is two processes);
    Horovod leaves iter_size and optimizer groups, its pipeline's as in one process, to them (see worker.TF_ONLY)."""
    if backend == "horovod":
        return worker.HOROVOD_RUNS
    if backend == "workers":
        return worker.WORKER_RUNS
    return tuple(worker.RUNS)


def cases(names=None):
    """(backend, run) pairs, each backend with the runs it trains."""
    return [
        pytest.param(backend, name, id=f"{backend}-{name}")
        for backend in BACKENDS for name in runs_of(backend) if names is None or name in names
    ]


def checkpoint_values(logdir):
    """{key: value} of the latest checkpoint in logdir, for the keys starting with COMPARED."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(Path(logdir) / "checkpoints"))
    keys = [k for k in reader.get_variable_to_shape_map() if k.startswith(COMPARED)]
    return {k: reader.get_tensor(k) for k in keys}


def reported_losses(logdir):
    return {r["step"]: r["loss"] for r in read_jsonl(Path(logdir) / "metrics.jsonl") if "loss" in r}


@pytest.mark.parametrize(("distributed_runs", "name"), cases(), indirect=["distributed_runs"])
def test_final_weights_and_optimizer_state_equal_one_process_on_the_doubled_batch(distributed_runs, single_runs, name):
    single_runs(name)
    distributed = checkpoint_values(distributed_runs.outdir / f"{name}_logdir")
    single = checkpoint_values(single_runs.outdir / f"{name}_logdir")
    assert sorted(distributed) == sorted(single)
    assert sum(k.startswith("model_variables/") for k in single) >= 4
    for key, value in single.items():
        atol = MIXED_TOLERANCE if name == "mixed" else TOLERANCE
        np.testing.assert_allclose(distributed[key], value, rtol=0, atol=atol, err_msg=key)


@pytest.mark.parametrize(("distributed_runs", "name"), cases(("plain", "iter_size", "sparse")),
                         indirect=["distributed_runs"])
def test_reported_train_loss_is_the_global_batchs(distributed_runs, single_runs, name):
    # Not one replica's half-batch loss: metrics.jsonl equals that of 1 process x 32.
    single_runs(name)
    distributed = reported_losses(distributed_runs.outdir / f"{name}_logdir")
    single = reported_losses(single_runs.outdir / f"{name}_logdir")
    assert sorted(distributed) == sorted(single) == list(range(4, worker.STEPS + 1, 4))
    for step, loss in single.items():
        assert distributed[step] == pytest.approx(loss, rel=0, abs=LOSS_TOLERANCE), step


@pytest.mark.parametrize(("distributed_runs", "name"), cases(("overflow", "mixed")), indirect=["distributed_runs"])
def test_an_overflow_on_one_replica_skips_the_update_everywhere(distributed_runs, single_runs, name):
    for rank in (0, 1):
        if not (distributed_runs.outdir / f"{name}_rank{rank}.json").exists():
            continue  # replicas in one process: one record
        final, _ = distributed_runs(name, rank)
        assert final["skipped_steps"] == 1, f"rank {rank}"
        assert final["global_step"] == worker.STEPS, f"rank {rank}"
    assert single_runs(name)[0]["skipped_steps"] == 1
    # Backoff halved its scale once, on the chief's records (the only ones written).
    records = read_jsonl(distributed_runs.outdir / f"{name}_logdir" / "metrics.jsonl")
    scales = [r["loss_scale"] for r in records if "loss_scale" in r]
    assert scales and scales[-1] == 2.0**9


@pytest.mark.parametrize(("distributed_runs", "name"), cases(), indirect=["distributed_runs"])
def test_the_updates_moved_the_weights(distributed_runs, name):
    # Guards the comparisons above against runs that changed nothing.
    _, final = distributed_runs(name, 0)
    initial = distributed_runs(name, 0, initial=True)
    assert max(np.max(np.abs(f.astype(float) - i.astype(float))) for f, i in zip(final, initial)) > 1e-3


@pytest.mark.parametrize("distributed_runs", ["horovod", "workers"], indirect=True)
def test_a_number_reduced_across_processes_is_every_processs(distributed_runs):
    # Ranks 1 and 2 (rank + 1 on each), each reduction asked three times: the loop reduces
    # a signal number, a pruning verdict and the reported loss this way.
    expected = {"sum": 3, "mean": 1.5, "min": 1, "max": 2}
    for rank in (0, 1):
        scalars = read_json(distributed_runs.outdir / f"scalars_rank{rank}.json")
        assert scalars.pop("float_sum") == pytest.approx(0.75, rel=0, abs=1e-12)
        assert scalars == {f"{op}_{round_}": value for round_ in range(3) for op, value in expected.items()}
    # One traced collective: an eager `strategy.gather` per call made TensorFlow warn that
    # CollectiveAllReduce._batch_all_gather retraced at every call past the fifth.
    assert [line for line in distributed_runs.output.splitlines() if "retracing" in line and "gather" in line] == []
