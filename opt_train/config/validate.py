"""Checks merged config data field by field, then across fields, and builds a `TrainConfig`.

Every field has one rule, `rule(name, raw value) -> typed value`, declared with the key
itself (`schema.key`), most of them the library's own (`opt_train.optimizers.names`,
`opt_train.params`); the rules that involve several fields live together in `CROSS_RULES`, and the registries' tables judge the
parameter blocks (optimizer, lr policy, model, data). Problems are collected, never
raised one at a time: the loader raises them together.
"""

from __future__ import annotations

from opt_train.config import rules
from opt_train.config.issues import OVERRIDE_FILE, ConfigIssue, RuleError, RuleErrors, as_param_error
from opt_train.data import registry as datasets
from opt_train.lr_policies import registry as lr_policies
from opt_train.models import registry as models
from opt_train.optimizers import specs as optimizer_specs
from opt_train.config.schema import FIELD_NAMES, TrainConfig, config_fields, join_key, locate
from opt_train.distributed import names as distributed_names
from opt_train.optimizers import names
from opt_train.optimizers import table as optimizer_table
from opt_train.errors import ParamError
from opt_train.params import ParamErrors
from opt_train.usercode import UserCodeError

# -- field rules: rule(name, value) -> typed value, each declared with its key (schema.key) --

FIELD_RULES = {field.name: field.metadata["rule"] for field in config_fields()}


# -- cross-field rules ---------------------------------------------------------


def steps_or_epochs(values):
    """Exactly one of `max_steps` and `num_epochs` says how long to train."""
    if values["max_steps"] is not None and values["num_epochs"] is not None:
        raise RuleError("cannot be used together with max_steps; set only one", None, "conflict")
    if values["max_steps"] is None and values["num_epochs"] is None:
        raise RuleError("one of max_steps, num_epochs is required", None, "missing", subkey="max_steps")


def loss_scaler_params(values):
    """The loss scaler's parameters are its own; none are allowed with a static scale."""
    params = values["loss_scaling_params"]
    if isinstance(values["loss_scaling"], str):
        errors = names.LOSS_SCALER_NAMES.param_errors(values["loss_scaling"], params)[1]
        if errors:
            raise RuleErrors(errors)
    else:
        names.check_loss_scaling(values["loss_scaling"], params)


def optimizer_params(values):
    """The optimizer's parameters, judged by its table (names, ranges, required ones) without TF."""
    params = values["optimizer_params"]
    errors = optimizer_specs.param_errors(values["optimizer"], params)[1]
    if errors:
        raise RuleErrors(errors)
    if "learning_rate" in params:
        # Stored as a number, so `"1e-3"` in YAML trains like 1e-3.
        rate = rules.RATE("learning_rate", params["learning_rate"])
        return {"optimizer_params": {**params, "learning_rate": rate}}
    return None


def optimizer_group_params(values):
    """Each optimizer group's parameters, judged by its optimizer's table as `optimizer_params` are."""
    from opt_train.optimizers import grouping

    errors = grouping.param_errors(values["optimizer_groups"], values["optimizer"], values["optimizer_params"])
    if errors:
        raise RuleErrors(errors)


def regularizer_params(values):
    """`scale` for l1 / l2, also `l1` and `l2` for l1_l2, each >= 0; nothing without a regularizer."""
    params = dict(values["regularizer_params"])
    if values["regularizer"] is None:
        if params:
            raise RuleError("needs a regularizer (l1, l2 or l1_l2)", None, "conflict")
        return None
    rules.check_known_keys(params, rules.REGULARIZER_PARAMS[values["regularizer"]])
    for name, value in params.items():
        params[name] = rules.nonnegative_float(name, value)
    return {"regularizer_params": params}


def lr_policy_params(values):
    """The policy's parameters; `decay_steps` may default from `max_steps`."""
    lr_policies.check_params(
        values["lr_policy"], values["lr_policy_params"], max_steps=values["max_steps"], steps_per_epoch=None
    )


def warmup_params(values):
    """The `warmup` block's `steps` and `power`."""
    if values["warmup"] is not None:
        lr_policies.check_warmup(values["warmup"])


