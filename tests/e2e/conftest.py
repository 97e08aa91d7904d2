"""Tests across layers: a YAML config taken through `opt-train` (in this process or as real processes) to a finished run's files, held to an independent reference.

The fixtures here are the distributed equality runs: each backend's runs of
`worker.RUNS` (tests/distributed/horovod_train_worker.py) and the single-process reference.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.distributed import horovod_train_worker as worker
from tests.processes import HOROVOD_INSTALLED, JOB_TIMEOUT_SECONDS, LAUNCH_ENV, horovodrun, run_tf_workers
from tests.support import REPO, read_json

WORKER = Path(worker.__file__).resolve()


class Runs:
    """The finished runs of one launch: `load(name, rank)` -> (final metrics, final values), `outdir`."""

    def __init__(self, outdir, output=""):
        self.outdir = outdir
        self.output = output  # what the processes printed

    @staticmethod
    def _arrays(path):
        saved = np.load(path)
        return [saved[key] for key in saved.files]  # arr_0, arr_1, ... in order

    def __call__(self, name, rank, initial=False):
        if initial:
            return self._arrays(self.outdir / f"{name}_rank{rank}_initial.npz")
        return read_json(self.outdir / f"{name}_rank{rank}.json"), self._arrays(self.outdir / f"{name}_rank{rank}.npz")


@pytest.fixture(scope="session")
def horovod_runs(tmp_path_factory):
    """Every Horovod run of `worker.RUNS` on 2 ranks, in one launch."""
    if not HOROVOD_INSTALLED:
        pytest.skip("Horovod is not installed (bash scripts/install_horovod.sh)")
    outdir = tmp_path_factory.mktemp("horovod_e2e")
    job = horovodrun(sys.executable, str(WORKER), str(outdir), *worker.HOROVOD_RUNS)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    return Runs(outdir)


@pytest.fixture(scope="session")
def replicas_runs(tmp_path_factory):
    """Every run of `worker.RUNS` as 2 tf.distribute replicas (logical CPU devices) in one fresh process."""
    outdir = tmp_path_factory.mktemp("replicas_e2e")
    job = subprocess.run(
        [sys.executable, str(WORKER), "--backend", "replicas", str(outdir), *worker.RUNS],
        cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True, timeout=JOB_TIMEOUT_SECONDS,
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-5000:]
    return Runs(outdir)


@pytest.fixture(scope="session")
def workers_runs(tmp_path_factory):
    """The runs of `worker.WORKER_RUNS` on 2 MultiWorkerMirroredStrategy workers started by hand, a TF_CONFIG each."""
    outdir = tmp_path_factory.mktemp("workers_e2e")
    jobs = run_tf_workers([sys.executable, str(WORKER), "--backend", "workers", str(outdir), *worker.WORKER_RUNS])
    for code, output in jobs:
        assert code == 0, output[-5000:]
    return Runs(outdir, "".join(output for _, output in jobs))


@pytest.fixture(scope="session")
def single_runs(tmp_path_factory):
    """The single-process reference of each run, trained in this process on first use."""
    from opt_train.distributed import SingleProcess

    outdir = tmp_path_factory.mktemp("single_e2e")
    done = {}

    def run(name):
        if name not in done:
            config = worker.write_config(
                worker.config_payload(name, None, outdir / f"{name}_logdir"), outdir / f"{name}.yaml"
            )
            done[name] = worker.train_run(config, worker.recording(SingleProcess()))
        return done[name]

    run.outdir = outdir
    return run


@pytest.fixture
def distributed_runs(request):
    """The runs of the backend named by the test's `backend` parameter."""
    return request.getfixturevalue(f"{request.param}_runs")
