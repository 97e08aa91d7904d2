"""Checks merged config data field by field, then across fields, and builds a `TrainConfig`.

Every field has one rule (a function of its raw value); the rules that involve
several fields live together in `CROSS_RULES`. Problems are collected, never
raised one at a time: the loader raises them together.
"""

from __future__ import annotations

from opt_train.config import registries, rules
from opt_train.config.issues import OVERRIDE_FILE, ConfigIssue, RuleError, RuleErrors
from opt_train.config.schema import FIELD_NAMES, LarcParams, TrainConfig, locate
from opt_train.optimizers import names

REGULARIZERS = ("l1", "l2", "l1_l2")
# `scale` with l1_l2 is the default for both of `l1` and `l2` (OpenSeq2Seq's one knob).
REGULARIZER_PARAMS = {"l1": ("scale",), "l2": ("scale",), "l1_l2": ("scale", "l1", "l2")}


# -- field rules -------------------------------------------------------------


def model_spec(value):
    """A registered model name, or `{factory: "pkg.mod:function"}` for the user's own."""
    if isinstance(value, dict):
        rules.check_known_keys(value, ("factory",))
        # The models registry's own parser, so what validates is what builds
        # (`pkg.mod:function` or `pkg.mod.function`).
        registries.call(registries.registry("model").split_factory, value, params=value)
        return {"factory": value["factory"]}
    return registries.resolve("model", rules.require_str(value))


def dataset_name(value):
    """A registered dataset name, or `{factory: "pkg.mod:function"}` for the user's own pipeline."""
    if isinstance(value, dict):
        rules.check_known_keys(value, ("factory",))
        registries.call(registries.registry("model").split_factory, value, params=value)
        return {"factory": value["factory"]}
    return registries.resolve("data", rules.require_str(value))


def loss_spec(value):
    """A Keras loss name (did-you-mean on a typo), or `{factory: "pkg.mod:function"}`."""
    from opt_train.data import objective_names

    if isinstance(value, dict):
        rules.check_known_keys(value, ("factory",))
        registries.call(registries.registry("model").split_factory, value, params=value)
        return {"factory": value["factory"]}
    return registries.call(objective_names.resolve_loss, rules.require_str(value))


def metric_names(value):
    """Keras metric names; a bad one is reported at `metrics[i]`."""
    from opt_train.data import objective_names

    def one(name):
        return registries.call(objective_names.resolve_metric, rules.require_str(name))

    return tuple(_sub(one, item, f"[{index}]") for index, item in enumerate(rules.require_list(value)))


def optimizer_name(value):
    """A registry name; a dotted path (`pkg.mod.Class`) is left for the builder to import."""
    name = rules.require_str(value)
    return name if "." in name else registries.resolve("optimizer", name)


def lr_policy_name(value):
    return registries.resolve("lr_policy", rules.require_str(value))


def optimizer_params(value):
    """Any parameters (the registry checks them with TF); `learning_rate`, if given, > 0."""
    params = rules.require_dict(value)
    if "learning_rate" in params:
        params["learning_rate"] = _sub(rules.positive_float, params["learning_rate"], "learning_rate")
    return params


def loss_scaling(value):
    """A static scale > 0, or an automatic algorithm's name (case-insensitive)."""
    if isinstance(value, str) and not rules.reads_as_float(value):
        return registries.call(names.resolve_loss_scaler, value)
    return rules.positive_float(value)


def larc_params(value):
    """The LARC block with defaults filled in, checked by the optimizer layer's own rule."""
    params = rules.require_dict(value)
    known = list(LarcParams.__dataclass_fields__)
    rules.check_known_keys(params, known)
    if "larc_eta" not in params:
        raise RuleError("is required", None, "missing", subkey="larc_eta")
    defaults = {name: field.default for name, field in LarcParams.__dataclass_fields__.items()}
    merged = {**defaults, **params}
    for name in ("larc_eta", "min_update", "epsilon"):
        merged[name] = _sub(rules.require_float, merged[name], name)
    checked = registries.call(names.check_larc_params, merged, params=merged)
    return LarcParams(**{name: checked[name] for name in known})


