"""Builds a run from a validated config: backend, dtype policy, data, model, lr policy, train op."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math

import keras

from opt_train.config import ConfigError
from opt_train.errors import ParamError
from opt_train.training import build_notes
from opt_train.usercode import UserCodeError


@dataclasses.dataclass
class Run:
    """Everything one training run is made of."""

    config: object
    backend: object
    data: object
    model: keras.Model
    train_op: object
    max_steps: int
    updates_per_epoch: int
    schedule: object
    notes: tuple = ()  # one line each, printed once at the start

    @property
    def global_batch(self):
        """Examples per update: replicas x `batch_size_per_gpu` x `iter_size`."""
        return self.config.batch_size_per_gpu * self.backend.size * self.config.iter_size


def build_run(config, backend, *, with_train_op=True):
    """Builds the run; a bad parameter found here is a ConfigError at its YAML line."""
    from opt_train.models import build_model
    from opt_train.models.build import fit_problem
    from opt_train.optimizers.mixed_precision import dtype_policy_name
    from opt_train.training.compat import apply_initializer

    # Python's, NumPy's and TensorFlow's generators; the data's shuffles take the seed itself (data/pipeline.py).
    keras.utils.set_random_seed(config.random_seed)
    if config.deterministic:
        enable_determinism()
    keras.mixed_precision.set_dtype_policy(dtype_policy_name(config.dtype))

    data = build_data_for(config, backend)
    if config.loss is not None or config.metrics:
        from opt_train.data.objectives import with_objectives

        with _config_key(config, "loss_params"):
            task = with_objectives(data.task, config.loss, dict(config.loss_params), config.metrics)
        data = data._replace(task=task)
    with _config_key(config, "model_params"):
        too_large = _memory_problem(config, data.task)
        if too_large:
            raise ConfigError([config.issue("model_params", too_large, "too_large")])
        with backend.scope():  # tf.distribute: the weights become mirrored variables
            model = build_model(
                config.model, dict(config.model_params), data.task, regularizer=_regularizer(config)
            )
    problem = fit_problem(model, data.task)
    if problem:
        raise ConfigError([config.issue("model", problem, "out_of_range")])
    if with_train_op and not model.trainable_variables:
        raise ConfigError([config.issue("model", "the model has no trainable weights: nothing to train",
                                        "out_of_range")])
    data = data._replace(task=_scored_as_output(config, model, data.task))
    with _config_key(config, "initializer_params"):
        apply_initializer(model, config)  # OpenSeq2Seq's `initializer` (training/compat.py)
    if backend.mesh is not None:
        with _config_key(config, "layouts"):
            backend.place_model(model)  # every variable a DVariable of its layout (distributed/mesh.py)
    max_steps, updates_per_epoch = run_length(config, data)
    run = Run(config, backend, data, model, None, max_steps, updates_per_epoch, None,
              notes=build_notes.of_model(config, backend, model, with_train_op))
    if with_train_op:
        run.schedule, optimizer_params = learning_rate_schedule(
            config, max_steps, updates_per_epoch, constant_as_schedule=config.lr_control is not None
        )
        if config.lr_control is not None:
            from opt_train.training.controls import ScaledSchedule

            with backend.counter_scope():  # on a mesh the factor, read in every step, is a DVariable
                run.schedule = ScaledSchedule(run.schedule)  # the factor lr_control sets (training/controls.py)
        run.train_op = _train_op(config, backend, data.task, model, run.schedule, optimizer_params)
        run.notes += build_notes.of_groups(config, run.train_op.optimizer)
    return run


def backend_for(config):
    """The process group `config` asks for: a DTensor mesh (`mesh:`), else its `distributed` backend.

    What a mesh cannot combine with (Horovod, num_gpus) was refused when the config loaded
    (`config/validate.py`); under `distributed: tf` it spans the workers of `TF_CONFIG` / SLURM /
    `--np`. A mesh larger than the machine's GPUs, or one the workers cannot share, is a ConfigError
    at `mesh` (or `layouts`).
    """
    from opt_train.distributed import get_backend
    from opt_train.distributed.mesh_layout import mesh_axes

    mesh = config.mesh
    if not mesh_axes(mesh):
        return get_backend(config.distributed, num_gpus=config.num_gpus, rank_timeout=config.rank_timeout_secs,
                           startup_timeout=config.startup_timeout_secs)
    from opt_train.distributed.mesh import MeshBackend

    cluster = None
    if config.distributed == "tf":
        from opt_train.distributed.cluster import cluster_from_environment

        cluster = cluster_from_environment()
    if cluster is not None and cluster.num_workers > 1:
        from opt_train.config.validate import check_placement

        check_placement(config, cluster.num_workers)  # as `train --np` asked before starting the workers
    with _config_key(config, "mesh"):
        return MeshBackend(mesh, config.layouts, config.mesh_batch_axis, cluster=cluster,
                           startup_timeout=config.startup_timeout_secs, rank_timeout=config.rank_timeout_secs)


def enable_determinism():
    """`deterministic: true`: every op TensorFlow runs picks its deterministic kernel (or raises).

    With the seeds set by `build_run` and tf.data's deterministic order (the default,
    which op determinism also enforces), two runs of one config give bitwise-equal
    weights and figures. It holds for the whole process: a later run in it stays deterministic.
    """
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()


def _scored_as_output(config, model, task):
    """The task scoring `model`'s outputs as they are: probabilities when its last layer ends in softmax."""
    from opt_train.data.objectives import match_output
    from opt_train.models.output import probability_output

    try:
        return match_output(task, probability_output(model), config.loss, dict(config.loss_params))
    except ValueError as error:
        raise ConfigError([config.issue(error.key, str(error), "conflict")]) from None