def model_params(values):
    """A built-in or saved model's parameters (a factory's go to the user's function unchecked)."""
    if not models.is_factory(values["model"]):
        errors = models.param_errors(values["model"], values["model_params"])[1]
        if errors:
            raise RuleErrors(errors)


def data_params(values):
    """The dataset's parameters."""
    errors = datasets.param_errors(values["data"], values["data_params"])[1]
    if errors:
        raise RuleErrors(errors)


def model_fits_data(values):
    """A built-in model serves the dataset's task (the transformer labels sequences, ...)."""
    kind = datasets.task_kind(values["data"], values["data_params"])
    models.check_task(values["model"], kind)


def loss_fits_task(values):
    """A `loss` by name reads what a model opt-train shapes outputs for the dataset's task
    (`objective_names.loss_fit_problem`): a built-in's, and a `keras_application`'s, whose head opt-train
    puts on (per-class logits, as a built-in's); a model of the user's (a factory, a saved model) shapes its
    own output."""
    from opt_train.data.objective_names import loss_fit_problem

    if not isinstance(values["loss"], str) or models.spec_kind(values["model"]) not in ("name", "keras_application"):
        return
    problem = loss_fit_problem(values["loss"], datasets.task_kind(values["data"], values["data_params"]))
    if problem:
        raise ParamError.at("loss", "conflict", problem, values["loss"])


def metrics_fit_task(values):
    """Each of `metrics` reads the labels the dataset's task gives (`objective_names.metric_fit_problem`).

    Judged under the task's own loss only: a config whose `loss` reads other labels (binary cross-entropy
    on a one-unit sigmoid model) has said how its labels are read.
    """
    from opt_train.data.objective_names import metric_fit_problem

    if values["loss"] not in (None, "sparse_categorical_crossentropy"):
        return
    kind = datasets.task_kind(values["data"], values["data_params"])
    errors = [ParamError.at(f"metrics[{index}]", "conflict", problem, name)
              for index, name in enumerate(values["metrics"])
              if (problem := metric_fit_problem(name, kind))]
    if errors:
        raise RuleErrors(errors)


def monitors(values):
    """`early_stopping.monitor` and `lr_control.monitor` name a figure the evaluation reports, with a direction.

    The names are the run's own (`opt_train.data.task.eval_metric_names`: the task's, `loss`,
    the config's `metrics`); the direction is Keras's rule (`objective_names.monitor_direction`).
    """
    from opt_train.data import objective_names
    from opt_train.data.task import eval_metric_names
    from opt_train.suggest import UnknownNameError

    kind = datasets.task_kind(values["data"], values["data_params"])
    known = eval_metric_names(kind, values["metrics"])
    errors = []
    for block, direction in (("early_stopping", "mode"), ("lr_control", "monitor_mode")):
        params = values[block]
        if not params:
            continue
        monitor = params["monitor"]
        if monitor not in known:
            error = UnknownNameError("eval metric", monitor, known)
            error.key = f"{block}.monitor"
            error.message += f" (this run's evaluation reports {', '.join(known)})"
            errors.append(error)
        elif direction in params:
            try:
                objective_names.monitor_direction(monitor, params[direction])
            except ValueError as error:
                errors.append(ParamError.at(f"{block}.{direction}", "conflict", str(error), params[direction]))
    if errors:
        raise RuleErrors(errors)


def sweep_metric(values):
    """`sweep.metric` names a figure every trial reports (`sweep_block.metric_problem`: the run's eval metrics)."""
    from opt_train.config.sweep_block import metric_problem

    metric = (values["sweep"] or {}).get("metric")
    if metric is None:
        return
    metric = metric.strip()
    problem = metric_problem(metric, datasets.task_kind(values["data"], values["data_params"]),
                             values["metrics"])
    if problem:
        raise ParamError.at("sweep.metric", "unknown_name", problem, metric)


