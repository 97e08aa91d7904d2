"""What past one process adds to an update of a given run, measured alone: the ceilings of the distributed ratios.

    python -m benchmarks.floors replicas --config X.yaml [--set k=v ...]   # in one process
    python -m benchmarks.floors workers --config X.yaml [--set k=v ...]    # 2 local workers (starts them)

Each builds the run of the config (as `opt-train train` would) and times, in a
compiled loop, only the work the distributed form adds to the same arithmetic:

- `replicas`: on one CPU, 2 replicas cannot compute in parallel beyond what one
  process's thread pools already do, and each keeps its own copy of the variables,
  so one more optimizer update (of every variable) and the gradients' sum run per
  update. Timed: `optimizer.apply` of one gradient per variable, and `add_n` of two.
- `workers`: one all-reduce of the update's gradients across 2 worker processes on
  this machine, through the backend's own `allreduce` (the collective `TrainOp`
  runs once per update), timed on worker 0.

Printed as one JSON line: `{"form": ..., "added_ms": ..., "parameters": ...}`.
`benchmarks.distributed` turns it into a ceiling: update / (update + added).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time

from benchmarks import REPO, run_environment

REPEATS = 200  # compiled repetitions per timing (after one warm-up call)


def _run_of(config_path, settings, *extra):
    from opt_train.config import load_config
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    config = load_config([config_path], [*settings, *extra, "logdir=/tmp/opt-train-floors"])
    backend = get_backend(config.distributed, num_gpus=config.num_gpus, rank_timeout=120)
    return build_run(config, backend), backend


def _timed(function, repeats=REPEATS):
    """Seconds per repetition of a compiled loop that calls `function()` `repeats` times."""
    import tensorflow as tf

    @tf.function
    def loop(count):
        total = tf.constant(0.0)
        for _ in tf.range(count):
            total += function()
        return total

    loop(tf.constant(2))
    start = time.perf_counter()
    float(loop(tf.constant(repeats)))
    return (time.perf_counter() - start) / repeats


def replicas(config_path, settings):
    """Milliseconds one more optimizer update and a sum of two gradients take on this run's variables."""
    import tensorflow as tf

    run, _ = _run_of(config_path, settings)
    train_op = run.train_op.build()
    variables = train_op.variables_to_train
    grads = [tf.fill(v.shape, tf.constant(1e-6, v.dtype)) for v in variables]

    def update():
        train_op.optimizer.apply(grads, variables)
        return tf.constant(0.0)

    def gradient_sum():
        return sum(tf.reduce_sum(tf.add_n([g, g * 0.5])) for g in grads)

    added = _timed(update) + _timed(gradient_sum)
    return {"form": "replicas", "added_ms": added * 1e3, "parameters": sum(int(v.shape.num_elements()) for v in variables)}


def worker(config_path, settings):
    """Worker side of `workers`: milliseconds of one all-reduce of this run's gradients (worker 0 prints)."""
    import tensorflow as tf

    run, backend = _run_of(config_path, settings, "distributed=tf")
    train_op = run.train_op.build()
    variables = train_op.variables_to_train
    grads = [tf.fill(v.shape, tf.constant(1e-6, tf.float32)) for v in variables]

    def allreduce():
        reduced = backend.allreduce(grads, op="mean")
        return tf.add_n([r[(0,) * len(r.shape)] for r in reduced])

    seconds = _timed(allreduce)
    backend.leave()
    if backend.is_chief:
        print(json.dumps({"form": "workers", "added_ms": seconds * 1e3,
                          "parameters": sum(int(v.shape.num_elements()) for v in variables)}), flush=True)


def workers(config_path, settings):
    """Starts 2 local workers of `worker` through opt-train's launcher; worker 0's figures."""
    from opt_train.distributed.launcher import Launcher

    out, err = io.StringIO(), io.StringIO()
    command = [sys.executable, "-m", "benchmarks.floors", "worker", "--config", config_path,
               *[arg for s in settings for arg in ("--set", s)]]
    code, message = Launcher(command, 2, env=run_environment(), backend="tf", out=out, err=err).run()
    if code != 0:
        raise RuntimeError(f"the all-reduce floor failed ({code}): {message}\n{err.getvalue()[-2000:]}")
    return json.loads([line for line in out.getvalue().splitlines() if line.startswith("{")][-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("form", choices=["replicas", "workers", "worker"])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.yaml"))
    parser.add_argument("--set", dest="settings", action="append", default=[])
    args = parser.parse_args(argv)
    if args.form == "worker":
        return worker(args.config, args.settings)
    found = (replicas if args.form == "replicas" else workers)(args.config, args.settings)
    print(json.dumps(found))
    return found


if __name__ == "__main__":
    from benchmarks import command_line

    command_line(main)