def _memory_problem(config, task):
    """Why the built-in model cannot fit in memory (checked before TensorFlow allocates it), or None."""
    from opt_train.models import registry
    from opt_train.models.size import memory_problem

    if not isinstance(config.model, str):
        return None
    name = registry.resolve(config.model)
    return memory_problem(name, registry.check_params(name, dict(config.model_params)), task)


def run_length(config, data):
    """(max_steps, updates per epoch), both counted in optimizer updates, never micro-batches."""
    from opt_train.data.counts import updates_per_epoch as updates

    updates_per_epoch = updates(data.steps_per_epoch, config.iter_size)
    max_steps = config.max_steps or math.ceil(config.num_epochs * updates_per_epoch)
    return max_steps, updates_per_epoch


def build_data_for(config, backend):
    """This process's data: its worker's shard, in batches of its replicas' per-replica batches together.

    A bad parameter is a located ConfigError.
    """
    from opt_train.data import build_data
    from opt_train.data.card import read_statistics

    with _config_key(config, "data_params"):
        return build_data(
            config.data,
            dict(config.data_params),
            batch_size=config.batch_size_per_gpu * backend.replicas_per_worker,
            replicas=backend.replicas_per_worker,
            seed=config.random_seed,
            rank=backend.worker_index,
            size=backend.num_workers,
            eval_batch_size=config.eval_batch_size,
            # A logdir's later commands (resume, eval, predict, export) standardise as its run did.
            statistics=read_statistics(config.logdir),
        )


def _regularizer(config):
    if config.regularizer is None:
        return None
    params = dict(config.regularizer_params)
    scale = params.pop("scale", 0.0)
    if config.regularizer == "l1":
        return keras.regularizers.L1(scale)
    if config.regularizer == "l2":
        return keras.regularizers.L2(scale)
    if config.regularizer == "tf1_l2":
        from opt_train.training.compat import tf1_l2

        return tf1_l2(scale)
    return keras.regularizers.L1L2(l1=params.get("l1", scale), l2=params.get("l2", scale))


