"""Checks merged config data field by field, then across fields, and builds a `TrainConfig`.

Every field has one rule, `rule(name, raw value) -> typed value`, most of them the
library's own (`opt_train.optimizers.names`, `opt_train.params`); the rules that involve
several fields live together in `CROSS_RULES`, and the registries' tables judge the
parameter blocks (optimizer, lr policy, model, data). Problems are collected, never
raised one at a time: the loader raises them together.
"""

from __future__ import annotations

from opt_train import params as p
from opt_train.config import compat, rules, sweep_block
from opt_train.config.issues import OVERRIDE_FILE, ConfigIssue, RuleError, RuleErrors, as_param_error
from opt_train.config.registries import registry
from opt_train.config.schema import FIELD_NAMES, TrainConfig, join_key, locate
from opt_train.distributed import names as distributed_names
from opt_train.optimizers import names
from opt_train.errors import ParamError
from opt_train.params import ParamErrors
from opt_train.usercode import UserCodeError

# -- field rules: rule(name, value) -> typed value --------------------------------

_STEPS = p.optional(p.STEP_COUNT)

FIELD_RULES = {
    "model": rules.model_spec,
    "model_params": p.mapping,
    "data": rules.dataset_name,
    "data_params": p.mapping,
    "loss": p.optional(rules.loss_spec),
    "loss_params": p.mapping,
    "metrics": rules.metric_names,
    "batch_size_per_gpu": p.integer(1),
    "eval_batch_size": _STEPS,
    "max_steps": _STEPS,
    "num_epochs": p.optional(rules.positive_float),
    "optimizer": rules.optimizer_name,
    "optimizer_params": rules.optimizer_params,
    "lr_policy": rules.lr_policy_name,
    "lr_policy_params": p.mapping,
    "warmup": p.optional(p.mapping),
    "dtype": names.DTYPE,
    "loss_scaling": names.LOSS_SCALING,
    "loss_scaling_params": p.mapping,
    "on_nonfinite": names.ON_NONFINITE_RULE,
    "max_consecutive_overflows": names.MAX_CONSECUTIVE_OVERFLOWS,
    "count_skipped_updates": names.COUNT_SKIPPED_UPDATES,
    "iter_size": names.ITER_SIZE,
    "iter_size_mode": names.ITER_SIZE_MODE,
    "use_horovod": p.boolean,
    "distributed": p.one_of(*distributed_names.BACKENDS, kind="distributed backend"),
    "rank_timeout_secs": rules.positive_float,
    "max_grad_norm": names.MAX_GRAD_NORM,
    "larc_params": p.optional(rules.larc_params),
    "gradient_transforms": rules.gradient_transforms,
    "regularizer": rules.regularizer,
    "regularizer_params": p.mapping,
    "freeze_variables_regex": p.optional(p.regex),
    "summaries": rules.summaries,
    "logdir": p.string,
    "save_checkpoint_steps": _STEPS,
    "num_checkpoints": p.integer(1),
    "save_summaries_steps": _STEPS,
    "print_loss_steps": p.integer(1),
    "eval_steps": _STEPS,
    # NumPy's and Python's generators take seeds in [0, 2**32): Keras seeds all three from it.
    "random_seed": p.integer(0, high=2**32 - 1),
    "deterministic": p.boolean,
    "profile_steps": p.optional(rules.profile_steps),
    "tracking": p.optional(rules.tracking),
    "jit_compile": p.boolean,
    "python_path": rules.python_path,
    "sweep": sweep_block.sweep_block,
    # OpenSeq2Seq keys (compat.py has already translated their TF1 spellings).
    "num_gpus": p.optional(p.integer(1)),
    "print_samples_steps": p.optional(p.integer(1)),
    "bench_start": p.optional(p.integer(0)),
    "load_model": p.optional(p.string),
    "initializer": p.optional(p.one_of(*compat.KERAS_INITIALIZERS, kind="initializer", lower=True)),
    "initializer_params": p.mapping,
    "lr_control": p.optional(compat.lr_control),
    "early_stopping": p.optional(compat.early_stopping),
    "restore_best_checkpoint": p.boolean,
}


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
        errors = names.loss_scaler_param_errors(values["loss_scaling"], params)[1]
        if errors:
            raise RuleErrors(errors)
    else:
        names.check_loss_scaling(values["loss_scaling"], params)


def optimizer_params(values):
    """The optimizer's parameters, judged by its table (names, ranges, required ones) without TF."""
    params = values["optimizer_params"]
    errors = registry("optimizer_params").param_errors(values["optimizer"], params)[1]
    if errors:
        raise RuleErrors(errors)
    if "learning_rate" in params:
        # Stored as a number, so `"1e-3"` in YAML trains like 1e-3.
        rate = rules.RATE("learning_rate", params["learning_rate"])
        return {"optimizer_params": {**params, "learning_rate": rate}}
    return None


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
    registry("lr_policy").check_params(
        values["lr_policy"], values["lr_policy_params"], max_steps=values["max_steps"], steps_per_epoch=None
    )


def warmup_params(values):
    """The `warmup` block's `steps` and `power`."""
    if values["warmup"] is not None:
        registry("lr_policy").check_warmup(values["warmup"])


def model_params(values):
    """A built-in or saved model's parameters (a factory's go to the user's function unchecked)."""
    if not registry("model").is_factory(values["model"]):
        errors = registry("model").param_errors(values["model"], values["model_params"])
        if errors:
            raise RuleErrors(errors)


def data_params(values):
    """The dataset's parameters."""
    errors = registry("data").param_errors(values["data"], values["data_params"])
    if errors:
        raise RuleErrors(errors)


def model_fits_data(values):
    """A built-in model serves the dataset's task (the transformer labels sequences, ...)."""
    kind = registry("data").task_kind(values["data"], values["data_params"])
    registry("model").check_task(values["model"], kind)


def distribution(values):
    """`distributed` resolved with `use_horovod` and `num_gpus` (opt_train.distributed.names.resolve)."""
    distributed, use_horovod, num_gpus = distributed_names.resolve(
        values["distributed"], values["use_horovod"], values["num_gpus"])
    return {"distributed": distributed, "use_horovod": use_horovod, "num_gpus": num_gpus}


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


USER_CODE_FIELDS = ("optimizer", "model", "model_params", "data", "data_params", "python_path")

# (fields it reads, key an issue is reported at, rule). A rule may return
# {field: new value} to store a resolved value.
CROSS_RULES = (
    (("max_steps", "num_epochs"), "num_epochs", steps_or_epochs),
    (("loss_scaling", "loss_scaling_params"), "loss_scaling_params", loss_scaler_params),
    (("optimizer", "optimizer_params"), "optimizer_params", optimizer_params),
    (("regularizer", "regularizer_params"), "regularizer_params", regularizer_params),
    (("lr_policy", "lr_policy_params", "max_steps"), "lr_policy_params", lr_policy_params),
    (("lr_policy", "warmup"), "warmup", warmup_params),
    (("model", "model_params"), "model_params", model_params),
    (("data", "data_params"), "data_params", data_params),
    (("model", "data", "data_params"), "model", model_fits_data),
    (("distributed", "use_horovod", "num_gpus"), "distributed", distribution),
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