def summaries(value):
    """Names from OPTIMIZER_SUMMARIES; a bad one is reported at `summaries[i]`."""
    items = rules.require_list(value)
    choose = rules.one_of("summary", names.OPTIMIZER_SUMMARIES)
    return tuple(_sub(choose, item, f"[{index}]") for index, item in enumerate(items))


def _sub(rule, value, subkey):
    """`rule(value)`, a failure reported at `subkey` of the current key."""
    try:
        return rule(value)
    except RuleError as error:
        error.subkey = error.subkey or subkey
        raise


FIELD_RULES = {
    "model": model_spec,
    "model_params": rules.require_dict,
    "data": dataset_name,
    "data_params": rules.require_dict,
    "loss": rules.optional(loss_spec),
    "loss_params": rules.require_dict,
    "metrics": metric_names,
    "batch_size_per_gpu": rules.int_at_least_1,
    "eval_batch_size": rules.optional(rules.int_at_least_1),
    "max_steps": rules.optional(rules.int_at_least_1),
    "num_epochs": rules.optional(rules.positive_float),
    "optimizer": optimizer_name,
    "optimizer_params": optimizer_params,
    "lr_policy": lr_policy_name,
    "lr_policy_params": rules.require_dict,
    "warmup": rules.optional(rules.require_dict),
    "dtype": rules.one_of("dtype", names.DTYPES, lower=True),
    "loss_scaling": loss_scaling,
    "loss_scaling_params": rules.require_dict,
    "on_nonfinite": rules.one_of("on_nonfinite policy", names.ON_NONFINITE, lower=True),
    "max_consecutive_overflows": rules.optional(rules.int_at_least_1),
    "iter_size": rules.int_at_least_1,
    "use_horovod": rules.require_bool,
    "max_grad_norm": rules.optional(rules.positive_float),
    "larc_params": rules.optional(larc_params),
    "regularizer": rules.optional(rules.one_of("regularizer", REGULARIZERS, lower=True)),
    "regularizer_params": rules.require_dict,
    "freeze_variables_regex": rules.optional(rules.require_regex),
    "summaries": summaries,
    "logdir": rules.require_str,
    "save_checkpoint_steps": rules.optional(rules.int_at_least_1),
    "num_checkpoints": rules.int_at_least_1,
    "save_summaries_steps": rules.optional(rules.int_at_least_1),
    "print_loss_steps": rules.int_at_least_1,
    "eval_steps": rules.optional(rules.int_at_least_1),
    "random_seed": rules.require_int,
    "jit_compile": rules.require_bool,
    "sweep": rules.optional(rules.require_dict),
}


# -- cross-field rules ---------------------------------------------------------


def steps_or_epochs(values):
    """Exactly one of `max_steps` and `num_epochs` says how long to train."""
    if values["max_steps"] is not None and values["num_epochs"] is not None:
        raise RuleError("cannot be used together with max_steps; set only one", None, "conflict")
    if values["max_steps"] is None and values["num_epochs"] is None:
        raise RuleError("one of max_steps, num_epochs is required", None, "missing", subkey="max_steps")


def clip_or_larc(values):
    """Clipping by global norm and LARC exclude each other (as in OpenSeq2Seq)."""
    if values["max_grad_norm"] is not None and values["larc_params"] is not None:
        raise RuleError(
            "cannot be used together with max_grad_norm (LARC already bounds each layer's update)",
            None,
            "conflict",
        )


def loss_scaler_params(values):
    """The loss scaler's parameters are its own; none are allowed with a static scale."""
    params = values["loss_scaling_params"]
    registries.call(names.check_loss_scaling, values["loss_scaling"], params, params=params)


