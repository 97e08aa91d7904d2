"""The rules of the eval-driven blocks: `lr_control` (a registry of its modes) and `early_stopping` (TF-free)."""

from __future__ import annotations

from opt_train import params as p
from opt_train.data import objective_names
from opt_train.errors import ParamError
from opt_train.registry import Row, Table

# `lr_control`: the eval-driven learning-rate controls (opt_train/training/controls.py); `code` is
# the rule `LearningRateControl` applies at each evaluation. newbob / newbob_abs are RETURNN's
# (NewbobRelative / NewbobAbs, default values from its learning_rate_control.py): they decay when
# the monitored error rises, so they take only a lower-is-better monitor. plateau is Keras'
# ReduceLROnPlateau, whose `mode` is `monitor_mode` here (`mode` names the control).
_MONITOR = p.Param("loss", p.string, "the eval figure read (`loss` or a metric's name)")
_DECAY = p.Param(0.5, p.number(0, 1, low_open=True, high_open=True, strings=True), "factor on the rate when it decays")
_GROWTH = p.Param(1.0, p.number(strings=True), "factor on the rate when the error does not rise")
_MIN_RATE = p.Param(0.0, p.number(0, strings=True), "the rate never goes below this")
_CONTROLS = "opt_train.training.controls:LearningRateControl"
LR_CONTROL_TABLE = Table("lr_control mode", [
    Row(
        name="newbob",
        summary="RETURNN's NewbobRelative: decay when the relative rise of the error exceeds the threshold",
        code=f"{_CONTROLS}._newbob",
        params={
            "monitor": _MONITOR, "decay": _DECAY, "growth": _GROWTH,
            "relative_error_threshold": p.Param(-0.01, p.number(strings=True), "decay above this relative rise"),
            "relative_error_div_by_old": p.Param(False, p.boolean, "divide the rise by the old error, not the new"),
            "relative_error_relative_lr": p.Param(False, p.boolean, "divide the rise by lr / initial lr"),
            "min_learning_rate": _MIN_RATE,
        },
    ),
    Row(
        name="newbob_abs",
        summary="RETURNN's NewbobAbs: decay when the error rises by more than the threshold",
        code=f"{_CONTROLS}._newbob_abs",
        params={
            "monitor": _MONITOR, "decay": _DECAY, "growth": _GROWTH,
            "error_threshold": p.Param(-0.01, p.number(strings=True), "decay above this rise"),
            "min_learning_rate": _MIN_RATE,
        },
    ),
    Row(
        name="plateau",
        summary="Keras's ReduceLROnPlateau: multiply by factor after patience evaluations without improvement",
        code=f"{_CONTROLS}._plateau",
        params={
            "monitor": _MONITOR,
            "monitor_mode": p.Param("auto", p.one_of(*objective_names.MONITOR_MODES, kind="monitor_mode", lower=True),
                                    "which way the monitor improves (Keras's `mode`)"),
            "factor": p.Param(0.1, _DECAY.rule, "factor on the rate"),
            "patience": p.Param(10, p.integer(0), "evaluations without improvement before it acts"),
            "min_delta": p.Param(1e-4, p.number(0, strings=True), "the least change that counts as improvement"),
            "cooldown": p.Param(0, p.integer(0), "evaluations to wait after a reduction"),
            "min_lr": p.Param(0.0, _MIN_RATE.rule, "the rate never goes below this"),
        },
    ),
], param="mode", owner="lr_control {name}", required_by="by lr_control {name}")
# Mode -> {parameter: Param}, and -> {parameter: default}.
LR_CONTROL_SPECS = LR_CONTROL_TABLE.column("params")
LR_CONTROLS = {mode: p.defaults(spec) for mode, spec in LR_CONTROL_SPECS.items()}
_LR_CONTROL_MODE = p.one_of(*LR_CONTROL_TABLE.rows, kind="lr_control mode", lower=True)


def lr_control(name, value):
    """The `lr_control` block completed with its mode's defaults; a `ParamError` names the sub-key."""
    params = p.mapping(name, value)
    if params.get("mode") is None:
        raise ParamError("mode", "missing", f"is required: one of {', '.join(LR_CONTROLS)}")
    mode = _LR_CONTROL_MODE("mode", params.pop("mode"))
    checked = LR_CONTROL_TABLE.check(mode, params)
    if mode.startswith("newbob") and checked["monitor"] in objective_names.HIGHER_IS_BETTER:
        raise ParamError("monitor", "conflict", f"{mode} (RETURNN's) decays the rate when the monitored error "
                         "rises, so it needs a lower-is-better figure such as loss; plateau takes "
                         "higher-is-better ones", checked["monitor"])
    return {"mode": mode, **checked}


EARLY_STOPPING_SPEC = {
    "monitor": _MONITOR,
    "mode": p.Param("auto", p.one_of(*objective_names.MONITOR_MODES, kind="mode", lower=True),
                    "which way the monitor improves"),
    "patience": p.Param(0, p.integer(0), "evaluations without improvement before the run stops"),
    "min_delta": p.Param(0.0, p.number(0, strings=True), "the least change that counts as improvement"),
}


def early_stopping(name, value):
    """Keras' EarlyStopping parameters (`mode` auto, min or max), defaults filled in."""
    return p.check_params(EARLY_STOPPING_SPEC, p.mapping(name, value), "early_stopping")
