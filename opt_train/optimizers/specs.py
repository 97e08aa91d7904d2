"""Every registered optimizer's parameters: names, defaults and value rules, TF-free.

The config layer checks `optimizer_params` here before TensorFlow loads
(`opt-train validate` reaches the verdict `train` would), and each optimizer
class checks its constructor arguments with `check_args` from the same table,
so a rule has one home. Keras' base arguments (`weight_decay`, `clipnorm`, ...)
are in `BASE_PARAMS`; the Keras-family rules follow Keras' own checks where it
has them (`SGD.momentum` in [0, 1], `Lion.beta_1` in (0, 1], Ftrl's signs).
"""

from __future__ import annotations

import numbers

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param
from opt_train.suggest import Registry

# Spellings of one parameter (TF1 / Keras); `get` renames to the one the class takes.
PARAMETER_ALIASES = (
    ("beta1", "beta_1"),
    ("beta2", "beta_2"),
    ("decay", "rho"),
    ("use_nesterov", "nesterov"),
)
# Always renamed, whatever the class: the short TF / OpenSeq2Seq spelling.
PARAMETER_RENAMES = {"lr": "learning_rate"}
# Keras base arguments that duplicate the gradient pipeline -> the config key to use instead.
PIPELINE_ARGUMENTS = {
    "gradient_accumulation_steps": "iter_size",
    "loss_scale_factor": "loss_scaling",
}
# Accepted in `optimizer_params` though Keras sets it by method, not constructor.
POST_INIT_PARAMETERS = ("exclude_from_weight_decay",)
# Constructor arguments that take Python objects (variables), never a YAML value.
PYTHON_ONLY_PARAMETERS = ("var_list", "global_step")

# `learning_rate` in YAML: a number > 0 ("1e-3" too); from Python also a schedule.
LEARNING_RATE = p.number(0, low_open=True, strings=True, schedules=True)
# RETURNN's custom optimizers accept a rate of 0, as RETURNN did.
RETURNN_LEARNING_RATE = p.number(0, interval=True, strings=True, schedules=True)

_BOOL = p.boolean


def _lr(default, rule=LEARNING_RATE):
    return Param(default, rule)


def _pipeline_argument(replacement):
    def rule(name, value):
        if value is not None:
            raise ParamError(
                name, "conflict",
                f"is not offered: opt-train's gradient pipeline does this; set `{replacement}` instead",
                value,
                text=f"`{name}` is not offered: opt-train's gradient pipeline does this; set "
                f"`{replacement}` in the config instead. Received: {name}={value!r}",
            )
        return value

    return rule


# Keras 3's base `Optimizer` arguments, which every optimizer here forwards.
BASE_PARAMS = {
    "weight_decay": Param(None, p.optional(p.NON_NEGATIVE_FLOAT)),
    "clipnorm": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "clipvalue": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "global_clipnorm": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "use_ema": Param(False, _BOOL),
    "ema_momentum": Param(0.99, p.UNIT),
    "ema_overwrite_frequency": Param(None, p.optional(p.integer(1))),
    "name": Param(None, p.optional(p.string)),
    # Set by method in Keras (`exclude_from_weight_decay(var_names=...)`); accepted here.
    "exclude_from_weight_decay": Param(None, p.anything),
    **{name: Param(None, _pipeline_argument(key)) for name, key in PIPELINE_ARGUMENTS.items()},
}
assert set(POST_INIT_PARAMETERS) <= set(BASE_PARAMS)

_L1_L2 = {
    "l1_regularization_strength": Param(0.0, p.NON_NEGATIVE_FLOAT),
    "l2_regularization_strength": Param(0.0, p.NON_NEGATIVE_FLOAT),
}
_ADAM = {"beta_1": Param(0.9, p.FRACTION), "beta_2": Param(0.999, p.FRACTION)}
_FTRL = {
    "learning_rate_power": Param(-0.5, p.number(None, 0, interval=True)),
    "initial_accumulator_value": Param(0.1, p.NON_NEGATIVE),
    "l1_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "l2_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "l2_shrinkage_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "beta": Param(0.0, p.optional(p.NON_NEGATIVE)),
}
_RETURNN_ADAM = {
    "learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE),
    **_ADAM,
    "epsilon": Param(1e-8, p.NON_NEGATIVE),
}

