"""The gradient pipeline's names, defaults and value checks, TF-free for the config layer.

Everything `optimize_loss` accepts from YAML is named here: summary names,
dtypes, loss-scaler algorithms with their OpenSeq2Seq defaults, LARC parameters
and the non-finite policies. The `check_*` helpers are pure Python and raise a
plain `ValueError` in Keras' wording (or `UnknownNameError` for an unknown
name), so the config layer can report a bad value with its file and line before
TensorFlow is imported. `optimize_loss` calls the same helpers, so a value is
judged by one rule whichever way it arrives.
"""

from __future__ import annotations

import math
import numbers

from opt_train.suggest import UnknownNameError, normalize

# What `summaries:` may list (OpenSeq2Seq's OPTIMIZER_SUMMARIES plus loss_scale).
OPTIMIZER_SUMMARIES = (
    "learning_rate",
    "gradients",
    "gradient_norm",
    "global_gradient_norm",
    "variables",
    "variable_norm",
    "larc_summaries",
    "loss_scale",
)

# `dtype:` values. float16 / bfloat16 are "pure" (low-precision variables with
# float32 master copies); mixed / mixed_bfloat16 keep float32 variables and
# compute in the low precision through a Keras dtype policy.
DTYPES = ("float32", "float16", "mixed", "bfloat16", "mixed_bfloat16")

# Loss-scaler algorithm -> {parameter: default}. Backoff and LogMax keep
# OpenSeq2Seq's defaults (automatic_loss_scaler.py); Dynamic is Keras's
# LossScaleOptimizer rule (halve on overflow, double after N finite steps).
LOSS_SCALERS = {
    "Backoff": {
        "scale_min": 1.0,
        "scale_max": 2.0**24,
        "step_factor": 2.0,
        "step_window": 2000,
    },
    "LogMax": {
        "scale_min": 1.0,
        "scale_max": 2.0**24,
        "log_max": 16.0,
        "beta1": 0.99,
        "beta2": 0.999,
        "overflow_std_dev": 3.09,
    },
    "Dynamic": {
        "initial_scale": 2.0**15,
        "dynamic_growth_steps": 2000,
    },
}

# LARC parameter -> default. `larc_eta` has no default: it is required
# whenever `larc_params` is given (as in OpenSeq2Seq).
LARC_PARAMS = {
    "larc_eta": None,
    "larc_mode": "clip",
    "min_update": 1e-7,
    "epsilon": 1e-7,
}
LARC_REQUIRED = ("larc_eta",)
LARC_MODES = ("clip", "scale")

# How `iter_size` micro-batch gradients combine: `mean` (OpenSeq2Seq's iter_size: the update
# of one batch iter_size times larger) or `sum` (RETURNN's accum_grad_multiple_step).
ITER_SIZE_MODES = ("mean", "sum")

# What happens to a step whose gradients (or float32 loss) are not finite.
ON_NONFINITE = ("skip", "stop")


def _raise_range(name, rule, value):
    raise ValueError(f"`{name}` must be {rule}. Received: {name}={value!r}")


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive(name, value):
    """`value` must be a finite number > 0."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        _raise_range(name, "> 0", value)
    return value


def check_positive_int(name, value):
    """`value` must be an integer >= 1."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        _raise_range(name, "an integer >= 1", value)
    return int(value)


def check_in_unit_interval(name, value):
    """`value` must be in [0, 1)."""
    if not _is_number(value) or not 0 <= value < 1:
        _raise_range(name, "in [0, 1)", value)
    return value


def check_choice(kind, value, choices):
    """`value` must be one of `choices` (exact spelling); else UnknownNameError."""
    if value not in choices:
        raise UnknownNameError(kind, value, choices)
    return value


def check_dtype(dtype):
    """The canonical dtype name; accepts the spellings in DTYPES only."""
    return check_choice("dtype", str(dtype), DTYPES)


def check_summaries(summaries):
    """A tuple of summary names, each one of OPTIMIZER_SUMMARIES."""
    if summaries is None:
        return ()
    if isinstance(summaries, str):
        summaries = [summaries]
    return tuple(check_choice("summary", name, OPTIMIZER_SUMMARIES) for name in summaries)


def check_iter_size(iter_size):
    return check_positive_int("iter_size", iter_size)


def check_iter_size_mode(mode):
    return check_choice("iter_size_mode", mode, ITER_SIZE_MODES)


def check_max_grad_norm(max_grad_norm):
    """None (no clipping) or a number > 0."""
    if max_grad_norm is None:
        return None
    return check_positive("max_grad_norm", max_grad_norm)


def check_on_nonfinite(on_nonfinite):
    return check_choice("on_nonfinite policy", on_nonfinite, ON_NONFINITE)


def check_max_consecutive_overflows(value):
    """None (never stop) or an integer >= 1."""
    if value is None:
        return None
    return check_positive_int("max_consecutive_overflows", value)


def check_unknown_keys(kind, params, known):
    """Raises UnknownNameError for the first key of `params` not in `known`."""
    for key in params:
        if key not in known:
            raise UnknownNameError(kind, key, known)


