"""The gradient pipeline's names, defaults and value rules, TF-free for the config layer.

Everything `optimize_loss` accepts from YAML is named here: summary names,
dtypes, loss-scaler algorithms with their OpenSeq2Seq defaults, LARC parameters
and the non-finite policies, each as a rule or a `Param` spec of
`opt_train.params`. The `check_*` helpers raise `ParamError` (parameter, stable
code, value; Keras' wording as text), so the config layer reports a bad value
with its file and line before TensorFlow is imported. `optimize_loss` and the
config layer call the same helpers, so a value is judged by one rule whichever
way it arrives (YAML, `--set` or Python).
"""

from __future__ import annotations

from dataclasses import dataclass

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param
from opt_train.registry import Row, Table

_STEP_FIGURES = "opt_train.optimizers.step_figures:StepFigures"


@dataclass(frozen=True, kw_only=True)
class SummaryRow(Row):
    """A `summaries:` name: the TensorBoard tags it writes (`<variable>`: each trained variable's path,
    `:` as `_`), and whether OpenSeq2Seq summarised it when given none (`default`)."""

    tags: tuple = ()
    default: bool = False

    @property
    def tensorboard_tags(self):
        return ", ".join(f"`{tag}`" for tag in self.tags)

    @property
    def openseq2seq_default(self):
        return "yes" if self.default else "no"


# What `summaries:` may list: OpenSeq2Seq's OPTIMIZER_SUMMARIES plus loss_scale; `default` marks
# what its optimize_loss summarised when given summaries=None (YAML's default too). `code`
# is what produces the figure; the scalars among them are every step's statistics, so they are
# written whether listed or not (tests/training/test_summaries.py holds the tags to a real run).
SUMMARIES = Table("summary", [
    SummaryRow(name="learning_rate", tags=("learning_rate",), default=True, code=_STEP_FIGURES,
               summary="the update's learning rate, one scalar (written whether listed or not)"),
    SummaryRow(name="gradients", tags=("gradients/<variable>",), code=_STEP_FIGURES,
               summary="a histogram of each trained variable's gradient"),
    SummaryRow(name="gradient_norm", tags=("gradient_norm/<variable>",), code=_STEP_FIGURES,
               summary="the L2 norm of each trained variable's gradient, one scalar per variable"),
    SummaryRow(name="global_gradient_norm", tags=("pipeline/global_gradient_norm",), default=True,
               code="opt_train.optimizers.finite:FiniteState.report",
               summary="the L2 norm of all (unscaled) gradients together, before clipping, one scalar "
               "(written whether listed or not)"),
    SummaryRow(name="variables", tags=("variables/<variable>",), code=_STEP_FIGURES,
               summary="a histogram of each trained variable's values"),
    SummaryRow(name="variable_norm", tags=("variable_norm/<variable>",), code=_STEP_FIGURES,
               summary="the L2 norm of each trained variable, one scalar per variable"),
    SummaryRow(name="larc_summaries", tags=("larc/grad_update/<variable>", "larc/clip_on/<variable>",
                                            "larc/final_lr/<variable>"), code=_STEP_FIGURES,
               summary="with `larc_params`: per variable, LARC's ratio, whether it clipped (0/1), and the "
               "learning rate it applied"),
    SummaryRow(name="loss_scale", tags=("pipeline/loss_scale",), default=True,
               code="opt_train.optimizers.loss_scaling:ScaleState.report",
               summary="the loss scale, one scalar (1.0 without `loss_scaling`; written whether listed or not)"),
], param="summaries", columns=("tensorboard_tags", "summary", "openseq2seq_default"))
OPTIMIZER_SUMMARIES = tuple(SUMMARIES.rows)
DEFAULT_SUMMARIES = tuple(name for name, row in SUMMARIES.rows.items() if row.default)

# `dtype:` values. float16 / bfloat16 are "pure" (low-precision variables with
# float32 master copies); mixed / mixed_bfloat16 keep float32 variables and
# compute in the low precision through a Keras dtype policy.
DTYPES = ("float32", "float16", "mixed", "bfloat16", "mixed_bfloat16")

# Rules of the pipeline's top-level keys; YAML numbers may arrive as strings ("1e-3").
DTYPE = p.one_of(*DTYPES, kind="dtype", lower=True)
SUMMARY = p.one_of(*OPTIMIZER_SUMMARIES, kind="summary")
ITER_SIZE = p.integer(1)
MAX_GRAD_NORM = p.optional(p.YAML_POSITIVE)
MAX_CONSECUTIVE_OVERFLOWS = p.optional(p.integer(1))
# The YAML default, and the bound used for null when skipped updates do not count.
MAX_CONSECUTIVE_OVERFLOWS_DEFAULT = 20
# Whether a skipped (non-finite) update counts toward max_steps; false is OpenSeq2Seq's counting.
COUNT_SKIPPED_UPDATES = p.boolean
# What happens to a step whose gradients (or float32 loss) are not finite.
ON_NONFINITE = ("skip", "stop")
ON_NONFINITE_RULE = p.one_of(*ON_NONFINITE, kind="on_nonfinite policy", lower=True)

