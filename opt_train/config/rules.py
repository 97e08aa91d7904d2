"""Rules only the config layer has (model spec, summaries list, regularizer, run length); the rest are
`opt_train.params` rules shared with the library.

A rule is `rule(name, value) -> typed value` and raises `ParamError` / `RuleError`;
rules know nothing of files: the validator adds where a value was set.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from opt_train import params as p
from opt_train import usercode
from opt_train.config.issues import RuleError, RuleErrors
from opt_train.data import registry as datasets
from opt_train.lr_policies import registry as lr_policies
from opt_train.models import registry as models
from opt_train.optimizers import table as optimizer_table
from opt_train.errors import ParamError
from opt_train.optimizers import names
from opt_train.suggest import UnknownNameError

# tf1_l2: TF1's l2_regularizer, scale * sum(w^2) / 2 (OpenSeq2Seq's configs name it).
REGULARIZERS = ("l1", "l2", "l1_l2", "tf1_l2")
# `scale` with l1_l2 is the default for both of `l1` and `l2` (OpenSeq2Seq's one knob).
REGULARIZER_PARAMS = {"l1": ("scale",), "l2": ("scale",), "l1_l2": ("scale", "l1", "l2"), "tf1_l2": ("scale",)}

positive_float = p.YAML_POSITIVE
nonnegative_float = p.YAML_NON_NEGATIVE
RATE = p.number(strings=True)


@dataclasses.dataclass(frozen=True)
class LarcParams(Mapping):
    """Layer-wise adaptive rate control: `larc_mode` clip or scale, trust ratio `larc_eta`.

    Also a read-only mapping, so `dict(config.larc_params)` gives what
    `optimize_loss(larc_params=...)` takes.
    """

    larc_eta: float  # required, as in OpenSeq2Seq: no trust ratio suits every model
    larc_mode: str = names.LARC_SPEC["larc_mode"].default
    min_update: float = names.LARC_SPEC["min_update"].default
    epsilon: float = names.LARC_SPEC["epsilon"].default

    def __getitem__(self, name):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self):
        return len(self.__dataclass_fields__)


def mesh(name, value):
    """`mesh:` as an ordered `{axis: size}`, or None for no mesh (distributed.mesh_layout's rule)."""
    from opt_train.distributed.mesh_layout import mesh_axes

    return mesh_axes(value) or None


def layouts(name, value):
    """`layouts:` as an ordered `{regex: [axis or None, ...]}`, each regex compiled (distributed.mesh_layout's rule)."""
    from opt_train.distributed.mesh_layout import check_layouts

    return check_layouts(value)


def unknown_key(name, known):
    """`unknown key; did you mean 'logdir'?` for a key that no schema has."""
    from opt_train.config.foreign import synonym

    error = UnknownNameError("config key", str(name), known, code="unknown_key")
    # Another tool's name for the key (`lr`) before the nearest spelling (`logdir`).
    suggestion = synonym(name, known)
    if suggestion:
        error.suggestion = suggestion
        error.message = f"unknown key; did you mean '{suggestion}'?"
    return error


def check_known_keys(params, known):
    """Raises for the first key of `params` not in `known`."""
    for name in params:
        if name not in known:
            raise unknown_key(name, known)


def model_spec(name, value):
    """A registered model name, or one of `{factory: "pkg.mod:function"}`, `{keras_application: Name}`,
    `{path: file.keras}`."""
    if isinstance(value, dict):
        check_known_keys(value, models.SPEC_KEYS)
        # The models registry's own parser, so what validates is what builds.
        return models.check_spec(value)
    return models.resolve(p.string(name, value))


def user_factory(value):
    """`{factory: "pkg.mod:function"}`, checked by the one factory parser (the models registry's)."""
    check_known_keys(value, ("factory",))
    usercode.split_spec(value)
    return {"factory": value["factory"]}


def dataset_name(name, value):
    """A registered dataset name, or `{factory: "pkg.mod:function"}` for the user's own pipeline."""
    if isinstance(value, dict):
        return user_factory(value)
    return datasets.resolve(p.string(name, value))


def loss_spec(name, value):
    """A Keras loss name (did-you-mean on a typo), or `{factory: "pkg.mod:function"}`."""
    from opt_train.data import objective_names

    if isinstance(value, dict):
        return user_factory(value)
    return objective_names.resolve_loss(p.string(name, value))


def metric_names(name, value):
    """Keras metric names; a bad one is reported at `metrics[i]`."""
    from opt_train.data import objective_names

    checked, errors = [], []
    for index, item in enumerate(p.list_of(p.anything, text="a list of metric names")(name, value or [])):
        try:
            checked.append(objective_names.resolve_metric(p.string(f"[{index}]", item)))
        except ParamError as error:
            error.param = f"[{index}]"
            errors.append(error)
    if errors:
        raise p.ParamErrors(errors)
    return tuple(checked)


def optimizer_name(name, value):
    """A registry name; a dotted path (`pkg.mod.Class`) is left for the builder to import."""
    text = p.string(name, value)
    return text if "." in text else optimizer_table.resolve(text)


def lr_policy_name(name, value):
    return lr_policies.resolve(p.string(name, value))


def gradient_transforms(name, value):
    """`[{factory, params, after}]`, each entry checked by the pipeline's own TF-free rule, every bad one reported."""
    from opt_train.optimizers import user_transforms

    entries, errors = [], []
    for index, entry in enumerate(p.list_of(p.anything, text="a list of transforms")(name, value)):
        try:
            entries.append(user_transforms.check_entry(index, entry))
        except ParamError as error:
            errors.append(error)
    if errors:
        raise p.ParamErrors(errors)
    return tuple(entries)


def python_path(name, value):
    """Folders to import the user's modules from: one path or a list of paths."""
    entries = [value] if isinstance(value, str) else p.list_of(p.string, text="a path or a list of paths")(name, value)
    return tuple(entries)


def optimizer_params(name, value):
    """A mapping; its values are judged with the optimizer (a cross-field rule)."""
    params = p.mapping(name, value)
    if "learning_rate" in params:
        RATE("learning_rate", params["learning_rate"])  # its range is the optimizer's (a cross-field rule)
    return params


def optimizer_groups(name, value):
    """`[{variables, optimizer, optimizer_params, lr_multiplier}]`, each entry checked by the optimizer layer's
    own TF-free rule (`grouping`), every bad one reported; their parameters are a cross-field rule."""
    from opt_train.optimizers import grouping

    groups, errors = grouping.check_groups(value)
    if errors:
        raise p.ParamErrors(errors)
    return groups


def larc_params(name, value):
    """The LARC block with defaults filled in, every problem reported."""
    filled, errors = names.larc_param_errors(p.mapping(name, value))
    if errors:
        raise RuleErrors(errors)
    return LarcParams(**filled)


def summaries(name, value):
    """Names from OPTIMIZER_SUMMARIES; a bad one is reported at `summaries[i]`."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError("must be a list", value, "wrong_type")
    checked, errors = [], []
    for index, item in enumerate(value):
        try:
            checked.append(names.SUMMARY(f"[{index}]", item))
        except ParamError as error:
            errors.append(error)
    if errors:
        raise RuleErrors(errors)
    return tuple(checked)


# `tracking: {mlflow: {uri, experiment}}` (opt_train/tracking.py).
def _mlflow_uri(name, value):
    """A tracking URI the installed MLflow does not refuse outright (its file store, from MLflow 3.13)."""
    from opt_train.tracking import refusal

    reason = refusal(p.string(name, value))
    if reason:
        p.fail(name, "out_of_range", reason, value)
    return value


MLFLOW_SPEC = {
    "uri": p.Param(None, p.optional(_mlflow_uri),
                   "tracking URI; default: MLFLOW_TRACKING_URI, else sqlite in the logdir's parent folder"),
    "experiment": p.Param("opt-train", p.string, "MLflow experiment name"),
}


def _mlflow(name, value):
    params = {} if value is None else p.mapping(name, value)
    try:
        filled = p.check_params(MLFLOW_SPEC, params, "tracking.mlflow")
        if filled["uri"] is None:
            _environment_uri("uri")
        return filled
    except ParamError as error:
        # The caller joins only its own key (`tracking`) to the parameter: a key of this
        # block must keep `mlflow` in front, so the report names `tracking.mlflow.uri`.
        error.param = f"{name}.{error.param}"
        raise


def _environment_uri(name):
    """`MLFLOW_TRACKING_URI`, the store when `uri` is not set, judged as `uri` would be."""
    from opt_train.tracking import URI_VARIABLE, refusal

    uri = os.environ.get(URI_VARIABLE)
    reason = uri and refusal(uri)
    if reason:
        p.fail(name, "out_of_range", f"is not set, and {URI_VARIABLE}={uri} {reason}", None)


TRACKING_SPEC = {"mlflow": p.Param(None, p.optional(_mlflow), "log the run to MLflow (extra `mlflow`)")}


def tracking(name, value):
    """Where runs are logged besides the logdir: `{mlflow: {uri, experiment}}`."""
    return p.check_params(TRACKING_SPEC, p.mapping(name, value), "tracking")


def variable_map(name, value):
    """`{regex: template}`: each regex compiles, and its template names only groups it has (`re.sub`'s rules)."""
    import re

    checked = {}
    for pattern, template in p.mapping(name, value).items():
        p.regex(name, pattern)
        if not isinstance(template, str):
            p.fail(name, "wrong_type", f"maps {pattern!r} to a template string (`backbone/\\1`)", template)
        try:
            re.compile(pattern).sub(template, "")  # checks the template's group references, match or not
        except (re.error, IndexError) as error:
            p.fail(name, "wrong_type", f"template {template!r} of {pattern!r} does not fit it ({error})", template)
        checked[pattern] = template
    return checked


def init_source(name, value):
    """A warm start's source: a checkpoint (prefix, or folder: its newest), a .keras or a .weights.h5 file.

    That it exists is the cross rule `validate.warm_start_source`'s: a resumed run never reads it.
    """
    from opt_train.checkpoint_paths import init_source as find
    from opt_train.errors import RunRefused

    p.string(name, value)
    if value.endswith(".h5") and not value.endswith(".weights.h5"):
        try:
            find(value, option="")
        except RunRefused as error:
            p.fail(name, "out_of_range", str(error).split(": ", 1)[-1], value)
    return value


def missing_init_source(path, logdir):
    """Why `init_from.path` cannot start this run (a ParamError at `path`), or None.

    A source that is not there matters only to a fresh start: a logdir that holds
    checkpoints resumes from them (and eval, export, predict read them) without it.
    """
    import os

    from opt_train.checkpoint_paths import init_source as find
    from opt_train.checkpoint_paths import list_checkpoints
    from opt_train.errors import ParamError, RunRefused

    try:
        find(path, option="")
    except RunRefused as error:
        if list_checkpoints(os.path.join(logdir, "checkpoints")):
            return None
        code = "file_not_found" if not os.path.lexists(path) or os.path.isdir(path) else "out_of_range"
        return ParamError("path", code, str(error).split(": ", 1)[-1], path)
    return None


# `init_from`: a fresh run's weights from another model (opt_train/training/warm_start.py).
INIT_FROM_SPEC = {
    "path": p.Param(p.REQUIRED, init_source,
                    "a TF checkpoint (a prefix, or a folder: its newest), a .keras or a .weights.h5 file"),
    "variables": p.Param({}, variable_map, "`{regex: template}` from the source's variable paths to this model's"),
    "skip_mismatch": p.Param(False, p.boolean, "skip a variable whose shape differs (else refused)"),
}


def init_from(name, value):
    """`{path, variables?, skip_mismatch?}` with defaults filled, every problem reported."""
    filled, errors = p.param_errors(INIT_FROM_SPEC, p.mapping(name, value), "init_from", key_kind="init_from key")
    if errors:
        raise RuleErrors(errors)
    return filled


def profile_steps(name, value):
    """`[start, end]`: the updates a TensorBoard profile covers, 1 <= start <= end."""
    text = "a list [start, end] of update numbers with 1 <= start <= end"
    steps = p.list_of(p.integer(1), text=text)(name, value)
    if len(steps) != 2 or steps[0] > steps[1]:
        p.fail(name, "out_of_range", f"must be {text}", value, text)
    return tuple(steps)


regularizer = p.optional(p.one_of(*REGULARIZERS, kind="regularizer", lower=True))