def learning_rate_schedule(config, max_steps, updates_per_epoch, *, constant_as_schedule=False):
    """The lr policy as a schedule and the optimizer's remaining params.

    A constant rate with no warm-up stays in `optimizer_params` (schedule None)
    unless `constant_as_schedule`, which `opt-train lr` asks for to print it.
    """
    from opt_train.lr_policies import get_lr_policy

    optimizer_params = dict(config.optimizer_params)
    if config.lr_policy in (None, "fixed") and not config.warmup and not constant_as_schedule:
        return None, optimizer_params
    base_rate = optimizer_params.pop("learning_rate", None)
    if base_rate is None:
        with _config_key(config, "optimizer"):
            base_rate = _default_learning_rate(config.optimizer)
    with _config_key(config, "lr_policy_params"):
        schedule = get_lr_policy(
            config.lr_policy or "fixed",
            learning_rate=base_rate,
            max_steps=max_steps,
            steps_per_epoch=updates_per_epoch,
            warmup=config.warmup,
            **dict(config.lr_policy_params),
        )
    return schedule, optimizer_params


def _default_learning_rate(optimizer_name):
    """The optimizer class's own default, for a policy given no base rate."""
    from opt_train.optimizers import classes

    cls = classes.get_class(optimizer_name)
    default = inspect.signature(cls).parameters.get("learning_rate")
    if default is None or default.default is inspect.Parameter.empty:
        raise ParamError(
            "learning_rate", "missing",
            f"is required: {optimizer_name} has no default learning rate", None,
            key="optimizer_params.learning_rate",
        )
    return default.default


def _train_op(config, backend, task, model, schedule, optimizer_params):
    from opt_train.optimizers import get_regularization_loss, optimize_loss

    def loss_fn(batch):
        features, labels, *weights = batch  # a data factory may add per-example sample weights
        predictions = model(features, training=True)
        sample_weight = weights[0] if weights else None
        return task.loss(labels, predictions, sample_weight=sample_weight) + get_regularization_loss(model)

    with _config_key(config, "optimizer_params"):
        train_op = optimize_loss(
            loss_fn,
            optimizer_params=optimizer_params,
            learning_rate_decay_fn=schedule,
            var_list=model.trainable_variables,
            distributed=backend,
            # The keys declared with `feeds=` (config/schema.py), each under its argument's name.
            **config.pipeline_arguments(),
        )
        train_op.build()
    return train_op


def user_code_error(config, error):
    """The `ConfigError` of a `UserCodeError`: at its key's YAML line, the user's traceback as details."""
    return ConfigError([config.issue(error.key, error.message, error.code)], details=error.details)


@contextlib.contextmanager
def dtype_policy_kept():
    """Within: `build_run` may set Keras's global dtype policy for its run (the run's layers keep it); after:
    the caller's again, so that a Python caller of `train` or `evaluate` builds its next model as before."""
    policy = keras.config.dtype_policy()
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)


@contextlib.contextmanager
def graph_refusals(config):
    """Within: TensorFlow's refusal of the user's Python control flow on a tensor, met while a step or
    a serving function is traced (train, eval, predict, export), re-raised as a `ConfigError` at the
    key of the code that holds the line (`usercode.graph_refusal`)."""
    from opt_train import usercode

    try:
        yield
    except Exception as error:
        refused = usercode.graph_refusal(error, config.factories())
        if refused is None:
            raise
        raise user_code_error(config, refused) from None


class _config_key:
    """Re-raises a ValueError from building one part as a ConfigError at that part's YAML key."""

    def __init__(self, config, section):
        self.config = config
        self.section = section

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if isinstance(error, UserCodeError):
            raise user_code_error(self.config, error) from None
        if not isinstance(error, ValueError) or isinstance(error, ConfigError):
            return False
        raise ConfigError([self.config.issue_for(self.section, error)]) from None
