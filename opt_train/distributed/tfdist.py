"""The tf.distribute backend: `num_gpus` replicas in this process, and `TF_CONFIG` workers across machines.

One machine, several devices: `MirroredStrategy` over `num_gpus` GPUs, or, on a
machine with no GPU at all, over as many logical CPU devices (so a config runs
with the same global batch on a laptop and in CI). Several machines: each
process is a worker of `MultiWorkerMirroredStrategy`, its cluster read from
`TF_CONFIG` or SLURM's environment (`opt_train.distributed.cluster`).

How a step runs (see `TrainOp` in opt_train/optimizers/train_op.py): the
forward and backward pass and the stages before the accumulation (unscale) run
on each replica (`strategy.run`); everything from the accumulation on runs once
per process in cross-replica context, where `allreduce` turns the per-replica
gradients into the global mean in one grouped reduction, once per update: the
one collective of an update across workers. The finite check, clipping, LARC
and the optimizer then see the same reduced gradient on every worker, so all
skip together; the optimizer's update runs through `strategy.extended.update`
(Keras's own cross-replica path), never through a `merge_call` inside a traced
condition (keras#17429).

A mean over replicas of per-replica mean losses is the global batch's mean
loss (the replicas' batches are equal, remainders dropped), and a regularizer,
the same on every replica, counts once. A step's loss is its process's
replicas' mean; the loop averages it over the workers where it reports it
(`allreduce_scalar`), once per report rather than once per micro-batch.
"""

from __future__ import annotations

import functools
import json
import os

from opt_train.distributed.names import lost_peer_line
from opt_train.distributed.placement import pin_worker_gpus, share_cpu_threads
from opt_train.errors import ParamError
from opt_train.process_group import Backend

# Gradients packed into one collective (tf.distribute's default, 0, sends one per variable).
BYTES_PER_PACK = 64 * 1024 * 1024
# What a collective raises when a peer died or stopped answering (error classes, not message text).
_LOST_PEER_ERRORS = ("UnavailableError", "DeadlineExceededError", "CancelledError", "AbortedError")