# How `iter_size` micro-batch gradients combine: `mean` (OpenSeq2Seq's iter_size: the update
# of one batch iter_size times larger) or `sum` (RETURNN's accum_grad_multiple_step).
ITER_SIZE_MODES = ("mean", "sum")
ITER_SIZE_MODE = p.one_of(*ITER_SIZE_MODES, kind="iter_size_mode", lower=True)

_WINDOW = p.integer(1)



def _check_scale_bounds(params):
    if params["scale_max"] < params["scale_min"]:
        raise ParamError("scale_max", "out_of_range", f"must be >= scale_min ({params['scale_min']!r})",
                         params["scale_max"])


_LOSS_SCALING = "opt_train.optimizers.loss_scaling"

# The loss-scaler algorithms. Backoff and LogMax keep OpenSeq2Seq's defaults
# (open_seq2seq/optimizers/automatic_loss_scaler.py at NVIDIA/OpenSeq2Seq@8681d38: scale_max
# 2.**14 for both, Backoff's first scale is scale_max, LogMax's is 1.0; 2.**24 was the default
# before its 2019 change); Dynamic is Keras's LossScaleOptimizer rule (halve on overflow, double
# after N finite steps). `code` is the scaler class; `AutomaticLossScaler` picks it by name.
LOSS_SCALER_NAMES = Table("loss scaling algorithm", [
    Row(
        name="Backoff",
        summary="OpenSeq2Seq's Backoff: start at scale_max, divide by step_factor on overflow, "
        "multiply after step_window finite steps",
        code=f"{_LOSS_SCALING}:BackoffScaler",
        params={
            "scale_min": Param(1.0, p.YAML_POSITIVE),
            "scale_max": Param(2.0**14, p.YAML_POSITIVE),
            "step_factor": Param(2.0, p.number(1, low_open=True, strings=True)),
            "step_window": Param(2000, _WINDOW),
        },
        cross=_check_scale_bounds,
    ),
    Row(
        name="LogMax",
        summary="OpenSeq2Seq's LogMax: keep the scale below a high quantile of log2 of the gradient's max",
        code=f"{_LOSS_SCALING}:LogMaxScaler",
        params={
            "scale_min": Param(1.0, p.YAML_POSITIVE),
            "scale_max": Param(2.0**14, p.YAML_POSITIVE),
            "log_max": Param(16.0, p.YAML_POSITIVE),
            "beta1": Param(0.99, p.YAML_FRACTION),
            "beta2": Param(0.999, p.YAML_FRACTION),
            "overflow_std_dev": Param(3.09, p.YAML_POSITIVE),
        },
        cross=_check_scale_bounds,
    ),
    Row(
        name="Dynamic",
        summary="Keras's LossScaleOptimizer rule: halve on overflow, double after dynamic_growth_steps "
        "finite steps",
        code=f"{_LOSS_SCALING}:DynamicScaler",
        params={
            "initial_scale": Param(2.0**15, p.YAML_POSITIVE),
            "dynamic_growth_steps": Param(2000, _WINDOW),
        },
    ),
], param="loss_scaling", owner="{name} loss scaling", required_by="by {name} loss scaling",
    key="loss_scaling_params", sites=(f"{_LOSS_SCALING}:_SCALER_CLASSES",))
# Algorithm -> {parameter: Param}, and -> {parameter: default} for listings.
LOSS_SCALER_PARAMS = LOSS_SCALER_NAMES.column("params")
LOSS_SCALERS = {algo: p.defaults(spec) for algo, spec in LOSS_SCALER_PARAMS.items()}

LARC_MODES = ("clip", "scale")
# `larc_eta` has no default: it is required whenever `larc_params` is given (as in OpenSeq2Seq).
LARC_SPEC = {
    "larc_eta": Param(REQUIRED, p.YAML_POSITIVE),
    "larc_mode": Param("clip", p.one_of(*LARC_MODES, kind="larc_mode")),
    "min_update": Param(1e-7, p.YAML_NON_NEGATIVE),
    "epsilon": Param(1e-7, p.YAML_POSITIVE),
}
# LARC parameter -> default (None for the required `larc_eta`).
LARC_PARAMS = {name: None if spec.required else spec.default for name, spec in LARC_SPEC.items()}
LARC_REQUIRED = tuple(name for name, spec in LARC_SPEC.items() if spec.required)


def check_positive(name, value):
    """`value` must be a finite number > 0."""
    return p.YAML_POSITIVE(name, value)


def check_dtype(dtype):
    """The canonical dtype name (any case), one of DTYPES."""
    return DTYPE("dtype", dtype if isinstance(dtype, str) else str(dtype))


