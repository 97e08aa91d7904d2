"""Which GPUs and how many CPU threads each process of a job takes on the host it shares with others.

Both backends start one process per worker (Horovod rank, `tf.distribute` worker);
several of them may run on one host (`--np 2` on a laptop, 8 ranks on an 8-GPU
node). Left alone, each process would size its thread pools to every core of the
host and see every GPU. The rules here give each its share:

- GPUs: a worker of `per_worker` replicas takes `per_worker` GPUs of its own,
  the `local_index`-th block of them, unless the environment already gave each
  process its own (SLURM's `--gpus-per-task`, a Kubernetes device plugin,
  `CUDA_VISIBLE_DEVICES` set by hand): then it takes what it sees.
- CPU threads: the host's cores split evenly between the processes on it
  (intra-op and inter-op pools alike), so N processes do not run N times as
  many busy threads as there are cores. Settings the user made stay.

`worker_gpus` is TF-free; the two others configure TensorFlow before its runtime
starts (afterwards its settings are fixed and stay).
"""

from __future__ import annotations

import os

from opt_train.errors import ParamError

# TensorFlow's own variables for its pool sizes (read when no size was set in code): the user's choice.
INTRA_OP_VARIABLE = "TF_NUM_INTRAOP_THREADS"
INTER_OP_VARIABLE = "TF_NUM_INTEROP_THREADS"


def worker_gpus(found, per_worker, local_index, local_size):
    """The positions (in `found`) of the GPUs this worker takes.

    Args:
        found: how many GPUs this process sees.
        per_worker: the replicas of each worker (`num_gpus`, at least 1).
        local_index: this worker's place among the workers on its host.
        local_size: the workers on its host.

    Raises:
        ParamError at `num_gpus` when the host has fewer GPUs than its workers need.
    """
    if found == per_worker or local_size <= 1 and found >= per_worker:
        return list(range(per_worker))
    if found >= per_worker * local_size:
        first = local_index * per_worker
        return list(range(first, first + per_worker))
    raise ParamError.at(
        "num_gpus", "out_of_range",
        f"asks for {per_worker} GPU(s) in each of the {local_size} workers on this host, "
        f"{per_worker * local_size} in all, but this process sees {found}",
        per_worker,
    )


def pin_worker_gpus(per_worker, local_index, local_size):
    """Makes this process see only its own GPUs (`worker_gpus`); a machine without GPUs is left as it is."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    mine = [gpus[i] for i in worker_gpus(len(gpus), per_worker, local_index, local_size)]
    try:
        if local_size > 1:
            # Processes of one host may share a GPU (fewer GPUs than workers): none takes all its memory.
            for gpu in mine:
                tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(mine, "GPU")
    except RuntimeError:  # the runtime has started: its devices stay
        pass


def share_cpu_threads(local_size):
    """Gives each of `local_size` processes on this host an equal share of its cores.

    Measured on 2 cores with 2 tf.distribute workers of the default MLP: 5.3 ms an
    update with each sizing its pools to both cores, 4.5 ms with one core each.
    Leaves alone what the user set already (`TF_NUM_INTRAOP_THREADS`, ...), and a
    TensorFlow runtime that has started (the setting is fixed then).
    """
    import tensorflow as tf

    if local_size <= 1:
        return
    threads = max(1, (os.cpu_count() or 1) // local_size)
    try:
        if tf.config.threading.get_intra_op_parallelism_threads() == 0 and not os.environ.get(INTRA_OP_VARIABLE):
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        if tf.config.threading.get_inter_op_parallelism_threads() == 0 and not os.environ.get(INTER_OP_VARIABLE):
            tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # the runtime is initialized: keep its settings
        pass