def warm_start_sources(values):
    """One warm start: `load_model` is OpenSeq2Seq's spelling of `init_from: {path}`, not a second source."""
    if values["init_from"] is not None and values["load_model"] is not None:
        raise RuleError("cannot be used together with load_model (its simplest case); keep init_from", None,
                        "conflict")


def warm_start_source(values):
    """`init_from.path` names something to start from, unless the logdir's own checkpoints make it a resume."""
    if values["init_from"] is not None:
        problem = rules.missing_init_source(values["init_from"]["path"], values["logdir"])
        if problem:
            raise problem


def distribution(values):
    """`distributed` resolved with `use_horovod` and `num_gpus` (opt_train.distributed.names.resolve)."""
    distributed, use_horovod, num_gpus = distributed_names.resolve(
        values["distributed"], values["use_horovod"], values["num_gpus"])
    return {"distributed": distributed, "use_horovod": use_horovod, "num_gpus": num_gpus}


def mesh_placement(values):
    """What a mesh may be combined with, and what its `layouts` may name, known without the model's shapes.

    A mesh is a way to place a run of its own: not beside `num_gpus` replicas or Horovod ranks. It may
    span the workers of `distributed: tf` (`check_placement` asks, knowing how many there are).
    `layouts` need a mesh and may name only its axes; a `mesh_batch_axis` set to an axis the mesh
    lacks would replicate the batch instead of splitting it; an optimizer the table says cannot update
    laid-out variables (a TF1 fused kernel without a DTensor rule) is refused naming it. The shapes (a sharded dimension the
    axis size must divide) are checked where the model's variables are known: `validate`'s memory
    plan for a built-in model, the DTensor backend for any model.
    """
    from opt_train.distributed.mesh_layout import DEFAULT_BATCH_AXIS

    mesh, layouts, batch_axis = values["mesh"], values["layouts"], values["mesh_batch_axis"]
    if not mesh:
        if layouts:
            raise ParamError.at("layouts", "conflict",
                                "layouts need a mesh to lay variables out on; set `mesh` (e.g. {batch: 2, model: 2}) "
                                "or remove layouts", dict(layouts))
        return
    if values["use_horovod"] or values["distributed"] == "horovod":
        raise ParamError.at("mesh", "conflict",
                            "a mesh places the run itself (DTensor); it cannot run under Horovod: remove `mesh` or "
                            "`use_horovod` / `distributed: horovod`", dict(mesh))
    if values["num_gpus"] is not None and values["num_gpus"] > 1:
        raise ParamError.at("mesh", "conflict",
                            f"a mesh takes its devices from its own axes; it cannot be combined with num_gpus: "
                            f"{values['num_gpus']} replicas: remove one", dict(mesh))
    if batch_axis != DEFAULT_BATCH_AXIS and batch_axis not in mesh:
        raise ParamError.at("mesh_batch_axis", "unknown_name",
                            f"mesh_batch_axis names {batch_axis!r}, which the mesh lacks (mesh axes: {', '.join(mesh)})",
                            batch_axis)
    refusal = optimizer_table.mesh_refusal(values["optimizer"], values["optimizer_params"])
    if refusal:
        raise ParamError.at("optimizer", "conflict", refusal, values["optimizer"])
    for pattern, spec in layouts.items():
        for axis in spec:
            if axis is not None and axis not in mesh:
                raise ParamError.at("layouts", "unknown_name",
                                    f"layouts[{pattern!r}] names axis {axis!r}, which the mesh lacks "
                                    f"(mesh axes: {', '.join(mesh)})", axis)


def check_placement(config, processes=1):
    """`mesh_placement` of a config as it will run (`--np N` makes it `distributed: tf`): a `ConfigError` at its key.

    `load_config` applied it to the config as written; `validate --np` and `train --np` ask again
    of the config their workers run, with `processes` the workers: a mesh across them must split
    its batch axis between them (`mesh_layout.process_batch_shards`).
    """
    from opt_train.config.issues import ConfigError
    from opt_train.distributed.mesh_layout import mesh_axes, process_batch_shards

    try:
        mesh_placement({name: getattr(config, name) for name in PLACEMENT_FIELDS})
        if config.mesh and processes > 1:
            process_batch_shards(mesh_axes(config.mesh), processes, config.mesh_batch_axis, config.layouts)
    except ParamError as error:
        raise ConfigError([config.issue_for("mesh", error)]) from None


