"""RETURNN's learning-rate settings to opt-train's: `learning_rates`, a Noam `dynamic_learning_rate`, newbob control.

`learning_rates` lists become `lr_policy: piecewise`, a Noam-shaped `dynamic_learning_rate`
`lr_policy: transformer`, `learning_rate_control = "newbob*"` an `lr_control` block.
"""

from __future__ import annotations

import ast

from opt_train.config.compat import FILL_IN
from opt_train.convert.openseq2seq import shown
from opt_train.convert.pyconfig import Reader, is_plain

NEWBOB_MODES = {"newbob": "newbob", "newbob_rel": "newbob", "newbob_relative": "newbob",
                "newbob_multi_epoch": "newbob", "newbob_abs": "newbob_abs"}
# RETURNN's newbob parameters -> lr_control's (both spellings RETURNN reads).
NEWBOB_PARAMS = {
    "newbob_learning_rate_decay": "decay", "learning_rate_decay": "decay",
    "newbob_learning_rate_growth": "growth", "learning_rate_growth": "growth",
    "newbob_relative_error_threshold": "relative_error_threshold",
    "newbob_relative_error_div_by_old": "relative_error_div_by_old", "relative_error_div_by_old": "relative_error_div_by_old",
    "learning_rate_control_relative_error_relative_lr": "relative_error_relative_lr",
    "newbob_error_threshold": "error_threshold",
    "min_learning_rate": "min_learning_rate",
}
# Read by newbob() itself (a note each where opt-train differs).
NEWBOB_READ = ("learning_rate_control_error_measure", "learning_rate_control_min_num_epochs_per_new_lr",
               "newbob_multi_num_epochs", "newbob_multi_update_interval")


def learning_rates(result, rates, settings, partition=1):
    """`learning_rates = [...]`, one rate per (sub-)epoch: a piecewise policy switching on each one's first update.

    RETURNN's ConstantLearningRate gives an epoch past the list the rate of the last
    epoch before it, so the list's last value holds to the end; `learning_rate` is
    then used by no epoch. With `partition_epoch` P RETURNN's epochs are sub-epochs,
    so entry k starts at k / P of a pass over the data.
    """
    if isinstance(rates, tuple):
        rates = list(rates)
    if not isinstance(rates, list) or not rates or not is_plain(rates) or not all(
            isinstance(rate, (int, float)) and not isinstance(rate, bool) for rate in rates):
        result.drop("learning_rates", shown(rates), "needs the config to run to be known; write lr_policy "
                    "piecewise with these rates (lr_policy: (fill in) until then)")
        result.data["lr_policy"] = FILL_IN
        return None
    base = float(rates[0])
    if base <= 0:
        result.drop("learning_rates", shown(rates), "starts at 0, and opt-train's piecewise rates are relative "
                    "to the first: write lr_policy (lr_policy: (fill in) until then)")
        result.data["lr_policy"] = FILL_IN
        return None
    if len(rates) > 1:
        result.data["lr_policy"] = "piecewise"
        result.data["lr_policy_params"] = {
            "boundaries": [k / partition for k in range(1, len(rates))] if partition > 1 else list(range(1, len(rates))),
            "decay_rates": [float(rate) / base for rate in rates[1:]],
            "switch_on_boundary": True,
        }
    unit = f"sub-epoch k (1/{partition} of a pass, partition_epoch {partition})" if partition > 1 else "epoch k"
    result.notes.append(f"learning_rates: {unit} trains at learning_rates[k-1] from its first update "
                        f"(base {base}), and the last value holds after the list, as in RETURNN")
    if "learning_rate" in settings:
        result.notes.append("learning_rate: unused where learning_rates covers epoch 1 (RETURNN's default "
                            "rate for epochs the list does not name)")
    return base


NOT_NOAM = ("a function opt-train does not run; RETURNN's Noam example "
            "(learning_rate * noam(n=global_train_step, warmup_n=..., model_d=...)) becomes lr_policy "
            "transformer, this one was not recognised: write lr_policy and lr_policy_params "
            "(lr_policy: (fill in) until then)")


def dynamic_learning_rate(result, path, names):
    """`def dynamic_learning_rate(...)` written as RETURNN's Noam example -> `lr_policy: transformer`.

    RETURNN's documented form multiplies its `learning_rate` by
    `d^-0.5 * min(n^-0.5, n * W^-1.5)` with `n = global_train_step`, the updates applied
    before this one: `step_offset` 0 (opt-train's default 1 is OpenSeq2Seq's `global_step + 1`).
    Returns None when there is no such function or it is not recognised, else
    whether it multiplies `learning_rate` ("uses learning_rate" / "ignores learning_rate").
    """
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    functions = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    function = functions.get("dynamic_learning_rate")
    if function is None:
        value = names.get("dynamic_learning_rate")
        if value is not None:
            result.drop("dynamic_learning_rate", shown(value), "has no opt-train policy: write lr_policy "
                        "(lr_policy: (fill in) until then)")
            result.data["lr_policy"] = FILL_IN
        return None
    found = noam_parameters(function, functions, source, path, names)
    if found is None:
        result.drop("dynamic_learning_rate", f"def dynamic_learning_rate (line {function.lineno})", NOT_NOAM)
        result.data["lr_policy"] = FILL_IN  # training on at a constant rate is not what the config meant
        return None
    params, uses_rate = found
    result.data["lr_policy"] = "transformer"
    result.data["lr_policy_params"] = params
    result.notes.append("dynamic_learning_rate: RETURNN's Noam, n = global_train_step (the updates before this "
                        "one, so the first update's rate is 0): lr_policy transformer with step_offset "
                        f"{params['step_offset']}")
    return "uses learning_rate" if uses_rate else "ignores learning_rate"


