"""HorovodBackend on two CPU ranks (horovodrun --gloo), checked against NumPy; and the TFRecord shards its ranks read.

One horovodrun job: each rank first reads two epochs of a `tfrecord` dataset in two layouts
(tests/data/tfrecord_rank_worker.py), then runs every collective, then rank 1 dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.data.test_tfrecord import params, write_records
from tests.distributed import horovod_worker as worker
from tests.processes import horovodrun_argv, needs_horovod
from tests.support import read_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.horovod,
    needs_horovod,
]

WORKER = Path(worker.__file__).resolve()
REPO = WORKER.parents[2]
# How long a job may take before we call it hung: far above a normal run.
JOB_TIMEOUT_SECONDS = 300


def run_job(num_ranks, *args, extra_env=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO), **(extra_env or {}))
    return subprocess.run(
        horovodrun_argv(sys.executable, *args, ranks=num_ranks), cwd=REPO, env=env, capture_output=True,
        text=True, timeout=JOB_TIMEOUT_SECONDS,
    )


LAYOUTS = {"by_file": 4, "by_record": 1}  # files the 48 records are written to


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """{layout: folder}: the records of each layout (and its params.json), read by the job's ranks."""
    folders = {}
    for name, files in LAYOUTS.items():
        folder = folders[name] = tmp_path_factory.mktemp(name)
        write_records(folder, files=files, per_file=48 // files)
        (folder / "params.json").write_text(json.dumps(params(folder)))
    return folders


@pytest.fixture(scope="module")
def job(tmp_path_factory, layouts):
    """One job on 2 ranks: each layout's records read, every collective once, each rank's results saved;
    then rank 1 dies mid-run while rank 0 keeps calling collectives. Returns (the finished horovodrun,
    its output folder)."""
    outdir = tmp_path_factory.mktemp("horovod_collectives")
    arguments = [str(path) for folder in layouts.values() for path in (folder / "params.json", folder)]
    return run_job(2, str(WORKER), "records_collectives_then_killed_rank", str(outdir), *arguments), outdir


@pytest.fixture(scope="module")
def results(job):
    """load(name, rank) -> the arrays that rank saved from the collective `name`."""
    done, outdir = job
    saved_last = [outdir / f"scalars_rank{rank}.npz" for rank in (0, 1)]  # the collectives' last results
    assert all(path.exists() for path in saved_last), done.stdout[-3000:] + done.stderr[-3000:]

    def load(name, rank):
        return np.load(outdir / f"{name}_rank{rank}.npz")

    return load


RANKS = (0, 1)


def test_identity_of_each_rank(results):
    for rank in RANKS:
        saved = results("identity", rank)
        assert int(saved["size"]) == 2
        assert int(saved["rank"]) == rank
        assert int(saved["local_rank"]) == rank  # both on localhost
        assert bool(saved["is_chief"]) == (rank == 0)


@pytest.mark.parametrize("op, reduce", [("mean", np.mean), ("sum", np.sum), ("max", np.max)])
def test_dense_allreduce_matches_numpy(results, op, reduce):
    per_rank = [worker.dense_inputs(rank) for rank in RANKS]
    for rank in RANKS:
        saved = results(f"dense_{op}", rank)
        for key, i in (("first", 0), ("second", 1)):
            expected = reduce(np.stack([inputs[i] for inputs in per_rank]), axis=0)
            np.testing.assert_allclose(saved[key], expected, rtol=1e-6, atol=1e-7)


SPARSE_CASES = {  # saved name -> the gradient left the all-reduce as IndexedSlices
    "sparse_auto_small": False,
    "sparse_auto_big": True,
    "sparse_densified": False,
    "sparse_gathered": True,
}


@pytest.mark.parametrize("name", list(SPARSE_CASES))
def test_sparse_allreduce_equals_dense_mean(results, name):
    expected_sparse = np.mean([worker.densify(*worker.sparse_input(r)) for r in RANKS], axis=0)
    expected_dense = np.mean([worker.dense_inputs(r)[0] for r in RANKS], axis=0)
    for rank in RANKS:
        saved = results(name, rank)
        np.testing.assert_allclose(saved["sparse"], expected_sparse, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(saved["dense"], expected_dense, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, gathered", list(SPARSE_CASES.items()))
def test_sparse_gradient_is_densified_or_gathered_as_chosen(results, name, gathered):
    for rank in RANKS:
        assert bool(results(name, rank)["was_slices"]) is gathered


@pytest.mark.parametrize("bad_rank, expected", [(None, True), (1, False)])
def test_all_finite_is_false_everywhere_when_one_rank_is_not(results, bad_rank, expected):
    for rank in RANKS:
        assert worker.finite_flag(rank, bad_rank) or bad_rank == rank
        assert bool(results(f"finite_bad{bad_rank}", rank)["result"]) is expected


def test_broadcast_makes_every_rank_equal_rank_0(results):
    root, other = results("broadcast", 0), results("broadcast", 1)
    count = len([k for k in root.files if k.startswith("before_")])
    assert count > 6  # kernels, biases, Adam's slots, iterations, our step
    differed = 0
    for i in range(count):
        differed += not np.array_equal(root[f"before_{i}"], other[f"before_{i}"])
        np.testing.assert_array_equal(root[f"after_{i}"], root[f"before_{i}"])
        np.testing.assert_array_equal(other[f"after_{i}"], root[f"before_{i}"])
    assert differed == count  # otherwise the broadcast was not put to the test


def test_allreduce_scalar_and_barrier(results):
    for rank in RANKS:
        saved = results("scalars", rank)
        assert float(saved["sum"]) == 3 and bool(saved["sum_is_int"])
        assert float(saved["mean"]) == 1.5
        assert float(saved["max"]) == 2
        assert float(saved["float_sum"]) == 0.75


def test_killed_rank_ends_the_job_with_an_error(job):
    # A hang would raise subprocess.TimeoutExpired instead of returning.
    done, outdir = job
    assert done.returncode != 0
    # horovodrun ends the surviving rank and names the one that failed first.
    assert "Exit code: 3" in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
    assert not list(outdir.glob("survived_rank*.npz"))


# -- the TFRecord data on the ranks (HorovodBackend's rank and size choose each one's shard) --


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_two_ranks_read_every_record_once_per_epoch(job, layouts, layout):
    done, _ = job
    assert all((layouts[layout] / f"rank{r}.json").exists() for r in RANKS), done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [read_json(layouts[layout] / f"rank{r}.json") for r in RANKS]
    assert all(r["size"] == 2 and r["steps_per_epoch"] == 6 for r in ranks)
    for epoch in (0, 1):
        seen = [i for r in ranks for i in r["ids"][epoch * 24:(epoch + 1) * 24]]
        assert sorted(seen) == list(range(48)), f"epoch {epoch}"