def user_code(values, locations):
    """What can be known of the user's code without running it: its modules exist (found, not
    imported), and a factory defined in a .py source takes the parameters the config gives."""
    from opt_train import usercode
    from opt_train.config.schema import code_folders

    folders = code_folders(values.get("python_path") or (), locations)
    errors = []
    optimizer = values.get("optimizer")
    if isinstance(optimizer, str) and "." in optimizer and not optimizer.startswith(("tf.", "tensorflow")):
        module = optimizer.replace(":", ".").rpartition(".")[0]
        problem = usercode.module_missing(module, folders)
        if problem:
            errors.append(ParamError.at("optimizer", "unknown_name",
                                        f"cannot import the optimizer class `{optimizer}`: {problem}", optimizer))
    for block, label in (("model", "Model factory '{}': "), ("data", "")):
        spec = values.get(block)
        if not isinstance(spec, dict) or "factory" not in spec:
            continue
        try:
            module, function = usercode.split(spec["factory"])
        except ValueError:
            continue  # the spec's own rule reports it
        key, prefix = f"{block}.factory", label.format(spec["factory"])
        problem = usercode.module_missing(module, folders)
        if problem:
            errors.append(usercode.UserCodeError(key, prefix + problem))  # train's verdict, code user_code
            continue
        params = dict(values.get(f"{block}_params") or {})
        if block == "data":
            params = {k: v for k, v in params.items() if k not in ("task", "num_classes")}
            supplied, target = ("split", "rank", "size", "seed"), f"{module}:{function}"
        else:
            supplied, target = ("task",), spec["factory"]
        found = usercode.call_problem(target, usercode.source_signature(spec["factory"], folders), params, supplied)
        if found:
            param, code, message = found
            errors.append(ParamError.at(f"{block}_params.{param}", code, message, params.get(param)))
    if errors:
        raise RuleErrors(errors)


def mesh_groups(values):
    """A group's optimizer runs on a mesh as the top-level one does: one that cannot is refused at the group's key."""
    from opt_train.optimizers import grouping

    if not values["mesh"]:
        return
    groups, _ = grouping.check_groups(values["optimizer_groups"])  # their own errors are optimizer_group_params'
    for index, group in enumerate(groups):
        if group["optimizer"] is None:
            continue  # the top-level optimizer, judged at `optimizer`
        name, params = grouping.settings(group, values["optimizer"], values["optimizer_params"])
        refusal = optimizer_table.mesh_refusal(name, params)
        if refusal:
            raise ParamError.at(f"{grouping.KEY}[{index}].optimizer", "conflict", refusal, name)


PLACEMENT_FIELDS = ("mesh", "layouts", "mesh_batch_axis", "distributed", "use_horovod", "num_gpus", "optimizer",
                    "optimizer_params")
USER_CODE_FIELDS = ("optimizer", "model", "model_params", "data", "data_params", "python_path")

# (fields it reads, key an issue is reported at, rule). A rule may return
# {field: new value} to store a resolved value.
CROSS_RULES = (
    (("max_steps", "num_epochs"), "num_epochs", steps_or_epochs),
    (("loss_scaling", "loss_scaling_params"), "loss_scaling_params", loss_scaler_params),
    (("optimizer", "optimizer_params"), "optimizer_params", optimizer_params),
    (("optimizer", "optimizer_params", "optimizer_groups"), "optimizer_groups", optimizer_group_params),
    (("regularizer", "regularizer_params"), "regularizer_params", regularizer_params),
    (("lr_policy", "lr_policy_params", "max_steps"), "lr_policy_params", lr_policy_params),
    (("lr_policy", "warmup"), "warmup", warmup_params),
    (("model", "model_params"), "model_params", model_params),
    (("data", "data_params"), "data_params", data_params),
    (("model", "data", "data_params"), "model", model_fits_data),
    (("distributed", "use_horovod", "num_gpus"), "distributed", distribution),
    (("model", "data", "data_params", "loss"), "loss", loss_fits_task),
    (("data", "data_params", "metrics", "loss"), "metrics", metrics_fit_task),
    (("data", "data_params", "metrics", "early_stopping", "lr_control"), "early_stopping", monitors),
    (("data", "data_params", "metrics", "sweep"), "sweep", sweep_metric),
    (("init_from", "load_model"), "init_from", warm_start_sources),
    (("init_from", "logdir"), "init_from", warm_start_source),
    (PLACEMENT_FIELDS, "mesh", mesh_placement),
    (("mesh", "optimizer", "optimizer_params", "optimizer_groups"), "optimizer_groups", mesh_groups),
)


