"""Trains the distributed end-to-end runs and saves each process's final variables.

Launched by tests/e2e/conftest.py (`horovod_runs`) as
`horovodrun -np 2 -H localhost:2 --gloo python horovod_train_worker.py OUTDIR RUN...`
(BACKEND horovod, the default), and by its `replicas_runs` and `workers_runs` as
`python horovod_train_worker.py --backend replicas OUTDIR RUN...` (2 replicas in one
process) or twice with a TF_CONFIG each and `--backend workers`; the same module gives
the tests the configs of the matching single-process runs. Only NumPy and YAML at module
level: TensorFlow and opt_train.training load in `train_run`.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import yaml

from opt_train import quiet
from opt_train.cli.main import _exit_without_teardown

STEPS = 8  # two loss reports (every 4) and the overflow at the 5th; all inside the first epoch of the data
BATCH = 16  # examples per rank and micro-batch in the Horovod runs

_COMMON = {
    "model": "mlp",
    "model_params": {"hidden_units": [16]},
    "data": "synthetic_classification",
    # 1600 train examples: one epoch is 50 updates of 32 on 1 rank or 2 x 16 on 2 ranks.
    "data_params": {"num_examples": 2000, "num_features": 8, "num_classes": 4},
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
    "lr_policy": "fixed",
    "max_steps": STEPS,
    "print_loss_steps": 4,
    "save_checkpoint_steps": None,
    "save_summaries_steps": None,
    "eval_steps": None,
    "random_seed": 7,
}

_SPARSE = {
    # Embedding gradients are tf.IndexedSlices; dropout 0 keeps the replicas' masks out of it.
    "model": "transformer",
    "model_params": {"d_model": 16, "num_heads": 2, "num_layers": 1, "ff_dim": 16, "dropout": 0.0},
    "data": "reversal",
    "data_params": {"num_examples": 2000},
    # Momentum, not Adam: the attention's key bias has a gradient of float noise (softmax
    # ignores a shift shared by every key), which Adam's normalisation would blow up to
    # lr-sized steps that no two summation orders share.
}

_OVERFLOW = {
    "model": {"factory": "tests.distributed.overflow_model:build"},
    "loss_scaling": "Backoff",
    "loss_scaling_params": {"scale_max": 2.0**10, "step_window": 1000},
}

_GROUPS = {
    "max_grad_norm": 1.0,
    "optimizer_groups": [{"variables": "^dense_0/", "optimizer": "KerasAdam", "lr_multiplier": 0.1}],
}

# name -> (the run on 2 ranks / replicas / workers, the single-process run it must equal)
RUNS = {
    # 2 ranks x 16 == 1 process x 32
    "plain": ({"batch_size_per_gpu": BATCH}, {"batch_size_per_gpu": 2 * BATCH}),
    # 2 ranks x 2 micro-batches x 8 == 1 process x 32
    "iter_size": (
        {"batch_size_per_gpu": BATCH // 2, "iter_size": 2},
        {"batch_size_per_gpu": 2 * BATCH},
    ),
    # jit_compile under Horovod: forward/backward and the update XLA-compiled, the all-reduce
    # and the stages after it in between; against the whole step compiled in one process.
    "xla": (
        {"batch_size_per_gpu": BATCH, "jit_compile": True, "max_grad_norm": 1.0},
        {"batch_size_per_gpu": 2 * BATCH, "jit_compile": True, "max_grad_norm": 1.0},
    ),
    # The 5th update overflows on one rank only (rank 1 here, the only rank alone):
    # Backoff loss scaling must skip it on both, like the single process skips it.
    "overflow": (
        {**_OVERFLOW, "batch_size_per_gpu": BATCH,
         "model_params": {"hidden_units": 16, "overflow_at_call": 5, "overflow_rank": 1}},
        {**_OVERFLOW, "batch_size_per_gpu": 2 * BATCH,
         "model_params": {"hidden_units": 16, "overflow_at_call": 5, "overflow_rank": 0}},
    ),
    # The same in mixed precision (float16 compute, float32 master weights).
    "mixed": (
        {**_OVERFLOW, "batch_size_per_gpu": BATCH, "dtype": "mixed",
         "model_params": {"hidden_units": 16, "overflow_at_call": 5, "overflow_rank": 1}},
        {**_OVERFLOW, "batch_size_per_gpu": 2 * BATCH, "dtype": "mixed",
         "model_params": {"hidden_units": 16, "overflow_at_call": 5, "overflow_rank": 0}},
    ),
    # Optimizer groups: the hidden layer by Adam at a tenth of the rate, the rest by Momentum; one global
    # norm over both groups' gradients.
    "groups": (
        {**_GROUPS, "batch_size_per_gpu": BATCH},
        {**_GROUPS, "batch_size_per_gpu": 2 * BATCH},
    ),
    # Sparse (embedding) gradients: 2 x 16 sequences vs 32.
    "sparse": ({**_SPARSE, "batch_size_per_gpu": BATCH}, {**_SPARSE, "batch_size_per_gpu": 2 * BATCH}),
}
# The runs only tf.distribute's tests take. A Horovod rank runs one process's gradient pipeline
# with the all-reduce stage inside `accumulate` (opt_train/optimizers/allreduce.py), once per
# update; iter_size's accumulation and the optimizer groups after it are that pipeline's, the same
# as in one process: they run where the accumulation and the update are cross-replica ones (replicas,
# and workers for iter_size). Horovod keeps the all-reduce itself (plain), XLA around it, and its
# collective skip (overflow).
TF_ONLY = ("mixed", "sparse", "groups", "iter_size")
HOROVOD_RUNS = tuple(name for name in RUNS if name not in TF_ONLY)
WORKER_RUNS = ("plain", "iter_size", "overflow", "sparse")


def config_payload(name, backend, logdir):
    """The YAML mapping of run `name` for `backend` (horovod, replicas, workers; None: the single-process reference)."""
    distributed, single = RUNS[name]
    payload = {**_COMMON, **(single if backend is None else distributed), "logdir": str(logdir)}
    if backend == "horovod":
        payload["use_horovod"] = True
    elif backend in ("replicas", "workers"):
        payload["distributed"] = "tf"
    if backend == "replicas":
        payload["num_gpus"] = 2
    return payload


def write_config(payload, path):
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(payload, handle, sort_keys=False)
    return path


def recording(backend):
    """`backend`, also keeping the variables the loop broadcasts (the model and optimizer state).

    The loop broadcasts every variable of the run once at its start; after the run
    the same objects hold the final values.
    """
    broadcast = backend.broadcast_variables

    def broadcast_and_keep(variables, root_rank=0):
        backend.kept_variables = list(variables)
        broadcast(variables, root_rank)
        backend.initial_values = [np.array(v.numpy()) for v in variables]

    backend.broadcast_variables = broadcast_and_keep
    return backend


def train_run(config_path, backend):
    """Trains one run with a `recording` backend, without evaluations (`--mode train`) and without
    the end-of-run export (`export: false`): the tests compare weights, optimizer state, reported
    losses and skipped updates (the checkpoint and metrics.jsonl), which neither changes, and the
    export (Keras file and SavedModel) costs ~1 s of CPU a run, ~20 runs a session.

    Returns:
        (final metrics, initial variable values, final variable values).
    """
    from opt_train.config import load_config
    from opt_train.training import train

    config = load_config([str(config_path)], overrides=["export=false"])
    final = train(config, resume=False, backend=backend, evaluate=False)
    return final, backend.initial_values, [np.array(v.numpy()) for v in backend.kept_variables]


def save_run(outdir, name, rank, final, initial, values):
    np.savez(os.path.join(outdir, f"{name}_rank{rank}_initial.npz"), *initial)
    np.savez(os.path.join(outdir, f"{name}_rank{rank}.npz"), *values)
    with open(os.path.join(outdir, f"{name}_rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(final, handle)


def main(outdir, names, backend_name="horovod"):
    from opt_train.distributed import get_backend

    if backend_name == "horovod":
        backend = get_backend("horovod")
    else:
        backend = get_backend("tf", num_gpus=2 if backend_name == "replicas" else None, rank_timeout=120)
    backend = recording(backend)
    for name in names:
        logdir = os.path.join(outdir, f"{name}_logdir")
        config_path = write_config(config_payload(name, backend_name, logdir),
                                   os.path.join(outdir, f"{name}_rank{backend.rank}.yaml"))
        save_run(outdir, name, backend.rank, *train_run(config_path, backend))
    # Across processes (one process of replicas reduces over itself alone), called more
    # times than tf.function's retracing warning allows.
    scalars = {f"{op}_{round_}": backend.allreduce_scalar(backend.rank + 1, op=op)
               for round_ in range(3) for op in ("sum", "mean", "min", "max")}
    scalars["float_sum"] = backend.allreduce_scalar(0.25 * (backend.rank + 1))
    with open(os.path.join(outdir, f"scalars_rank{backend.rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(scalars, handle)
    # Past the last collective, as `opt-train` itself ends (Backend.leave): a worker that
    # exits at once can take its peer's last piece of float_sum with it.
    backend.leave()
    backend.shutdown()


if __name__ == "__main__":
    quiet.import_tensorflow()  # as a command imports it: Keras without its optional bridges
    arguments = sys.argv[1:]
    chosen = "horovod"
    if arguments[0] == "--backend":
        chosen, arguments = arguments[1], arguments[2:]
    main(arguments[0], arguments[1:], chosen)
    # Everything is written and Horovod shut down (main): end without the interpreter's teardown
    # of TensorFlow, 1-4 s a process on a loaded 2-core host, as `opt-train` itself ends.
    _exit_without_teardown(0)
