"""The process-group interface every backend implements, and the single-process backend (TF-free).

Below every layer that needs a backend: the gradient pipeline (`opt_train.optimizers`)
takes one and defaults to `SingleProcess`; `opt_train.distributed` implements the others
(tf.distribute, Horovod, a DTensor mesh) and chooses one (`get_backend`).
"""

from __future__ import annotations

import abc
import contextlib


class Backend(abc.ABC):
    """What the training loop and the gradient pipeline need of a process group.

    `size` counts the data-parallel replicas of the whole job (Horovod: ranks;
    tf.distribute: replicas in sync, workers x replicas per worker), so the
    global batch is `size x batch_size_per_gpu x iter_size`. `rank` is this
    process's place among the `num_workers` processes; each process reads its
    own data shard (`worker_index` of `num_workers`) in batches of
    `replicas_per_worker x batch_size_per_gpu`, which `distribute` splits
    between its replicas.

    `allreduce` and `all_finite` run inside a `tf.function`; the others run eagerly.
    """

    size: int = 1
    rank: int = 0
    local_rank: int = 0
    # A tf.distribute strategy when replicas run inside this process (`opt_train.distributed.tfdist`).
    strategy = None
    # A DTensor mesh when the run's variables are laid out on one (`opt_train.distributed.mesh`).
    mesh = None
    # One line each for the progress output (e.g. "2 replicas on logical CPU devices").
    notes: tuple = ()
    # What one of `replicas_per_worker` is called in a worker's first line.
    replica_noun = "replica"

    @property
    def is_chief(self) -> bool:
        """Rank 0: the only process that writes checkpoints, summaries and progress."""
        return self.rank == 0

    @property
    def num_workers(self) -> int:
        """Processes in the job, each reading its own data shard."""
        return self.size

    @property
    def worker_index(self) -> int:
        """This process's data shard."""
        return self.rank

    @property
    def replicas_per_worker(self) -> int:
        """Replicas this process runs; its batches hold that many per-replica batches."""
        return 1

    @property
    def collective_saves(self) -> bool:
        """Whether every process must take part in a checkpoint save (only the chief's is kept)."""
        return False

    @property
    def saves_together(self) -> bool:
        """Whether every process's part of a collective save goes into the chief's checkpoint itself
        (a DTensor mesh across processes: each writes its own shards there), not a discarded copy."""
        return False

    def scope(self):
        """The context the model, the optimizer and the pipeline's variables are created in."""
        return contextlib.nullcontext()

    def counter_scope(self):
        """The context the train op's own counters (`global_step`, `micro_batches`) are created in."""
        return contextlib.nullcontext()

    def forward(self):
        """The context the model's forward and backward pass is traced in."""
        return contextlib.nullcontext()

    def distribute(self, dataset, batch_size_per_replica):
        """The iterable a train step reads: this process's batches."""
        del batch_size_per_replica
        return dataset

    def split_batch(self, batch):
        """A batch `distribute` gave, as the replicas' inputs (per-replica values under tf.distribute)."""
        return batch

    @abc.abstractmethod
    def allreduce(self, tensors, op="mean"):
        """Reduces a list of tensors (dense or tf.IndexedSlices) across ranks."""

    @abc.abstractmethod
    def all_finite(self, flag):
        """True on every rank only when `flag` (a scalar bool tensor) is True on every rank."""

    @abc.abstractmethod
    def broadcast_variables(self, variables, root_rank=0):
        """Overwrites `variables` on every rank with root_rank's values."""

    def allreduce_scalar(self, value, op="sum"):
        """Reduces one Python number across ranks (eager; used for figures such as samples/s)."""
        return value

    def barrier(self):
        """Waits until every rank reaches this point (a reduction of a zero across the workers)."""
        if self.num_workers > 1:
            self.allreduce_scalar(0)

    def leave(self):
        """After this process's last collective: waits until every rank is done with theirs.

        A process may end once this returns (a run calls it once, after its last
        collective, whether it finished, was stopped or pruned). A collective can end on
        one worker before its peer has fetched this worker's last piece (the receiver
        pulls it over gRPC): a worker that exits right after its last collective can take
        that piece with it, and its peer fails with "Socket closed" (seen in 1 of ~10
        `--np 2 --benchmark` runs on a loaded machine). Past this barrier no worker needs
        another's data. The barrier ends the same way, so a peer gone while it ends here
        (`UnavailableError`) has left: a worker that failed before reaching it reports
        that through its own exit code. A peer that stopped answering still fails this
        one after `rank_timeout_secs`.
        """
        try:
            self.barrier()
        except Exception as error:  # noqa: BLE001 - only the departure of a peer is swallowed
            if type(error).__name__ != "UnavailableError":
                raise

    def shutdown(self):
        """Releases the process group."""

    def lost_peer(self, error):
        """One line (`distributed.names.lost_peer_line`'s) when `error` means another rank failed or stopped
        answering, else None."""
        del error
        return None


class SingleProcess(Backend):
    """One process, rank 0 of 1: every collective is the identity."""

    size = 1
    rank = 0
    local_rank = 0

    def allreduce(self, tensors, op="mean"):
        return list(tensors)

    def all_finite(self, flag):
        return flag

    def broadcast_variables(self, variables, root_rank=0):
        return None