# -- the validator -------------------------------------------------------------


class Validator:
    """Applies the rules to merged data, collecting a `ConfigIssue` for each failure."""

    def __init__(self, locations, fallback_file=None):
        self.locations = locations
        self.fallback_file = fallback_file
        self.issues = []

    def report(self, key, error):
        """Files `error` (a ParamError) at its own full key, else at `key` joined with its parameter."""
        key = error.key or join_key(key, error.param)
        file, line = locate(self.locations, key)
        if file is None:
            file = self.fallback_file
        self.issues.append(ConfigIssue(file, line, key, error.code, error.message, error.value))

    def apply(self, key, rule, *args):
        """`rule(*args)`, or None after reporting its failure at `key`; `ok` says which."""
        try:
            return True, rule(*args)
        except (RuleErrors, ParamErrors) as group:
            for error in group.errors:
                if isinstance(error, UserCodeError):
                    file, line = locate(self.locations, error.key)
                    self.issues.append(ConfigIssue(file or self.fallback_file, line, error.key, error.code,
                                                   error.message))
                else:
                    self.report(key, error)
        except ValueError as error:
            self.report(key, as_param_error(error))
        return False, None

    def fields(self, data, defaults):
        """Typed values for every field; unknown keys reported. Returns `(values, failed)`."""
        for name in data:
            if name not in FIELD_RULES:
                self.report("", rules.unknown_key(name, FIELD_NAMES))
        values, failed = {}, set()
        for name, rule in FIELD_RULES.items():
            if name not in data:
                values[name] = defaults[name]
                continue
            ok, values[name] = self.apply(name, rule, name, data[name])
            if not ok:
                failed.add(name)
        return values, failed

    def across(self, values, failed):
        for inputs, key, rule in CROSS_RULES:
            if failed.intersection(inputs):
                continue
            ok, resolved = self.apply(key, rule, values)
            if ok and resolved:
                values.update(resolved)
        if not failed.intersection(USER_CODE_FIELDS):
            self.apply("model", user_code, values, self.locations)


def default_values(logdir):
    empty = TrainConfig()
    defaults = {field: getattr(empty, field) for field in FIELD_NAMES}
    defaults["logdir"] = logdir
    return defaults


def source_order(issues, locations):
    """Issues sorted by file (in the order files were read, `--set` last), then line."""
    rank = {}
    for file, _ in locations.values():
        rank.setdefault(file, len(rank))
    rank.setdefault(OVERRIDE_FILE, len(rank) + 1)
    return sorted(issues, key=lambda issue: (rank.get(issue.file, len(rank)), issue.line or 0))


def validate(data, locations, *, logdir, fallback_file=None, require_length=True):
    """`(TrainConfig or None, issues)` for merged config `data`.

    `require_length=False` drops the "one of max_steps, num_epochs is required"
    issue (used when a file could not be read: the key may be in it).
    """
    validator = Validator(locations, fallback_file)
    if not isinstance(data, dict):
        validator.report("", RuleError("a config must be a mapping of keys", None, "wrong_type"))
        return None, validator.issues
    values, failed = validator.fields(data, default_values(logdir))
    validator.across(values, failed)
    issues = [
        issue for issue in validator.issues if require_length or issue.code != "missing"
    ]
    if issues:
        return None, source_order(issues, locations)
    return TrainConfig(**values, locations=dict(locations)), []
