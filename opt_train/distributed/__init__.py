"""Process-group backends: one interface; a single-process, a tf.distribute and a Horovod implementation.

The backend is chosen once, by `get_backend(distributed, ...)`; only
`opt_train.distributed.horovod` imports horovod. Importing this package
imports no TensorFlow.
"""

from opt_train.distributed.base import HorovodUnavailableError
from opt_train.distributed.names import BACKENDS
from opt_train.errors import ParamError
from opt_train.process_group import Backend, SingleProcess


def get_backend(distributed="none", *, num_gpus=None, rank_timeout=None, startup_timeout=None):
    """The backend for this process.

    Args:
        distributed: `"none"` (one process, one device), `"tf"` (tf.distribute:
            `num_gpus` replicas here, and a worker of the cluster `TF_CONFIG` or
            SLURM describes) or `"horovod"`. Defaults to `"none"`.
        num_gpus: replicas in this process (tf.distribute). Defaults to `None` (one).
        rank_timeout: seconds the ranks wait for one that stopped answering (the
            config's `rank_timeout_secs`); None keeps the engine's default.
        startup_timeout: seconds a `TF_CONFIG` / SLURM worker or a Horovod rank waits for
            the others to start (the config's `startup_timeout_secs`); None: TensorFlow's
            own wait (tf), `horovod.START_WAIT_SECONDS` (Horovod).
    """
    if distributed not in BACKENDS:
        raise ParamError.said("distributed", "unknown_name",
                              f"`distributed` must be one of {list(BACKENDS)}. Received: distributed={distributed!r}",
                              distributed)
    if distributed == "horovod":
        from opt_train.distributed.horovod import HorovodBackend

        return HorovodBackend(rank_timeout=rank_timeout, startup_timeout=startup_timeout)
    if distributed == "tf":
        from opt_train.distributed.cluster import cluster_from_environment
        from opt_train.distributed.tfdist import StrategyBackend

        return StrategyBackend(num_gpus=num_gpus, rank_timeout=rank_timeout, cluster=cluster_from_environment(),
                               startup_timeout=startup_timeout)
    return SingleProcess()


__all__ = ["BACKENDS", "Backend", "HorovodUnavailableError", "SingleProcess", "get_backend"]