def regularizer_params(values):
    """`scale` for l1 / l2, also `l1` and `l2` for l1_l2, each >= 0; nothing without a regularizer."""
    params = dict(values["regularizer_params"])
    if values["regularizer"] is None:
        if params:
            raise RuleError("needs a regularizer (l1, l2 or l1_l2)", None, "conflict")
        return None
    rules.check_known_keys(params, REGULARIZER_PARAMS[values["regularizer"]])
    for name, value in params.items():
        params[name] = _sub(rules.nonnegative_float, value, name)
    return {"regularizer_params": params}


def lr_policy_params(values):
    """The policy's parameters; `decay_steps` may default from `max_steps`."""
    registries.check_params(
        "lr_policy",
        values["lr_policy"],
        values["lr_policy_params"],
        max_steps=values["max_steps"],
        steps_per_epoch=None,
    )


def warmup_params(values):
    """The `warmup` block's `steps` and `power`."""
    if values["warmup"] is not None:
        check_warmup = registries.registry("lr_policy").check_warmup
        registries.call(check_warmup, values["warmup"], params=values["warmup"])


def model_params(values):
    """A built-in model's parameters (a factory's go to the user's function unchecked)."""
    if isinstance(values["model"], str):
        registries.check_params("model", values["model"], values["model_params"])


def data_params(values):
    """The dataset's parameters."""
    registries.check_params("data", values["data"], values["data_params"])


def model_fits_data(values):
    """A built-in model serves the dataset's task (the transformer labels sequences, ...)."""
    kind = registries.registry("data").task_kind(values["data"], values["data_params"])
    registries.call(registries.registry("model").check_task, values["model"], kind)


# (fields it reads, key an issue is reported at, rule). A rule may return
# {field: new value} to store a resolved value.
CROSS_RULES = (
    (("max_steps", "num_epochs"), "num_epochs", steps_or_epochs),
    (("max_grad_norm", "larc_params"), "larc_params", clip_or_larc),
    (("loss_scaling", "loss_scaling_params"), "loss_scaling_params", loss_scaler_params),
    (("regularizer", "regularizer_params"), "regularizer_params", regularizer_params),
    (("lr_policy", "lr_policy_params", "max_steps"), "lr_policy_params", lr_policy_params),
    (("lr_policy", "warmup"), "warmup", warmup_params),
    (("model", "model_params"), "model_params", model_params),
    (("data", "data_params"), "data_params", data_params),
    (("model", "data", "data_params"), "model", model_fits_data),
)


# -- the validator -------------------------------------------------------------


def join_key(key, subkey):
    """Where a sub-key failure is reported: `key.sub`, `key[i]`, or a top-level field itself."""
    if not subkey:
        return key
    if subkey in FIELD_NAMES:
        return subkey
    return f"{key}{subkey}" if subkey.startswith("[") else f"{key}.{subkey}"


class Validator:
    """Applies the rules to merged data, collecting a `ConfigIssue` for each failure."""

    def __init__(self, locations, fallback_file=None):
        self.locations = locations
        self.fallback_file = fallback_file
        self.issues = []

    def report(self, key, error):
        file, line = locate(self.locations, key)
        if file is None:
            file = self.fallback_file
        self.issues.append(ConfigIssue(file, line, key, error.code, error.message, error.value))

    def apply(self, key, rule, *args):
        """`rule(*args)`, or None after reporting its failure at `key`; `ok` says which."""
        try:
            return True, rule(*args)
        except RuleErrors as group:
            for error in group.errors:
                self.report(error.absolute or join_key(key, error.subkey), error)
        except ValueError as error:
            translated = registries.translate(error)
            self.report(translated.absolute or join_key(key, translated.subkey), translated)
        return False, None

    def fields(self, data, defaults):
        """Typed values for every field; unknown keys reported. Returns `(values, failed)`."""
        for name in data:
            if name not in FIELD_RULES:
                self.report(str(name), rules.unknown_key(name, FIELD_NAMES))
        values, failed = {}, set()
        for name, rule in FIELD_RULES.items():
            if name not in data:
                values[name] = defaults[name]
                continue
            ok, values[name] = self.apply(name, rule, data[name])
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
