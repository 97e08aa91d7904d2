"""Every config key, declared once: its default, rule, doc line, and whether it defines the run.

A key is a `TrainConfig` field made by `key()` (OpenSeq2Seq's names). Its metadata,
in the manner of OmegaConf's structured configs, is what the rest reads:

- `rule(name, raw value) -> typed value`: the validator's (config/validate.py);
- `values`, `doc`: `opt-train list keys` and the key table of docs/config.md (config/keys.py);
- `run`: False for keys that say how long, how visibly or where a run trains, not what
  it trains: changing one continues the same logdir (`NOT_RUN_KEYS`, training/logdir.py);
- `feeds`: the `optimize_loss` argument the value goes to unchanged (`pipeline_arguments`,
  training/builder.py); that argument's default is the field's (tests/training/test_builder_keys.py).

Adding a key: one `key(...)` line here, and the code that reads it.
"""

from __future__ import annotations

import copy
import dataclasses

from opt_train import params as p
from opt_train.config import controls, foreign, rules, sweep_block
from opt_train.config.issues import ConfigIssue, as_param_error, below, locate, parent_key
from opt_train.config.rules import LarcParams
from opt_train.distributed import names as distributed_names
from opt_train.lr_policies import registry as lr_registry
from opt_train.optimizers import names

__all__ = ["LarcParams", "TrainConfig", "key", "NOT_RUN_KEYS", "FIELD_NAMES", "locate", "parent_key"]


def key(default, rule, values, doc, *, run=True, feeds=None, shown=None):
    """A config key: a dataclass field whose metadata holds its rule and documentation.

    Args:
        default: the value when the config does not set the key (a dict or list is copied per config).
        rule: `rule(name, raw value) -> typed value`, raising `ParamError` on a bad value.
        values: what the key accepts, as the docs' key table says it ("int >= 1 or null").
        doc: one line: what the key does.
        run: whether the key defines the run (False: changing it continues the same logdir).
        feeds: the `optimize_loss` argument the value is passed to as it is, or None.
        shown: the default as the docs show it, when the value itself is not what a user sees.
    """
    metadata = {"rule": rule, "values": values, "doc": doc, "run": run, "feeds": feeds, "shown": shown}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_STEPS = p.optional(p.STEP_COUNT)