# opt-train's own classes (on `base.Optimizer`) take TF1's `use_locking`, passed to the
# fused kernels; the Keras family's constructors do not.
USE_LOCKING = Param(False, _BOOL)


def _own(params):
    """The table of one of opt-train's own classes: its arguments and `use_locking`."""
    return {**params, "use_locking": USE_LOCKING}


# display name -> {parameter: Param}: the class's own constructor arguments.
OPTIMIZER_PARAMS = {
    "GradientDescent": _own({"learning_rate": _lr(0.01)}),
    "ProximalGradientDescent": _own({"learning_rate": _lr(0.01), **_L1_L2}),
    "Momentum": _own({
        "learning_rate": _lr(0.01),
        # TF1's MomentumOptimizer has no default momentum.
        "momentum": Param(REQUIRED, p.NON_NEGATIVE_FLOAT),
        "use_nesterov": Param(False, _BOOL),
    }),
    "Adagrad": _own({"learning_rate": _lr(0.01), "initial_accumulator_value": Param(0.1, p.POSITIVE_FLOAT)}),
    "ProximalAdagrad": _own({
        "learning_rate": _lr(0.01),
        "initial_accumulator_value": Param(0.1, p.POSITIVE_FLOAT),
        **_L1_L2,
    }),
    "AdagradDA": _own({
        "learning_rate": _lr(0.01),
        "initial_gradient_squared_accumulator_value": Param(0.1, p.POSITIVE_FLOAT),
        **_L1_L2,
    }),
    "Adadelta": _own({
        "learning_rate": _lr(0.001),
        "rho": Param(0.95, p.UNIT),
        "epsilon": Param(1e-8, p.NON_NEGATIVE),
    }),
    "Adam": _own({"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-8, p.NON_NEGATIVE)}),
    "LazyAdam": _own({"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-8, p.NON_NEGATIVE)}),
    "Ftrl": _own({"learning_rate": _lr(0.01), **_FTRL}),
    "RMSProp": _own({
        "learning_rate": _lr(0.01),
        "rho": Param(0.9, p.UNIT),
        "momentum": Param(0.0, p.NON_NEGATIVE),
        "epsilon": Param(1e-10, p.NON_NEGATIVE),
        "centered": Param(False, _BOOL),
    }),
    "NovoGrad": _own({
        "learning_rate": _lr(1.0),
        "beta_1": Param(0.95, p.UNIT),
        "beta_2": Param(0.98, p.UNIT),
        "epsilon": Param(1e-8, p.NON_NEGATIVE),
        "coupled_weight_decay": Param(0.0, p.NON_NEGATIVE),
        "grad_averaging": Param(False, _BOOL),
    }),
    "AMSGrad": _own({
        "learning_rate": _lr(0.001, RETURNN_LEARNING_RATE),
        "decay": Param(False, _BOOL),
        "beta_1": Param(0.9, p.FRACTION),
        "beta_2": Param(0.99, p.FRACTION),
        "epsilon": Param(0.0, p.NON_NEGATIVE),
    }),
    "CustomGradientDescent": _own({"learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE)}),
    "CustomAdam": _own(dict(_RETURNN_ADAM)),
    "GradVarianceScaled": _own(dict(_RETURNN_ADAM)),
    "NeuralOptimizer1": _own({
        "learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE),
        "beta_1": Param(0.9, p.FRACTION),
        "decrease_factor": Param(0.1, p.NON_NEGATIVE),
    }),
    "NormalizedSGD": _own({"learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE)}),
    # RETURNN's NadamOptimizer: TF1 Adam's arguments and defaults.
    "ReturnnNadam": _own({"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-8, p.NON_NEGATIVE)}),
    # Keras 3's classes: Keras' defaults.
    "SGD": {"learning_rate": _lr(0.01), "momentum": Param(0.0, p.UNIT), "nesterov": Param(False, _BOOL)},
    "Adamax": {"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT)},
    "Nadam": {"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT)},
    "AdamW": {
        "learning_rate": _lr(0.001),
        "weight_decay": Param(0.004, p.NON_NEGATIVE_FLOAT),
        **_ADAM,
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "amsgrad": Param(False, _BOOL),
    },
    "Adafactor": {
        "learning_rate": _lr(0.001),
        "beta_2_decay": Param(-0.8, p.ANY_NUMBER),
        "epsilon_1": Param(1e-30, p.NON_NEGATIVE_FLOAT),
        "epsilon_2": Param(0.001, p.NON_NEGATIVE_FLOAT),
        "clip_threshold": Param(1.0, p.NON_NEGATIVE_FLOAT),
        "relative_step": Param(True, _BOOL),
    },
    "Lion": {
        "learning_rate": _lr(0.001),
        "beta_1": Param(0.9, p.number(0, 1, low_open=True, interval=True)),
        "beta_2": Param(0.99, p.FRACTION),
    },
    "Lamb": {"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT)},
    "Muon": {
        "learning_rate": _lr(0.001),
        "adam_beta_1": Param(0.9, p.FRACTION),
        "adam_beta_2": Param(0.999, p.FRACTION),
        "adam_weight_decay": Param(0.004, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "weight_decay": Param(0.004, p.NON_NEGATIVE_FLOAT),
        "exclude_layers": Param(None, p.optional(p.list_of(p.string, text="a list of layer names"))),
        "exclude_embeddings": Param(True, _BOOL),
        "muon_a": Param(3.4445, p.ANY_NUMBER),
        "muon_b": Param(-4.775, p.ANY_NUMBER),
        "muon_c": Param(2.0315, p.ANY_NUMBER),
        "adam_lr_ratio": Param(1, p.POSITIVE_FLOAT),
        "momentum": Param(0.95, p.FRACTION),
        "ns_steps": Param(5, p.integer(1)),
        "nesterov": Param(True, _BOOL),
        "rms_rate": Param(0.2, p.optional(p.NON_NEGATIVE_FLOAT)),
    },
    "ScheduleFreeAdamW": {
        "learning_rate": _lr(0.0025),
        **_ADAM,
        "epsilon": Param(1e-8, p.NON_NEGATIVE_FLOAT),
        "warmup_steps": Param(0, p.integer(0)),
    },
    "KerasAdam": {
        "learning_rate": _lr(0.001),
        **_ADAM,
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "amsgrad": Param(False, _BOOL),
    },
    "KerasAdagrad": {
        "learning_rate": _lr(0.001),
        "initial_accumulator_value": Param(0.1, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
    },
    "KerasAdadelta": {
        "learning_rate": _lr(0.001),
        "rho": Param(0.95, p.UNIT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
    },
    "KerasFtrl": {"learning_rate": _lr(0.001), **_FTRL},
    "KerasRMSprop": {
        "learning_rate": _lr(0.001),
        "rho": Param(0.9, p.UNIT),
        "momentum": Param(0.0, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "centered": Param(False, _BOOL),
    },
}

_CLIPS = ("clipnorm", "clipvalue", "global_clipnorm")
# The registered names (`registry.OPTIMIZER_NAMES` lists the same, by family).
_NAMES = Registry("optimizer", OPTIMIZER_PARAMS)


def resolve(name):
    """The registered name for any spelling (`adam`, `AdamOptimizer`); `UnknownNameError` else."""
    return _NAMES.resolve(name)


def is_path(name):
    """True for a dotted path `package.module.Class` or `package.module:Class` (the user's class)."""
    return isinstance(name, str) and (":" in name or "." in name)


# Accepted by every own class, so `opt-train list` does not repeat them per optimizer.
COMMON_PARAMETERS = ("use_locking",)


def spec(name):
    """{parameter: Param} optimizer `name` accepts (any spelling): its own, then Keras' base ones."""
    display = resolve(name)
    return {**BASE_PARAMS, **OPTIMIZER_PARAMS[display]}


def _rename(params, accepted, display):
    """`params` with the spelling the class takes (`beta1` -> `beta_1`, `lr` -> `learning_rate`)."""
    params = dict(params)
    errors = []
    pairs = [(short, full) for short, full in PARAMETER_RENAMES.items()] + list(PARAMETER_ALIASES)
    for spellings in pairs:
        given = [s for s in spellings if s in params]
        if len(given) > 1:
            received = ", ".join(f"{s}={params[s]!r}" for s in given)
            errors.append(ParamError(
                given[0], "conflict", f"and `{given[1]}` are two spellings of one parameter; give one",
                params[given[0]],
                text=f"`{given[0]}` and `{given[1]}` are two spellings of one parameter of {display}; "
                f"give one. Received: {received}",
            ))
            for spelling in given:  # reported once, as a conflict, not again as unknown
                if spelling not in accepted:
                    params.pop(spelling)
            continue
        target = next((s for s in spellings if s in accepted), None)
        if given and target and given[0] != target:
            params[target] = params.pop(given[0])
    return params, errors


def param_errors(name, params):
    """`(params, errors)`: `params` renamed to the class's spellings, and every problem with them.

    `name` is a registered optimizer (any spelling); a dotted path is the user's
    class, whose parameters only its constructor knows: only `learning_rate` is checked.
    """
    params = dict(params or {})
    if is_path(name):
        errors = []
        if "learning_rate" in params:
            try:
                LEARNING_RATE("learning_rate", params["learning_rate"])
            except ParamError as error:
                errors.append(error)
        return params, errors
    display = resolve(name)
    table = spec(display)
    params, errors = _rename(params, table, display)
    _, found = p.param_errors(
        table, params, display, required_by=f"by {display}", key_kind=f"parameter of {display}"
    )
    # From Python, TF1 and Keras take a callable or a tensor for any hyperparameter (as check_args).
    errors += [error for error in found
               if not (error.param in table and error.code != "unknown_key" and deferred(params.get(error.param)))]
    clips = [key for key in _CLIPS if params.get(key) is not None]
    if len(clips) > 1:
        errors.append(ParamError(
            clips[1], "conflict", f"cannot be used together with `{clips[0]}`; set one", params[clips[1]],
        ))
    return params, errors


def check_params(name, params):
    """`params` renamed to the class's spellings; raises the first problem (a `ParamError`)."""
    params, errors = param_errors(name, params)
    if errors:
        raise errors[0]
    return params


def deferred(value):
    """A callable or a tensor: a hyperparameter whose value is known only when the optimizer reads it."""
    return callable(value) or (
        hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, numbers.Real)
    )


def check_args(display, **values):
    """For an optimizer's `__init__`: checks the given constructor arguments with the table's rules.

    A required argument given as None is `missing`.
    """
    table = OPTIMIZER_PARAMS[display]
    for name, value in values.items():
        param = table[name]
        if deferred(value):
            continue  # from Python, TF1 and Keras take a callable or a tensor for any hyperparameter
        if param.required and value is None:
            raise ParamError(
                name, "missing", f"is required by {display}", None,
                text=f"`{name}` is required by {display} (it has no default). Received: {name}=None",
            )
        param.rule(name, value)


def base_args(values):
    """Checks Keras' base arguments given to any optimizer's `__init__` (`clipnorm`, `use_ema`, ...)."""
    for name, value in values.items():
        if name in BASE_PARAMS:
            BASE_PARAMS[name].rule(name, value)
    clips = [key for key in _CLIPS if values.get(key) is not None]
    if len(clips) > 1:
        raise ParamError(clips[1], "conflict", f"cannot be used together with `{clips[0]}`; set one",
                         values[clips[1]])


def required_params(name):
    """The parameters optimizer `name` needs a value for (`momentum` for Momentum)."""
    return tuple(key for key, param in OPTIMIZER_PARAMS[resolve(name)].items() if param.required)