def noam_parameters(function, functions, source, path, names):
    """`({d_model, warmup_steps, step_offset}, multiplies learning_rate)` for a Noam-shaped function, or None."""
    reader = Reader(source, path)
    reader.names = dict(names)
    returned = None
    for statement in function.body:
        if isinstance(statement, ast.Return):
            returned = statement.value
        elif isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            reader.statement(statement)  # local constants (WARMUP_N = 25000)
    uses_rate = False
    if isinstance(returned, ast.BinOp) and isinstance(returned.op, ast.Mult):
        sides = [returned.left, returned.right]
        rate = [side for side in sides if isinstance(side, ast.Name) and side.id == "learning_rate"]
        if len(rate) != 1:
            return None
        uses_rate = True
        returned = next(side for side in sides if side is not rate[0])
    if not (isinstance(returned, ast.Call) and isinstance(returned.func, ast.Name)):
        return None
    helper = functions.get(returned.func.id)
    if helper is None or not all(mark in ast.unparse(helper) for mark in ("-0.5", "-1.5", "minimum")):
        return None
    parameters = [arg.arg for arg in helper.args.args]
    bound = dict(zip(parameters, returned.args))
    bound.update({keyword.arg: keyword.value for keyword in returned.keywords if keyword.arg})
    roles = {}
    for name, node in bound.items():
        if "warm" in name:
            roles["warmup_steps"] = reader.value(node)
        elif "model" in name or name in ("d", "dim"):
            roles["d_model"] = reader.value(node)
        else:
            roles["step_offset"] = step_offset(node)
    if set(roles) != {"warmup_steps", "d_model", "step_offset"} or not all(
        isinstance(value, (int, float)) and not isinstance(value, bool) for value in roles.values()
    ):
        return None
    return {"d_model": roles["d_model"], "warmup_steps": int(roles["warmup_steps"]),
            "step_offset": roles["step_offset"]}, uses_rate


def step_offset(node):
    """`global_train_step` -> 0, `global_train_step + k` -> k; anything else None."""
    if isinstance(node, ast.Name) and node.id == "global_train_step":
        return 0
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and isinstance(node.left, ast.Name)
            and node.left.id == "global_train_step" and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, int)):
        return node.right.value
    return None


def newbob(result, control, settings, partition=1):
    """`learning_rate_control = "newbob*"` and its parameters -> `lr_control`; a note for each that differs."""
    from opt_train.config.controls import LR_CONTROLS

    mode = NEWBOB_MODES[control]
    block = {"mode": mode}
    for key, name in NEWBOB_PARAMS.items():
        if key in settings and name in LR_CONTROLS[mode] and is_plain(settings[key]):
            block[name] = settings[key]
    result.data["lr_control"] = block
    every = f"one sub-epoch (1/{partition} of a pass, partition_epoch {partition})" if partition > 1 else "one epoch"
    result.drop("eval_steps", f"(RETURNN: every {'sub-' if partition > 1 else ''}epoch)",
                f"lr_control acts on each evaluation: set eval_steps to the updates in {every}")
    measure = settings.get("learning_rate_control_error_measure")
    if measure is not None:
        error_measure(result, measure)
    least = settings.get("learning_rate_control_min_num_epochs_per_new_lr")
    if least:
        result.notes.append(f"learning_rate_control_min_num_epochs_per_new_lr: {shown(least)} -- RETURNN keeps a "
                            "new rate at least that many epochs; lr_control may change it at every evaluation")
    if control == "newbob_multi_epoch":
        over = settings.get("newbob_multi_num_epochs", 5)
        interval = settings.get("newbob_multi_update_interval", over)
        result.notes.append(f"learning_rate_control newbob_multi_epoch: lr_control newbob compares successive "
                            f"evaluations; RETURNN compared the mean score of newbob_multi_num_epochs ({shown(over)}) "
                            f"epochs every newbob_multi_update_interval ({shown(interval)}) epochs")


def error_measure(result, measure):
    """RETURNN's `learning_rate_control_error_measure` -> lr_control's `monitor`, or a note why not."""
    text = measure if isinstance(measure, str) else shown(measure)
    if isinstance(measure, str) and measure.startswith("dev_score") and not measure.endswith(":exp"):
        result.notes.append(f"learning_rate_control_error_measure: {measure!r} is the dev loss: lr_control "
                            "monitors eval loss")
    elif isinstance(measure, str) and measure.startswith("dev_score") and measure.endswith(":exp"):
        result.notes.append(f"learning_rate_control_error_measure: {measure!r} is exp(dev loss) (perplexity); "
                            "lr_control compares eval loss, whose relative change differs")
    else:
        result.notes.append(f"learning_rate_control_error_measure: {text} -- RETURNN's error rate of an output "
                            "layer has no opt-train eval metric; lr_control monitors eval loss instead")
