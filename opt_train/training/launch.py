"""How this job is started, held against the config: the launcher's ranks, a cluster's workers, train's verdict (TF-free)."""

from __future__ import annotations

import os

from opt_train.training.errors import RunRefused
from opt_train.training.logdir import where

# Launchers that start one process per rank set these; a config must then ask for Horovod.
_LAUNCHER_SIZE_VARIABLES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_ranks():
    """How many ranks a launcher (horovodrun, mpirun) started this process among; 1 when none."""
    for name in _LAUNCHER_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def launched_workers(config):
    """How many processes this job has: the TF_CONFIG / SLURM cluster's workers under `distributed: tf`,
    else the launcher's ranks (`launched_ranks`)."""
    if config.distributed == "tf":
        from opt_train.distributed.cluster import cluster_from_environment

        cluster = cluster_from_environment()
        if cluster is not None:
            return cluster.num_workers
    return launched_ranks()


def check_launch(config, ranks=None):
    """The config and the way this job is started agree; returns a warning line, or None.

    `ranks`: the processes `opt-train train --np N` is about to start (it starts Horovod
    ranks for `distributed: horovod`, `tf` workers otherwise); None reads the launcher's
    environment: horovodrun's / mpirun's size, `TF_CONFIG`, SLURM's srun step. Several
    processes that would each train a separate run into one logdir are refused
    (`RunRefused`, naming the key to set); a malformed `TF_CONFIG` is a `ClusterError`.
    """
    from opt_train.distributed.cluster import cluster_from_environment

    if ranks is not None:
        if ranks > 1 and config.distributed == "horovod":
            _check_horovod_installed()
        return None
    launched = launched_ranks()
    cluster = cluster_from_environment()
    workers = cluster.num_workers if cluster is not None else 1
    if launched > 1 and config.distributed == "none" and workers == 1:
        raise RunRefused(
            f"{where(config, 'use_horovod')}: the job was launched with {launched} ranks but the config "
            "does not set use_horovod: true (distributed: horovod); each rank would train a separate run "
            "into one logdir. Set use_horovod: true (or --set distributed=horovod)"
        )
    if workers > 1 and config.distributed == "none":
        how = "TF_CONFIG describes" if cluster.source == "TF_CONFIG" else "the SLURM step (srun) has"
        raise RunRefused(
            f"{where(config, 'distributed')}: {how} {workers} workers but the config's distributed is none; "
            "each worker would train a separate run into one logdir. Set distributed: tf "
            "(or --set distributed=tf)"
        )
    if launched == 1 and config.distributed == "horovod" and not os.environ.get("HOROVOD_RANK"):
        return (
            "warning: use_horovod: true but this process was not started by horovodrun: "
            "training on one rank (launch with `opt-train train --np N` or `horovodrun -np N`)"
        )
    return None


def _check_horovod_installed():
    """`--np N` with Horovod: refused before any rank starts when Horovod is not installed."""
    import importlib.util

    from opt_train.distributed.base import HorovodUnavailableError
    from opt_train.distributed.horovod import INSTALL_COMMAND

    if importlib.util.find_spec("horovod") is None:
        raise HorovodUnavailableError(
            "Horovod is not installed; install it with: "
            f"{INSTALL_COMMAND}, or run the workers on tf.distribute (distributed: tf)")