def _set_logical_cpus(count):
    """Splits the CPU into `count` logical devices (possible only before TensorFlow starts its runtime)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    if len(tf.config.get_logical_device_configuration(cpu) or ()) >= count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:  # the runtime has started: whatever is there must do (checked by the caller)
        pass


def devices_here(count, key, asks):
    """The devices `count` replicas (or mesh devices) take on this machine: `(names, on_cpu)`.

    Its first `count` GPUs when it has any (fewer is a ParamError at `key`, its sentence
    beginning with `asks`: "asks for 4 GPUs"); on a machine with none, `count` logical CPU
    devices, split now (too late once TensorFlow's runtime has started: a ParamError too).
    The one rule `num_gpus` and a DTensor mesh share.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < count:
            found = ", ".join(gpu.name for gpu in gpus)
            raise ParamError.at(key, "out_of_range", f"{asks} but this machine has {len(gpus)} GPU(s) ({found})", count)
        return [f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(count)], False
    if count > 1:
        _set_logical_cpus(count)
    cpus = tf.config.list_logical_devices("CPU")
    if len(cpus) < count:
        raise ParamError.at(
            key, "out_of_range",
            f"{asks}; no GPU was found and TensorFlow's runtime had already started with {len(cpus)} CPU device(s), "
            "too late to split the CPU", count,
        )
    return [cpu.name for cpu in cpus[:count]], True


def local_devices(num_gpus):
    """(device names, note) for `num_gpus` replicas on this machine (`devices_here`), the note saying when they are
    logical CPU devices."""
    wanted = num_gpus or 1
    devices, on_cpu = devices_here(wanted, "num_gpus", f"asks for {wanted} GPUs")
    note = None
    if on_cpu and wanted > 1:
        note = f"num_gpus: {wanted}: no GPU found; {wanted} replicas run on {wanted} logical CPU devices"
    return devices, note


class StrategyBackend(Backend):
    """Replicas of one process (`MirroredStrategy`) or workers of a cluster (`MultiWorkerMirroredStrategy`).

    Args:
        num_gpus: replicas in this process (one per GPU; logical CPU devices on a
            machine without GPUs). Defaults to `None` (one).
        rank_timeout: seconds a collective waits for a worker that stopped answering
            before the job fails (`CommunicationOptions.timeout_seconds`); None: no bound.
        cluster: an `opt_train.distributed.cluster.Cluster`, or None for this
            process alone. Defaults to `None`.
        startup_timeout: seconds this worker waits for the others to start before it
            ends naming them (`opt_train.distributed.startup`); None: TensorFlow's own
            wait, unbounded by opt-train and deaf to signals. Defaults to `None`.
    """

    def __init__(self, num_gpus=None, rank_timeout=None, cluster=None, startup_timeout=None):
        import tensorflow as tf

        self.rank_timeout = rank_timeout
        self.cluster = cluster
        notes = []
        if cluster is None or cluster.num_workers <= 1:
            devices, note = local_devices(num_gpus)
            notes.append(note)
            self.strategy = tf.distribute.MirroredStrategy(
                devices,
                # On CPU devices (and mixed ones) NCCL is not there: reduce on one device.
                cross_device_ops=None if devices[0].startswith("/gpu") else tf.distribute.ReductionToOneDevice(),
            )
            self._workers, self._worker, self._chief = 1, 0, True
        else:
            os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config())
            # Before the strategy starts TensorFlow's runtime: the host's GPUs and cores are
            # shared with the other workers on it (`--np N` on one machine).
            pin_worker_gpus(num_gpus or 1, cluster.local_index, cluster.local_size)
            share_cpu_threads(cluster.local_size)
            if num_gpus and num_gpus > 1 and not tf.config.list_physical_devices("GPU"):
                notes.append(f"num_gpus: {num_gpus}: no GPU found; each worker runs one replica on its CPU")
            options = tf.distribute.experimental.CommunicationOptions(
                # One all-reduce for all gradients of an update rather than one per variable:
                # across processes each collective pays a round trip.
                bytes_per_pack=BYTES_PER_PACK,
                timeout_seconds=rank_timeout,
                implementation=tf.distribute.experimental.CommunicationImplementation.AUTO,
            )
            if startup_timeout is not None:
                from opt_train.distributed.startup import wait_for_workers

                wait_for_workers(cluster, startup_timeout)
            self.strategy = _without_tf_sigterm(
                lambda: tf.distribute.MultiWorkerMirroredStrategy(communication_options=options))
            self._workers, self._worker, self._chief = cluster.num_workers, cluster.task_index, cluster.is_chief
        self.notes = tuple(n for n in notes if n)
        self.size = self.strategy.num_replicas_in_sync
        self.rank = self._worker
        self.local_rank = 0
        self._local_replicas = len(self.strategy.extended.worker_devices)

    @property
    def is_chief(self):
        return self._chief

    @property
    def num_workers(self):
        return self._workers

    @property
    def worker_index(self):
        return self._worker

    @property
    def replicas_per_worker(self):
        return self._local_replicas

    @property
    def collective_saves(self):
        # Reading a replica-local variable (an accumulator) for a save is a collective.
        return self._workers > 1

    def scope(self):
        return self.strategy.scope()

    def split_batch(self, batch):
        """Per-replica values of a worker's batch: replica r of this worker takes its r-th slice, on its device.

        The data stays an ordinary dataset (`Backend.distribute`), already sharded per worker
        in batches of `replicas_per_worker x batch_size_per_gpu`: a distributed dataset cost a
        multi-device iterator per step (half the update rate of one process on a wide MLP on
        CPU), and `experimental_distribute_dataset` would read each batch as a global one.
        """
        import tensorflow as tf

        count = self._local_replicas
        if count == 1:
            return batch  # the one replica's (a plain value reaches every replica)

        def piece(context):
            index = context.replica_id_in_sync_group % count
            return tf.nest.map_structure(lambda t: tf.split(t, count)[index], batch)

        return self.strategy.experimental_distribute_values_from_function(piece)

    def allreduce(self, tensors, op="mean"):
        """Reduces the replicas' gradients (dense or IndexedSlices) in one grouped call; `None` stays.

        Called in cross-replica context with what `strategy.run` returned: per-replica
        values, or plain tensors where a process has a single replica (then the
        reduction runs across the workers alone).
        """
        import tensorflow as tf

        reduce_op = _reduce_op(op)
        tensors = list(tensors)
        positions = [i for i, t in enumerate(tensors) if t is not None]
        if not positions:
            return tensors
        here = self.strategy.extended.worker_devices[0]
        reduced = self.strategy.extended.batch_reduce_to(
            reduce_op,
            [(tensors[i], tensors[i] if isinstance(tensors[i], tf.distribute.DistributedValues) else here)
             for i in positions],
        )
        for i, value in zip(positions, reduced):
            tensors[i] = _one_value(self.strategy, value)
        return tensors

    def all_finite(self, flag):
        """True on every worker only when `flag` (this process's verdict) is True on every worker.

        Called in cross-replica context; one small collective across workers. The
        replicas of one process share its verdict, so alone a process asks no one.
        """
        if self._workers <= 1:
            return flag
        import tensorflow as tf

        failed = tf.cast(tf.logical_not(flag), tf.float32)
        per_replica = self.strategy.experimental_distribute_values_from_function(lambda context: failed)
        return tf.equal(self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None), 0.0)

    def broadcast_variables(self, variables, root_rank=0):
        # Mirrored variables are kept equal by the strategy (MWMS broadcasts the chief's
        # initial values when it creates them); a resume restores the same checkpoint everywhere.
        return None

    def allreduce_scalar(self, value, op="sum"):
        """Reduces one Python number across workers (a collective when there are several)."""
        if self._workers <= 1:
            return value
        import tensorflow as tf

        values = self._gather_scalar(tf.constant(float(value), tf.float64)).numpy()[:: self._local_replicas]
        result = {"sum": values.sum, "mean": values.mean, "min": values.min, "max": values.max}[op]()
        return int(round(result)) if isinstance(value, int) and op != "mean" else float(result)

    @functools.cached_property
    def _gather_scalar(self):
        """Every replica's copy of a float64 scalar, gathered: one traced function, so that the
        collective is built once rather than at every eager call (each warned of retracing)."""
        import tensorflow as tf

        strategy = self.strategy

        @tf.function(input_signature=[tf.TensorSpec([], tf.float64)])
        def gather(value):
            per_replica = strategy.experimental_distribute_values_from_function(
                lambda context: tf.reshape(value, [1])
            )
            return strategy.gather(per_replica, axis=0)

        return gather

    def lost_peer(self, error):
        """One line when a collective failed because another worker died or did not answer, else None."""
        if self._workers <= 1 or type(error).__name__ not in _LOST_PEER_ERRORS:
            return None
        if type(error).__name__ == "DeadlineExceededError":
            bound = f"within {self.rank_timeout:g} s " if self.rank_timeout else ""
            return lost_peer_line("worker", self._worker, f"did not answer {bound}(rank_timeout_secs); the job stopped")
        # Not a timeout: said the moment a peer's connection broke, it must not claim one.
        return lost_peer_line("worker", self._worker,
                              "failed or was stopped (its connection broke); the job stopped")


def _without_tf_sigterm(make):
    """`make()`, with SIGTERM's handler as it was before: TensorFlow's coordination service takes SIGTERM
    for its preemption notifier (which opt-train does not use), and a SIGTERM it took ended nothing."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return make()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return make()
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _reduce_op(op):
    import tensorflow as tf

    ops = {"mean": tf.distribute.ReduceOp.MEAN, "sum": tf.distribute.ReduceOp.SUM}
    if op not in ops:
        raise ParamError.said("op", "unknown_name", f"`op` must be one of {sorted(ops)}. Received: op={op!r}", op)
    return ops[op]


def _one_value(strategy, value):
    """A reduced value as one tensor (or IndexedSlices): the copy on the current device."""
    import tensorflow as tf

    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value