def check_larc_params(larc_params):
    """The LARC parameters with defaults filled in, or None when LARC is off.

    Rules: `larc_eta` required and > 0; `larc_mode` in LARC_MODES;
    `min_update` >= 0; `epsilon` > 0.
    """
    if larc_params is None:
        return None
    params = dict(larc_params)
    check_unknown_keys("LARC parameter", params, LARC_PARAMS)
    if "larc_eta" not in params:
        raise ValueError("`larc_eta` is required when `larc_params` is set. Received: larc_params="
                         f"{larc_params!r}")
    merged = {**LARC_PARAMS, **params}
    check_positive("larc_eta", merged["larc_eta"])
    check_choice("larc_mode", merged["larc_mode"], LARC_MODES)
    if not _is_number(merged["min_update"]) or merged["min_update"] < 0:
        _raise_range("min_update", ">= 0", merged["min_update"])
    check_positive("epsilon", merged["epsilon"])
    return merged


def check_clip_and_larc(max_grad_norm, larc_params):
    """Clipping by global norm and LARC exclude each other (as in OpenSeq2Seq)."""
    if max_grad_norm is not None and larc_params is not None:
        raise ValueError(
            "`max_grad_norm` and `larc_params` cannot be used together: LARC already "
            f"bounds each layer's update. Received: max_grad_norm={max_grad_norm!r}, "
            f"larc_params={dict(larc_params)!r}"
        )


def resolve_loss_scaler(name):
    """The canonical algorithm name in LOSS_SCALERS, matched case-insensitively."""
    by_key = {normalize(algo): algo for algo in LOSS_SCALERS}
    key = normalize(name)
    if key not in by_key:
        raise UnknownNameError("loss scaling algorithm", name, LOSS_SCALERS)
    return by_key[key]


def _check_backoff(params):
    check_positive("scale_min", params["scale_min"])
    check_positive("scale_max", params["scale_max"])
    if params["scale_max"] < params["scale_min"]:
        _raise_range("scale_max", f">= scale_min ({params['scale_min']!r})", params["scale_max"])
    if not _is_number(params["step_factor"]) or params["step_factor"] <= 1:
        _raise_range("step_factor", "> 1", params["step_factor"])
    check_positive_int("step_window", params["step_window"])


def _check_logmax(params):
    check_positive("scale_min", params["scale_min"])
    check_positive("scale_max", params["scale_max"])
    if params["scale_max"] < params["scale_min"]:
        _raise_range("scale_max", f">= scale_min ({params['scale_min']!r})", params["scale_max"])
    check_positive("log_max", params["log_max"])
    check_in_unit_interval("beta1", params["beta1"])
    check_in_unit_interval("beta2", params["beta2"])
    check_positive("overflow_std_dev", params["overflow_std_dev"])


def _check_dynamic(params):
    check_positive("initial_scale", params["initial_scale"])
    check_positive_int("dynamic_growth_steps", params["dynamic_growth_steps"])


_LOSS_SCALER_CHECKS = {"Backoff": _check_backoff, "LogMax": _check_logmax, "Dynamic": _check_dynamic}


def check_loss_scaler_params(algorithm, params):
    """The algorithm's parameters with defaults filled in, each checked."""
    algorithm = resolve_loss_scaler(algorithm)
    params = dict(params or {})
    check_unknown_keys(f"{algorithm} loss scaling parameter", params, LOSS_SCALERS[algorithm])
    merged = {**LOSS_SCALERS[algorithm], **params}
    _LOSS_SCALER_CHECKS[algorithm](merged)
    return merged


def check_loss_scaling(loss_scaling, loss_scaling_params=None):
    """Normalizes `loss_scaling` to a float > 0 (static) or a canonical algorithm name.

    Returns `(loss_scaling, params)`: params is None for a static scale, else the
    algorithm's full parameter dict. `loss_scaling_params` with a static scale is
    an error (it would be silently ignored).
    """
    if isinstance(loss_scaling, str):
        algorithm = resolve_loss_scaler(loss_scaling)
        return algorithm, check_loss_scaler_params(algorithm, loss_scaling_params)
    check_positive("loss_scaling", loss_scaling)
    if loss_scaling_params:
        raise ValueError(
            "`loss_scaling_params` needs an automatic `loss_scaling` "
            f"({', '.join(LOSS_SCALERS)}). Received: loss_scaling={loss_scaling!r}"
        )
    return float(loss_scaling), None


__all__ = [
    "DTYPES",
    "ITER_SIZE_MODES",
    "LARC_MODES",
    "LARC_PARAMS",
    "LARC_REQUIRED",
    "LOSS_SCALERS",
    "ON_NONFINITE",
    "OPTIMIZER_SUMMARIES",
    "check_clip_and_larc",
    "check_dtype",
    "check_iter_size",
    "check_iter_size_mode",
    "check_larc_params",
    "check_loss_scaler_params",
    "check_loss_scaling",
    "check_max_consecutive_overflows",
    "check_max_grad_norm",
    "check_on_nonfinite",
    "check_summaries",
    "resolve_loss_scaler",
]
