"""The interface every process-group backend implements."""

from __future__ import annotations

import abc


class HorovodUnavailableError(RuntimeError):
    """`use_horovod: true` was asked for but horovod.tensorflow cannot be imported."""


class Backend(abc.ABC):
    """What the training loop and the gradient pipeline need of a process group.

    `allreduce` and `all_finite` run inside a `tf.function`; the others run eagerly.
    """

    size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def is_chief(self) -> bool:
        """Rank 0: the only process that writes checkpoints, summaries and progress."""
        return self.rank == 0

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
        """Waits until every rank reaches this point."""

    def shutdown(self):
        """Releases the process group."""

    def lost_peer(self, error):
        """One line when `error` means another rank failed or stopped answering, else None."""
        del error
        return None
