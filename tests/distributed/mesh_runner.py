"""Runs the mesh runs of test_mesh.py one after another in one fresh process (4 logical CPU devices).

`python -m tests.distributed.mesh_runner JOBS.json RESULTS.json`: each job is
`{"kind": "train", "argv": [...]}` (an `opt-train` command line, its exit code recorded) or
`{"kind": "shards", "config": path}` (the bytes per device of the run's model variables and
optimizer state as the mesh backend lays them out, beside the memory plan's figures) or
`{"kind": "copy", "from": logdir, "to": logdir}` (a finished run's logdir copied, so that two
runs can go on from the same checkpoint). The CPU
is split into devices when TensorFlow starts, so this cannot run in the test's own process.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import traceback


def train(argv):
    from opt_train.cli.main import main

    try:
        main(argv)
    except SystemExit as stop:
        return stop.code or 0
    except Exception:  # noqa: BLE001 - recorded for its test; the next runs go on
        return traceback.format_exc()[-3000:]
    return 0


def shards(path):
    """{"weights", "state"} bytes per device as built, and the plan's {"plan_weights", "plan_state"}."""
    from tensorflow.experimental import dtensor

    from opt_train.config.loader import load_config
    from opt_train.config.memory import plan
    from opt_train.optimizers.mesh_state import layout_of_variable, tf_variable
    from opt_train.training.builder import backend_for, build_run

    config = load_config([path])
    run = build_run(config, backend_for(config))
    train_op = run.train_op.build()

    def local_bytes(variable):
        inner = tf_variable(variable)
        assert isinstance(inner, dtensor.DVariable), getattr(variable, "path", inner.name)
        shape = layout_of_variable(variable).local_shape_from_global_shape(tuple(inner.shape))
        return math.prod(int(size) for size in shape) * inner.dtype.size

    model = list(run.model.weights)
    state = [v for v in train_op.optimizer.variables]
    state += [v for v in train_op.checkpoint_items()["pipeline"].state if "accumulator" in v.name]
    planned = plan(config, [(v.path, tuple(v.shape), v.dtype, v.trainable) for v in model])
    return {
        "weights": sum(local_bytes(v) for v in model),
        "state": sum(local_bytes(v) for v in state),
        "plan_weights": planned.weights,
        "plan_state": planned.optimizer_state,
        "state_names": sorted(getattr(v, "path", v.name) for v in state),
    }


def main(jobs_path, results_path):
    with open(jobs_path, encoding="utf-8") as handle:
        jobs = json.load(handle)
    results = []
    for job in jobs:
        if job["kind"] == "train":
            results.append({"code": train(job["argv"])})
        elif job["kind"] == "copy":
            shutil.copytree(job["from"], job["to"])
            results.append({})
        else:
            results.append(shards(job["config"]))
    with open(results_path, "w", encoding="utf-8") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(*sys.argv[1:3])
