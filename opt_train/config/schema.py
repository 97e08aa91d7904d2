"""The typed, frozen config objects that the training layer reads (OpenSeq2Seq key names)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from opt_train.config.issues import ConfigIssue, as_param_error
from opt_train.optimizers.names import LARC_SPEC, MAX_CONSECUTIVE_OVERFLOWS_DEFAULT


@dataclasses.dataclass(frozen=True)
class LarcParams(Mapping):
    """Layer-wise adaptive rate control: `larc_mode` clip or scale, trust ratio `larc_eta`.

    Also a read-only mapping, so `dict(config.larc_params)` gives what
    `optimize_loss(larc_params=...)` takes.
    """

    larc_eta: float  # required, as in OpenSeq2Seq: no trust ratio suits every model
    larc_mode: str = LARC_SPEC["larc_mode"].default
    min_update: float = LARC_SPEC["min_update"].default
    epsilon: float = LARC_SPEC["epsilon"].default

    def __getitem__(self, name):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self):
        return len(self.__dataclass_fields__)


def _empty():
    return dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One resolved, validated run configuration; build it with `load_config`."""

    model: str | dict = "mlp"
    model_params: dict = _empty()
    data: str | dict = "digits"  # a name, or {factory: "pkg.mod:function"}
    data_params: dict = _empty()
    # Loss and metrics by Keras name (opt_train.data.objective_names); None / () keep the task's own.
    loss: str | dict | None = None
    loss_params: dict = _empty()
    metrics: tuple = ()
    batch_size_per_gpu: int = 32
    eval_batch_size: int | None = None
    max_steps: int | None = None
    num_epochs: float | None = None
    optimizer: str = "Adam"
    optimizer_params: dict = _empty()
    lr_policy: str = "fixed"
    lr_policy_params: dict = _empty()
    warmup: dict | None = None
    dtype: str = "float32"
    loss_scaling: float | str = 1.0
    loss_scaling_params: dict = _empty()
    on_nonfinite: str = "skip"
    max_consecutive_overflows: int | None = MAX_CONSECUTIVE_OVERFLOWS_DEFAULT
    # False: a skipped (non-finite) update does not count toward max_steps (OpenSeq2Seq's counting).
    count_skipped_updates: bool = False
    iter_size: int = 1
    iter_size_mode: str = "mean"  # or "sum" (RETURNN's accum_grad_multiple_step)
    use_horovod: bool = False
    # Past one process: none, tf (tf.distribute: num_gpus replicas, TF_CONFIG / SLURM workers) or horovod.
    # Resolved by validate.distribution: use_horovod: true is horovod, num_gpus > 1 alone is tf.
    distributed: str = "none"
    # Seconds before a stopped, dead or unreachable rank ends the job.
    rank_timeout_secs: float = 60.0
    max_grad_norm: float | None = None
    larc_params: LarcParams | None = None
    # Your own gradient transforms, each after a named built-in stage (optimizers/user_transforms.py).
    gradient_transforms: tuple = ()
    regularizer: str | None = None
    regularizer_params: dict = _empty()
    freeze_variables_regex: str | None = None
    # OpenSeq2Seq's default (optimize_loss with summaries=None).
    summaries: tuple = ("learning_rate", "global_gradient_norm", "loss_scale")
    logdir: str = "runs/default"
    save_checkpoint_steps: int | None = 500
    num_checkpoints: int = 5  # OpenSeq2Seq's default
    save_summaries_steps: int | None = 100
    print_loss_steps: int = 100
    eval_steps: int | None = None
    random_seed: int = 0
    # TensorFlow's op determinism plus every seed: two runs give bitwise-equal weights (training/builder.py).
    deterministic: bool = False
    # [start, end]: a TensorBoard profile of these updates in logdir/plugins/profile (`train --profile`).
    profile_steps: tuple | None = None
    # {mlflow: {uri, experiment}}: the run logged to an experiment tracker too (opt_train/tracking.py).
    tracking: dict | None = None
    jit_compile: bool = False
    python_path: tuple = ()
    sweep: dict | None = None
    # OpenSeq2Seq keys with their OpenSeq2Seq meaning (opt_train/config/compat.py, README).
    # Replicas in each process (tf.distribute); None under Horovod, which ignores it (a note says so).
    num_gpus: int | None = None
    print_samples_steps: int | None = None
    bench_start: int | None = None
    load_model: str | None = None
    initializer: str | None = None
    initializer_params: dict = _empty()
    # Eval-driven learning-rate control: RETURNN's newbob, Keras' ReduceLROnPlateau.
    lr_control: dict | None = None
    early_stopping: dict | None = None  # Keras' EarlyStopping: {monitor, patience, min_delta}
    restore_best_checkpoint: bool = False  # OpenSeq2Seq's: eval reads the best-eval-loss checkpoint
    # dotted key -> (file, line) of the value that won; not part of the config itself.
    locations: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    # What opt-train does with foreign keys it accepted (compat.py); printed, not a config key.
    notes: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def to_dict(self):
        """The resolved config as plain YAML-ready types (what `validate` prints)."""
        return {field.name: plain(getattr(self, field.name)) for field in config_fields()}

    def locate(self, dotted_key):
        """`(file, line)` where `dotted_key` (or the nearest enclosing key) was set, else `(None, None)`."""
        return locate(self.locations, dotted_key)

    def issue(self, key, message, code, value=None):
        """A `ConfigIssue` for a problem found after loading (e.g. while TF builds the optimizer)."""
        file, line = self.locate(key)
        return ConfigIssue(file, line, key, code, message, value)

    def dump(self, path):
        """Writes the resolved config as YAML (what `opt-train validate` prints), atomically."""
        import yaml

        from opt_train.atomic import write_text

        write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))

    def code_folders(self):
        """Where the user's modules are imported from: `python_path` entries, each relative to the
        file that set it, else the folder of every config file the config was read from."""
        return code_folders(self.python_path, self.locations)

    def issue_for(self, section, error):
        """A library error raised while building `section` (e.g. `optimizer_params`), located.

        Read from the error's attributes (a `ParamError`'s `param`, `code`, `value`,
        `key`), as load-time checks are: `section.param`, or the error's own `key`.
        """
        error = as_param_error(error)
        key = error.key or join_key(section, error.param)
        return self.issue(key, error.message, error.code, error.value)


