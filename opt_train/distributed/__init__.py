"""Process-group backends: one interface, a single-process and a Horovod implementation.

The backend is chosen once, by `get_backend(use_horovod)`; only
`opt_train.distributed.horovod` imports horovod. Importing this package
imports no TensorFlow.
"""

from opt_train.distributed.base import Backend, HorovodUnavailableError
from opt_train.distributed.single import SingleProcess


def get_backend(use_horovod=False, rank_timeout=None):
    """The backend for this process: Horovod when asked for, else a single process.

    `rank_timeout`: seconds the ranks wait for one that stopped answering (the config's
    `rank_timeout_secs`); None keeps Horovod's default.
    """
    if not use_horovod:
        return SingleProcess()
    from opt_train.distributed.horovod import HorovodBackend

    return HorovodBackend(rank_timeout=rank_timeout)


__all__ = ["Backend", "HorovodUnavailableError", "SingleProcess", "get_backend"]