def check_summaries(summaries):
    """A tuple of summary names, each one of OPTIMIZER_SUMMARIES."""
    if summaries is None:
        return ()
    if isinstance(summaries, str):
        summaries = [summaries]
    if not isinstance(summaries, (list, tuple)):
        raise ParamError("summaries", "wrong_type", "must be a list", summaries)
    return tuple(SUMMARY("summary", name) for name in summaries)


def check_iter_size(iter_size):
    return ITER_SIZE("iter_size", iter_size)


def check_iter_size_mode(mode):
    return ITER_SIZE_MODE("iter_size_mode", mode)


def check_max_grad_norm(max_grad_norm):
    """None (no clipping) or a number > 0."""
    return MAX_GRAD_NORM("max_grad_norm", max_grad_norm)


def check_on_nonfinite(on_nonfinite):
    return ON_NONFINITE_RULE("on_nonfinite", on_nonfinite)


def check_max_consecutive_overflows(value):
    """None (never stop) or an integer >= 1."""
    return MAX_CONSECUTIVE_OVERFLOWS("max_consecutive_overflows", value)


def check_count_skipped_updates(value):
    return COUNT_SKIPPED_UPDATES("count_skipped_updates", value)


def larc_param_errors(larc_params):
    """`(filled, errors)` for a `larc_params` block: every problem, each a `ParamError`."""
    filled, errors = p.param_errors(LARC_SPEC, larc_params, "LARC", required_by="when `larc_params` is set")
    return filled, _under("larc_params", errors)


def _under(block, errors):
    """`errors` with their full config key (`larc_params.larc_eta`), however they arrive."""
    for error in errors:
        if error.key is None and error.param:
            error.key = f"{block}.{error.param}"
    return errors


def check_larc_params(larc_params):
    """The LARC parameters with defaults filled in, or None when LARC is off.

    Rules: `larc_eta` required and > 0; `larc_mode` in LARC_MODES;
    `min_update` >= 0; `epsilon` > 0.
    """
    if larc_params is None:
        return None
    filled, errors = larc_param_errors(dict(larc_params))
    if errors:
        raise errors[0]
    return filled


def check_clip_and_larc(max_grad_norm, larc_params):
    """Clipping by global norm and LARC go together, as in OpenSeq2Seq: clip first, then LARC.

    (OpenSeq2Seq's post_process_gradients clips, then rescales each layer by LARC's
    ratio.) Nothing to refuse; kept as the one place that states the rule.
    """
    del max_grad_norm, larc_params


def resolve_loss_scaler(name):
    """The canonical algorithm name in LOSS_SCALERS, matched case-insensitively."""
    return LOSS_SCALER_NAMES.resolve(name)


def _reads_as_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def _loss_scaling(name, value):
    """`loss_scaling`: a static scale > 0 (a number, also written as a string) or an algorithm's name."""
    if isinstance(value, str) and not _reads_as_number(value):
        return resolve_loss_scaler(value)
    return float(p.YAML_POSITIVE(name, value))


LOSS_SCALING = _loss_scaling


def check_loss_scaling(loss_scaling, loss_scaling_params=None):
    """Normalizes `loss_scaling` to a float > 0 (static) or a canonical algorithm name.

    Returns `(loss_scaling, params)`: params is None for a static scale, else the
    algorithm's full parameter dict. A number written as a string ("128") is a
    static scale. `loss_scaling_params` with a static scale is an error (it would
    be silently ignored).
    """
    scale = LOSS_SCALING("loss_scaling", loss_scaling)
    if isinstance(scale, str):
        return scale, LOSS_SCALER_NAMES.check(scale, loss_scaling_params)
    if loss_scaling_params:
        raise ParamError(
            "loss_scaling_params", "conflict",
            f"needs an automatic `loss_scaling` ({', '.join(LOSS_SCALERS)})", None,
            text="`loss_scaling_params` needs an automatic `loss_scaling` "
            f"({', '.join(LOSS_SCALERS)}). Received: loss_scaling={loss_scaling!r}",
        )
    return scale, None


__all__ = [
    "DEFAULT_SUMMARIES",
    "DTYPES",
    "ITER_SIZE_MODES",
    "LARC_MODES",
    "LARC_PARAMS",
    "LARC_REQUIRED",
    "LARC_SPEC",
    "LOSS_SCALERS",
    "LOSS_SCALER_NAMES",
    "LOSS_SCALER_PARAMS",
    "ON_NONFINITE",
    "OPTIMIZER_SUMMARIES",
    "SUMMARIES",
    "check_clip_and_larc",
    "check_dtype",
    "check_iter_size",
    "check_iter_size_mode",
    "check_count_skipped_updates",
    "check_larc_params",
    "check_loss_scaling",
    "check_max_consecutive_overflows",
    "check_max_grad_norm",
    "check_on_nonfinite",
    "check_summaries",
    "resolve_loss_scaler",
]