_MAPPING = "mapping"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One resolved, validated run configuration; build it with `load_config`."""

    model: str | dict = key(
        "mlp", rules.model_spec, 'name or `{factory: "pkg.mod:function"}`',
        "built-in model, or your own Keras model builder")
    model_params: dict = key({}, p.mapping, _MAPPING, "the model's parameters (checked against the model)")
    data: str | dict = key(
        "digits", rules.dataset_name, 'name or `{factory: "pkg.mod:function"}`',
        "built-in dataset, or your own `tf.data` pipeline")
    data_params: dict = key({}, p.mapping, _MAPPING, "the dataset's parameters (checked against the dataset)")
    # Loss and metrics by Keras name (opt_train.data.objective_names); None / () keep the task's own.
    loss: str | dict | None = key(
        None, p.optional(rules.loss_spec), 'Keras loss name or `{factory: "pkg.mod:fn"}` or null',
        "the loss instead of the task's own ([Your own data](models-and-data.md"
        "#your-own-data-tfrecord-files-a-tfdata-factory-losses-and-metrics))")
    loss_params: dict = key(
        {}, p.mapping, _MAPPING,
        "the Keras loss class's arguments (`from_logits` defaults to true), or your function's keywords")
    metrics: tuple = key(
        (), rules.metric_names, "list of Keras metric names",
        "evaluated beside the task's own, reported as `eval/<name>`")
    batch_size_per_gpu: int = key(32, p.integer(1), "int ≥ 1", "examples per micro-batch per replica")
    eval_batch_size: int | None = key(
        None, _STEPS, "int ≥ 1 or null", "evaluation batch size (null: `batch_size_per_gpu`)", run=False)
    max_steps: int | None = key(
        None, _STEPS, "int ≥ 1 or null", "train for this many optimizer updates", run=False)
    num_epochs: float | None = key(
        None, p.optional(rules.positive_float), "number > 0 or null",
        "or for this many passes over the data (give exactly one of the two)", run=False)
    optimizer: str = key(
        "Adam", rules.optimizer_name, "name or `pkg.mod.Class`",
        "registered optimizer, or a dotted path to a class", feeds="optimizer")
    optimizer_params: dict = key(
        {}, rules.optimizer_params, _MAPPING,
        "the optimizer's arguments; `learning_rate` (> 0) is the base rate")
    optimizer_groups: tuple = key(
        (), rules.optimizer_groups, "list of `{variables, optimizer, optimizer_params, lr_multiplier}`",
        "variables whose path a group's regex matches (first group wins) train with its optimizer, its "
        "`optimizer_params` over the top-level ones, at `lr_multiplier` times the run's rate "
        "([Optimizer groups](optimizers.md#optimizer-groups))", feeds="optimizer_groups")
    lr_policy: str = key(
        "fixed", rules.lr_policy_name, "name", ", ".join(lr_registry.POLICY_NAMES))
    lr_policy_params: dict = key(
        {}, p.mapping, _MAPPING, "the policy's parameters (`decay_steps` defaults from `max_steps`)")
    warmup: dict | None = key(
        None, p.optional(p.mapping), "`{steps, power}` or null", "ramp the rate up over the first `steps` updates")
    dtype: str = key(
        "float32", names.DTYPE, ", ".join(names.DTYPES), "compute precision", feeds="dtype")
    loss_scaling: float | str = key(
        1.0, names.LOSS_SCALING, "number > 0 or " + ", ".join(names.LOSS_SCALERS),
        "static loss scale, or an automatic scaler", feeds="loss_scaling")
    loss_scaling_params: dict = key(
        {}, p.mapping, _MAPPING, "the automatic scaler's parameters (not allowed with a number)",
        feeds="loss_scaling_params")
    on_nonfinite: str = key(
        "skip", names.ON_NONFINITE_RULE, ", ".join(names.ON_NONFINITE),
        "what a step with inf/NaN gradients does", feeds="on_nonfinite")
    max_consecutive_overflows: int | None = key(
        names.MAX_CONSECUTIVE_OVERFLOWS_DEFAULT, names.MAX_CONSECUTIVE_OVERFLOWS, "int ≥ 1 or null",
        "stop (exit 1) after this many skipped updates in a row; null: 20 under the default "
        "`count_skipped_updates: false`, no limit with `count_skipped_updates: true` "
        "([details](gradient-pipeline.md#on_nonfinite-max_consecutive_overflows))",
        run=False, feeds="max_consecutive_overflows")
    count_skipped_updates: bool = key(
        False, names.COUNT_SKIPPED_UPDATES, "bool",
        "whether a skipped (non-finite) update counts toward `max_steps`; `false` is OpenSeq2Seq's counting",
        feeds="count_skipped_updates")
    iter_size: int = key(
        1, names.ITER_SIZE, "int ≥ 1", "micro-batches accumulated into one update", feeds="iter_size")
    iter_size_mode: str = key(
        "mean", names.ITER_SIZE_MODE, ", ".join(names.ITER_SIZE_MODES),
        "the update's gradient is the micro-batches' mean (OpenSeq2Seq) or sum (RETURNN)", feeds="iter_size_mode")
    use_horovod: bool = key(
        False, p.boolean, "bool", "OpenSeq2Seq's switch: `true` is `distributed: horovod`",
        run=False, feeds="on_horovod")
    # Resolved with use_horovod and num_gpus by validate.distribution.
    distributed: str = key(
        "none", p.one_of(*distributed_names.BACKENDS, kind="distributed backend"),
        ", ".join(distributed_names.BACKENDS),
        "the backend past one process ([Distribution](distribution.md))", run=False)
    # Placement, not the run (DESIGN.md): a resume may change the model axis and the layouts; the
    # batch axis's size changes the global batch, which training/logdir.py compares on its own.
    mesh: dict | None = key(
        None, rules.mesh, "`{axis: size}` (each int ≥ 1) or null",
        "a DTensor device mesh: named axes whose sizes multiply to the devices used; the batch is sharded on "
        "`mesh_batch_axis` ([Past one device's memory](distribution.md#past-one-devices-memory))", run=False)
    layouts: dict = key(
        {}, rules.layouts, "mapping: regex → list of axis name or null",
        "how variables are sharded on the mesh, one entry per dimension; the first regex that `re.search`es "
        "a variable's path wins; a variable none matches is replicated", run=False)
    mesh_batch_axis: str = key(
        "batch", p.string, "axis name", "the mesh axis the batch is split on (a mesh without it replicates the batch)",
        run=False)
    rank_timeout_secs: float = key(
        60.0, rules.positive_float, "number > 0",
        "a worker stopped, dead or unreachable this long ends the job", run=False)
    startup_timeout_secs: float = key(
        300.0, rules.positive_float, "number > 0",
        "a `TF_CONFIG` / SLURM worker waits this long for the others to start, then ends naming them",
        run=False)
    max_grad_norm: float | None = key(
        None, names.MAX_GRAD_NORM, "number > 0 or null", "clip gradients by their global norm",
        feeds="clip_gradients")
    larc_params: LarcParams | None = key(
        None, p.optional(rules.larc_params), "mapping or null",
        "LARC: `larc_eta` (required), `larc_mode` clip/scale (clip), `min_update` (1e-7), `epsilon` (1e-7); "
        "with `max_grad_norm` both act, clipping first, then LARC (OpenSeq2Seq's optimize_loss refused the pair)",
        feeds="larc_params")
    gradient_transforms: tuple = key(
        (), rules.gradient_transforms, "list",
        "your own gradient transforms, each `{factory, params, after}` (see [The gradient pipeline]"
        "(gradient-pipeline.md#gradient_transforms-your-own-stages))", feeds="gradient_transforms")
    regularizer: str | None = key(
        None, rules.regularizer, ", ".join(rules.REGULARIZERS) + " or null",
        "weight penalty added to the loss (`tf1_l2`: TF1's scale·Σw²/2)")
    regularizer_params: dict = key({}, p.mapping, _MAPPING, "`scale` (≥ 0); for l1_l2 also `l1`, `l2`")
    freeze_variables_regex: str | None = key(
        None, p.optional(p.regex), "regex or null", "variables whose name matches are not trained",
        feeds="freeze_variables_regex")
    summaries: tuple = key(
        names.DEFAULT_SUMMARIES, rules.summaries, "list",
        ", ".join(names.OPTIMIZER_SUMMARIES), run=False, feeds="summaries",
        shown="`[learning_rate, global_gradient_norm, loss_scale]` (OpenSeq2Seq's)")
    logdir: str = key(
        "runs/default", p.string, "path",
        "checkpoints, summaries, `metrics.jsonl`, the resolved `config.yaml`", run=False,
        shown="`runs/<name of the last --config file>`")
    save_checkpoint_steps: int | None = key(
        500, _STEPS, "int ≥ 1 or null", "checkpoint every N updates (null: only at the end)", run=False)
    num_checkpoints: int = key(
        5, p.integer(1), "int ≥ 1", "checkpoints kept", run=False, shown="`5` (OpenSeq2Seq's)")
    save_summaries_steps: int | None = key(
        100, _STEPS, "int ≥ 1 or null", "TensorBoard summaries every N updates", run=False)
    print_loss_steps: int = key(100, p.integer(1), "int ≥ 1", "progress line every N updates", run=False)
    export: bool = key(
        True, p.boolean, "bool",
        "write `logdir/export/` (`model.keras`, SavedModel) at the end (false: a sweep trial that needs only its figures)",
        run=False)
    eval_steps: int | None = key(
        None, _STEPS, "int ≥ 1 or null", "evaluate every N updates (always at the end)", run=False)
    # NumPy's and Python's generators take seeds in [0, 2**32): Keras seeds all three from it.
    random_seed: int = key(
        0, p.integer(0, high=2**32 - 1), "int in [0, 2^32)", "seeds weights, shuffling and dropout")
    deterministic: bool = key(
        False, p.boolean, "bool",
        "TensorFlow's op determinism: two runs give bitwise-equal weights (slower)", run=False)
    profile_steps: tuple | None = key(
        None, p.optional(rules.profile_steps), "`[start, end]` or null",
        "a TensorBoard profile of these updates in `logdir/plugins/profile` (`train --profile`)", run=False)
    tracking: dict | None = key(
        None, p.optional(rules.tracking), "`{mlflow: {uri, experiment}}` or null",
        "log the run to an experiment tracker too (extra `mlflow`)", run=False)
    jit_compile: bool = key(
        False, p.boolean, "bool", "compile the training step with XLA", run=False, feeds="jit_compile")
    python_path: tuple = key(
        (), rules.python_path, "path or list of paths",
        "folders your `factory:` modules are imported from, each relative to its file")
    sweep: dict | None = key(
        None, sweep_block.sweep_block, "mapping or null",
        "the `opt-train sweep` block ([sweeps](sweeps.md)), checked key by key: `sweep.grid.logdir` is "
        "refused at its line", run=False)
    # OpenSeq2Seq keys with their OpenSeq2Seq meaning (compat.py has translated their TF1 spellings).
    num_gpus: int | None = key(
        None, p.optional(p.integer(1)), "int ≥ 1 or null",
        "replicas in each process (OpenSeq2Seq's meaning); ignored under Horovod, with a note")
    print_samples_steps: int | None = key(
        None, p.optional(p.integer(1)), "int ≥ 1 or null",
        "accepted from OpenSeq2Seq; the built-in models have no samples to print (a note says so)")
    bench_start: int | None = key(
        None, p.optional(p.integer(0)), "int ≥ 0 or null",
        "`--benchmark` times the updates after this one (null: min(10, max_steps / 5))")
    load_model: str | None = key(
        None, p.optional(p.string), "path or null",
        "a fresh run starts from the model weights of this run's (or folder's) latest checkpoint "
        "(OpenSeq2Seq's spelling of `init_from: {path}`)")
    init_from: dict | None = key(
        None, p.optional(rules.init_from), "`{path, variables, skip_mismatch}` or null",
        "a fresh run starts from another model's weights: a checkpoint, `.keras` or `.weights.h5` file, "
        "`variables` mapping its paths to this model's ([Fine-tuning](fine-tuning.md#init_from))")
    initializer: str | None = key(
        None, p.optional(p.one_of(*foreign.KERAS_INITIALIZERS, kind="initializer", lower=True)),
        "Keras or TF1 initializer name, or null", "draws every kernel of the built-in models from it")
    initializer_params: dict = key({}, p.mapping, _MAPPING, "the initializer's arguments")
    lr_control: dict | None = key(
        None, p.optional(controls.lr_control), "mapping or null",
        "eval-driven learning rate: `mode` newbob, newbob_abs (RETURNN; on an error such as loss) or plateau "
        "(Keras' ReduceLROnPlateau; `monitor_mode` auto, min or max is its `mode`); needs `eval_steps` ([lr_control](openseq2seq-returnn.md#lr_control-eval-driven-learning-rate))")
    early_stopping: dict | None = key(
        None, p.optional(controls.early_stopping), "mapping or null",
        "Keras' EarlyStopping: `monitor` (loss), `mode` (auto: max for accuracy-like metrics, as Keras; min, max), "
        "`patience` (0), `min_delta` (0); stops after an evaluation; needs `eval_steps`")
    restore_best_checkpoint: bool = key(
        False, p.boolean, "bool",
        "keep the best model in `logdir/best/` (early stopping's monitor and mode when set, else the eval loss); "
        "`opt-train eval` reads it (OpenSeq2Seq's key); needs `eval_steps`")
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

    def not_run_keys(self):
        """The keys whose change continues the same run (`key(run=False)`): length, visibility, place."""
        return NOT_RUN_KEYS

    def chosen(self):
        """`{key: value}` (as `to_dict`) of the keys that define the run and that this config sets to other than
        their default: what sets this run apart from others (its HParams columns)."""
        resolved = self.to_dict()
        return {field.name: resolved[field.name] for field in config_fields()
                if field.name not in NOT_RUN_KEYS and resolved[field.name] != plain(default_of(field))}

    def pipeline_arguments(self):
        """`optimize_loss` keyword arguments of the keys that feed it unchanged (`key(feeds=...)`).

        Tuples go as lists and mappings as dicts, the types `optimize_loss` documents.
        """
        return {argument: _as_argument(getattr(self, name)) for name, argument in FEEDS.items()}

    def code_folders(self):
        """Where the user's modules are imported from: `python_path` entries, each relative to the
        file that set it, else the folder of every config file the config was read from."""
        return code_folders(self.python_path, self.locations)

    def factories(self):
        """`{config key: "package.module:function"}` of the user's functions the config names:
        model, data, loss and gradient transform factories."""
        specs = {"model": self.model, "data": self.data, "loss": self.loss,
                 **{f"gradient_transforms[{i}]": spec for i, spec in enumerate(self.gradient_transforms)}}
        return {f"{key}.factory": spec["factory"] for key, spec in specs.items()
                if isinstance(spec, dict) and "factory" in spec}

    def named(self, key):
        """How a line names the `model` or `data` of the run: `mlp`, or the value of a one-key
        spec (`MobileNet` of `{keras_application: MobileNet}`, `pkg.mod:make` of a factory)."""
        spec = getattr(self, key)
        return str(next(iter(spec.values()))) if isinstance(spec, dict) and len(spec) == 1 else str(spec)

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


def _as_argument(value):
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def default_of(field):
    """The value of config key `field` in a config that does not set it."""
    return field.default_factory() if callable(field.default_factory) else field.default


def config_fields():
    """The fields that are config keys (everything but `locations` and `notes`)."""
    return [field for field in dataclasses.fields(TrainConfig) if field.name not in ("locations", "notes")]


FIELD_NAMES = tuple(field.name for field in config_fields())
# Keys that do not define the run: changing them continues the same logdir (training/logdir.py).
NOT_RUN_KEYS = frozenset(field.name for field in config_fields() if not field.metadata["run"])
# config key -> the `optimize_loss` argument it is passed to as it is.
FEEDS = {field.name: field.metadata["feeds"] for field in config_fields() if field.metadata["feeds"]}


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
    return below(key, subkey)
