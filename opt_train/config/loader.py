"""`load_config`: files, `base:` chains and `--set` overrides to one validated `TrainConfig`."""

from __future__ import annotations

import dataclasses
import os

from opt_train.config import compat
from opt_train.config.issues import ConfigError
from opt_train.errors import ParamError
from opt_train.config.layering import layer
from opt_train.config.paths import resolve_paths
from opt_train.config.validate import validate


def default_logdir(paths):
    """`runs/<stem of the last --config file>`."""
    if not paths:
        return os.path.join("runs", "default")
    stem = os.path.splitext(os.path.basename(str(paths[-1])))[0]
    return os.path.join("runs", stem)


def load_config(paths, overrides=()):
    """The validated config from YAML `paths` (later ones win) and `--set` `overrides`.

    Raises `ConfigError` listing every problem found (file problems first).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [str(path) for path in paths]
    layered = layer(paths, overrides)
    compat_issues, notes = compat.apply(layered.data, layered.locations)
    if isinstance(layered.data, dict):
        resolve_paths(layered.data, layered.locations)  # the one path rule (config/paths.py)
    config, issues = validate(
        layered.data,
        layered.locations,
        logdir=default_logdir(paths),
        fallback_file=paths[-1] if paths else None,
        require_length=not layered.issues,
    )
    issues = layered.issues + compat_issues + issues
    if issues:
        raise ConfigError(issues)
    notes += compat.distribution_notes(layered.data, config)
    return dataclasses.replace(config, notes=tuple(notes))


def replicas_per_worker(config, world_size=1):
    """Batch shards each process reads together: `num_gpus` replicas under the tf backend, under a mesh
    its batch axis's size (`mesh_batch_axis`; 1 when the mesh has none) shared by the `world_size`
    processes, else 1 (Horovod: one per rank)."""
    if config.mesh:
        from opt_train.distributed.mesh_layout import batch_shards

        return max(1, batch_shards(config.mesh, config.mesh_batch_axis) // world_size)
    return config.num_gpus if config.distributed == "tf" and config.num_gpus else 1


def derived(config, world_size=1):
    """Figures `opt-train validate` prints beside the config.

    `world_size`: processes (workers, ranks). The global batch is workers x replicas per
    worker (under a mesh: its batch axis) x `batch_size_per_gpu` x `iter_size`. `steps_per_epoch` (optimizer
    updates per epoch, as `train` counts them: `micro_batches_per_epoch` on each worker, also printed
    when `iter_size` > 1, every `iter_size` of them one update) is None where only reading the data tells
    (files, your own pipeline); where a batch is larger than a replica's share of the
    train examples, a `ConfigError` at `batch_size_per_gpu`'s line, as `train` raises.
    """
    from opt_train.data import check_params, counts, resolve
    from opt_train.data.registry import is_factory

    replicas = replicas_per_worker(config, world_size)
    steps = None
    if not is_factory(config.data):
        name = resolve(config.data)
        examples = counts.train_examples(name, check_params(name, config.data_params))
        try:
            # As train builds the data (training/builder.build_data_for): each worker's share of
            # the examples, in batches of its replicas' batches together.
            steps = None if examples is None else counts.steps_per_epoch(
                examples // world_size, config.batch_size_per_gpu * replicas, replicas=replicas)
        except ParamError as error:
            raise ConfigError([config.issue_for("data_params", error)]) from None
    figures = {
        "distributed": config.distributed,
        "world_size": world_size,
        "replicas_per_worker": replicas,
        "global_batch": config.batch_size_per_gpu * world_size * replicas * config.iter_size,
        "steps_per_epoch": None if steps is None else counts.updates_per_epoch(steps, config.iter_size),
    }
    if config.iter_size > 1:
        figures["micro_batches_per_epoch"] = steps
    if config.mesh:
        from opt_train.distributed.mesh_layout import mesh_devices

        figures["mesh_devices"] = mesh_devices(config.mesh)
    return figures