def code_folders(python_path, locations):
    """`TrainConfig.code_folders` from the values it reads (the validator has no config yet)."""
    import os

    if python_path:
        folders = []
        for index, entry in enumerate(python_path):
            file, _ = locate(locations, f"python_path[{index}]")
            relative_to = os.path.dirname(file) if file and os.path.exists(file) else ""
            folders.append(os.path.normpath(os.path.join(relative_to, os.path.expanduser(entry))))
        return folders
    files = {file for file, _ in locations.values() if file and os.path.isfile(file)}
    return sorted({os.path.dirname(os.path.abspath(file)) for file in files})


def config_fields():
    """The fields that are config keys (everything but `locations` and `notes`)."""
    return [field for field in dataclasses.fields(TrainConfig) if field.name not in ("locations", "notes")]


FIELD_NAMES = tuple(field.name for field in config_fields())


def plain(value):
    """`value` with dataclasses as dicts and tuples as lists, deep-copied."""
    if dataclasses.is_dataclass(value):
        return {key: plain(item) for key, item in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return copy.deepcopy(value)


def join_key(key, subkey):
    """Where a sub-key failure is reported: `key.sub`, `key[i]`, or a top-level field itself."""
    if not subkey:
        return key
    if subkey in FIELD_NAMES or not key:
        return subkey
    return f"{key}{subkey}" if subkey.startswith("[") else f"{key}.{subkey}"


def parent_key(dotted_key):
    """`a.b[1]` -> `a.b` -> `a` -> `''`."""
    cut = max(dotted_key.rfind("."), dotted_key.rfind("["))
    return dotted_key[:cut] if cut > 0 else ""


def locate(locations, dotted_key):
    key = dotted_key
    while key:
        if key in locations:
            return locations[key]
        key = parent_key(key)
    return None, None
