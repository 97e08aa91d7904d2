"""RETURNN configs (top-level Python assignments) to opt-train keys."""

from __future__ import annotations

import ast
import os.path
import re

from opt_train.config.schema import FIELD_NAMES
from opt_train.convert import Conversion
from opt_train.convert.openseq2seq import finish, shown
from opt_train.config.compat import FILL_IN, MODEL_HINT
from opt_train.convert.pyconfig import (
    Opaque, PyConfigError, Reader, Symbol, _Function, is_plain, plain, read_config,
)

# RETURNN's optimizer switches, in the order its TF updater (returnn/tf/updater.py,
# `_create_default_optimizer`) tests them: the first one on wins; `momentum` alone is
# TF1 momentum SGD, nothing at all plain gradient descent.
OPTIMIZER_FLAGS = {
    "adam": "Adam", "nadam": "ReturnnNadam", "adadelta": "Adadelta", "adagrad": "Adagrad",
    "rmsprop": "RMSProp",
}
# Not RETURNN's TF updater switches, but read as such by older opt-train conversions.
OTHER_FLAGS = {"adamax": "Adamax", "amsgrad": "AMSGrad"}
# RETURNN keys with the same meaning under another name.
RENAMED = {
    "num_epochs": "num_epochs",
    "random_seed": "random_seed",
    "gradient_clip_global_norm": "max_grad_norm",
    "accum_grad_multiple_step": "iter_size",
}
# Per-gradient clipping in RETURNN's updater -> the Keras base argument with the same rule:
# `gradient_clip` is tf.clip_by_value(g, -c, c) (Keras' clipvalue), `gradient_clip_norm`
# tf.clip_by_norm per tensor (Keras' clipnorm).
CLIPPING = {"gradient_clip": "clipvalue", "gradient_clip_norm": "clipnorm"}
# Keys that describe the network, the data or the batching: opt-train's model / data replace them.
NOT_CARRIED = {
    "network": f"choose `model`: {MODEL_HINT}",
    "train": "choose `data` and its `data_params`",
    "dev": "evaluation uses `data`'s eval split",
    "eval": "evaluation uses `data`'s eval split",
    "extern_data": "the data's shapes come with `data`",
    "num_inputs": "the data's shapes come with `data`",
    "num_outputs": "the data's shapes come with `data`",
    "batch_size": "RETURNN counts frames; set batch_size_per_gpu in sequences",
    "max_seqs": "set batch_size_per_gpu in sequences",
    "max_seq_length": "sequence lengths come with `data`",
    "batching": "the data is shuffled with random_seed",
    "chunking": "no chunking: sequences come whole from `data`",
    "save_interval": "checkpoints are every save_checkpoint_steps updates",
    "learning_rate_file": "the learning rate is part of the checkpoint",
    "pretrain": "no layer-wise pretraining",
    "device": "the device is TensorFlow's choice; several GPUs are num_gpus: N (replicas) or opt-train train --np N",
}
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
HOUSEKEEPING_PREFIXES = ("log", "debug", "tf_", "use_", "newbob", "learning_rate_control_", "cleanup_")
HOUSEKEEPING = {"task", "model_dir", "multiprocessing", "update_on_device", "cache_size", "window",
                "truncation", "stop_on_nonfinite_train_score", "gradient_nan_inf_filter", "target",
                "use_learning_rate_control_always", "backend", "torch_amp", "behavior_version",
                "use_tensorflow", "use_horovod", "horovod_reduce_type"}


def convert_returnn(path):
    names, lines = read_config(path)
    settings = {key: value for key, value in names.items()
                if not isinstance(value, (Symbol, _Function)) and not key.startswith("_")}
    if isinstance(settings.get("config"), dict):
        # RETURNN-as-a-framework scripts write the whole config as `config = dict(...)`.
        settings = {**{k: v for k, v in settings.items() if k != "config"}, **settings["config"]}
    if not any(key in settings for key in ("network", "learning_rate", "optimizer", "train", "num_epochs")):
        raise PyConfigError(path, 1, "none of network, train, learning_rate, optimizer, num_epochs: not a RETURNN config")
    result = Conversion(source=path, kind="returnn")
    data = result.data
    optimizer_params, base_rate = {}, None
    partition = partition_epoch(result, settings, path)
    newbob_on = settings.get("learning_rate_control") in NEWBOB_MODES
    optimizer_switches(result, settings, optimizer_params)
    warm_start(result, settings)
    for key, value in settings.items():
        if newbob_on and (key in NEWBOB_PARAMS or key in NEWBOB_READ):
            continue  # read into lr_control by newbob()
        if key in OPTIMIZER_FLAGS or key in OTHER_FLAGS or key in ("optimizer", "momentum"):
            continue  # read by optimizer_switches()
        if key in WARM_START_KEYS:
            continue  # read by warm_start()
        if key == "learning_rate":
            optimizer_params["learning_rate"] = value
        elif key == "optimizer_epsilon":
            optimizer_params["epsilon"] = value
        elif key == "learning_rates":
            if value is not None:
                base_rate = learning_rates(result, value, settings, partition)
        elif key in CLIPPING:
            if isinstance(value, Opaque):
                result.drop(key, value.source, "needs the config to run to be known; write the value")
            elif value and key == "gradient_clip_norm" and settings.get("gradient_clip"):
                result.drop(key, value, "Keras takes one of clipvalue and clipnorm, and gradient_clip is clipvalue; "
                            "RETURNN applied both (by value, then each tensor's norm): write a gradient_transforms "
                            "entry for the norm")
            elif value:
                optimizer_params[CLIPPING[key]] = value
                result.notes.append(f"{key}: {value} is RETURNN's per-{'value' if key == 'gradient_clip' else 'tensor'} "
                                    f"clipping, Keras' {CLIPPING[key]} (applied by the optimizer, after opt-train's "
                                    "pipeline: RETURNN applied it before gradient_clip_global_norm)")
        elif key == "gradient_noise":
            if isinstance(value, Opaque):
                result.drop(key, value.source, "needs the config to run to be known; write the value")
            elif value:
                data["gradient_transforms"] = [{"factory": "gradient_noise", "params": {"stddev": value},
                                                "after": "finite"}]
                result.notes.append(f"gradient_noise: {value} is RETURNN's truncated-normal noise of that stddev, "
                                    "added before clipping: the gradient_noise transform after the finite check")
        elif key in RENAMED:
            if isinstance(value, Opaque):
                result.drop(key, value.source, "needs the config to run to be known; write the value")
            elif key == "gradient_clip_global_norm" and not value:
                continue  # 0 is off, as no max_grad_norm
            elif key == "num_epochs" and partition > 1:
                data["num_epochs"] = value / partition
                result.notes.append(f"num_epochs: {value} of RETURNN's sub-epochs (partition_epoch {partition}) "
                                    f"are {value / partition:g} passes over the data")
            else:
                data[RENAMED[key]] = value
                if key == "accum_grad_multiple_step":
                    accumulate_as_sum(result)
        elif key == "model":
            if isinstance(value, str):
                data["logdir"] = os.path.dirname(value) or value
                result.notes.append(f"model: {value!r} names RETURNN's checkpoint prefix; logdir is its folder")
            else:
                result.drop(key, shown(value), "logdir: needs the config to run to be known; write the path")
        elif key == "learning_rate_control" and value == "constant":
            continue  # RETURNN's default: the rate the config gives
        elif key == "learning_rate_control" and value in NEWBOB_MODES:
            newbob(result, value, settings, partition)
        elif key == "learning_rate_control":
            # Training on at a constant rate would not be what the config meant.
            data["lr_control"] = FILL_IN
            result.drop(key, shown(value), "RETURNN's control has no opt-train equivalent: write lr_control "
                        "(newbob, newbob_abs, plateau) or delete the line lr_control: (fill in)")
        elif key in NOT_CARRIED:
            result.drop(key, shown(value), NOT_CARRIED[key])
        elif key in HOUSEKEEPING or key.startswith(HOUSEKEEPING_PREFIXES):
            result.drop(key, shown(value), "RETURNN's own housekeeping; no effect in opt-train")
        else:
            result.drop(key, shown(value), "no opt-train equivalent")
    if "num_epochs" not in settings:
        data["num_epochs"] = 5 / partition
        result.notes.append("num_epochs: not set, so RETURNN's default 5 (engine/base.py)"
                            + (f", sub-epochs of partition_epoch {partition}" if partition > 1 else ""))
    dynamic = dynamic_learning_rate(result, path, names)
    if dynamic == "ignores learning_rate":
        optimizer_params["learning_rate"] = 1.0  # the policy's base is a plain multiplier
    elif dynamic is not None:
        optimizer_params.setdefault("learning_rate", 1.0)  # RETURNN's default learning_rate
    if base_rate is not None:
        optimizer_params["learning_rate"] = base_rate  # the piecewise policy's base: the first epoch's
    if optimizer_params:
        if all(is_plain(item) for item in optimizer_params.values()):
            data["optimizer_params"] = {**optimizer_params, **data.get("optimizer_params", {})}
        else:
            result.drop("optimizer_params", shown(optimizer_params), "needs the config to run to be known")
    data.setdefault("optimizer", "GradientDescent")  # RETURNN's optimizer when none is switched on
    finish(result)
    tf_backend = settings.get("backend") not in ("torch", "jax")
    if tf_backend:
        returnn_epsilon(result)
    layer_optimizers(result, settings, tf_backend)
    if data.get("optimizer") == "ReturnnNadam":
        result.notes.append("nadam: RETURNN's NadamOptimizer (TF1 contrib's: Adam with a Nesterov look-ahead), "
                            "not Keras' Nadam; RETURNN under TF 2 gave `nadam = True` Keras' Nadam: "
                            "write optimizer: Nadam for that")
        if not tf_backend:
            result.notes.append(f"backend {settings.get('backend')}: RETURNN ran that backend's own NAdam, "
                                "whose momentum schedule neither ReturnnNadam nor Nadam follows")
    return result


# RETURNN's imports of another model's parameters (read by warm_start()), in the order one becomes `init_from`.
WARM_START_KEYS = ("import_model_train_epoch1", "load", "preload_from_files")
# Its variables are its layers' parameters (`lstm0/W`): this model's are Keras paths.
RETURNN_NAMES = ("its checkpoint names variables by RETURNN's layers (`enc/W`), this model's are Keras paths "
                 "(`dense_0/kernel`): map them with init_from.variables (docs/fine-tuning.md)")
# preload_from_files options init_from has no counterpart for.
PRELOAD_UNCARRIED = {"ignore_params": "init_from has no exclusion list: give init_from.variables only the "
                                      "variables to load",
                     "ignore_params_prefixes": "init_from has no exclusion list: give init_from.variables only "
                                               "the variables to load",
                     "var_name_mapping": "write it as init_from.variables (regex: template)",
                     "checkpoint_key": "init_from reads the checkpoint's model variables"}


def warm_start(result, settings):
    """`import_model_train_epoch1`, `load`, `preload_from_files` -> one `init_from`, a note where RETURNN meant more.

    RETURNN (docs: configuration_reference/model_loading, wiki "Different ways to import
    parameters"): `import_model_train_epoch1` starts a new training from a checkpoint
    (every parameter must match); `load` loads a model and its training state and continues
    from there; a `preload_from_files` entry with `init_for_train: True` initialises the
    parameters whose names start with `prefix` from the file's same names without the
    prefix (`ignore_missing` allows some to be absent), and one without it is used in
    recognition only. opt-train starts from one source; the others are listed as not carried.
    """
    candidates = []  # (key, init_from, notes)
    for key in ("import_model_train_epoch1", "load"):
        value = settings.get(key)
        if value is None or value is False or value == "":
            continue
        if not isinstance(value, str):
            result.drop(key, shown(value), "needs the config to run to be known; write init_from.path")
            continue
        notes = [f"{key}: {value!r} is init_from.path; RETURNN required every parameter to be in it, init_from "
                 "loads those it finds (train says `initialized N of M`)"]
        if key == "load":
            notes = [f"load: {value!r} is init_from.path, the weights alone: RETURNN continued that model's "
                     "training (its epoch, learning rates); opt-train starts at step 0"]
        candidates.append((key, {"path": value}, notes))
    preload = settings.get("preload_from_files")
    if isinstance(preload, dict):
        for name in sorted(preload, key=str):
            candidates.extend(preload_entry(result, f"preload_from_files.{name}", preload[name]))
    elif preload is not None:
        result.drop("preload_from_files", shown(preload), "needs the config to run to be known; write init_from")
    if not candidates:
        return
    (key, init_from, notes), *others = candidates
    result.data["init_from"] = init_from
    result.notes.extend(notes)
    result.notes.append(f"init_from: {RETURNN_NAMES}")
    for other, value, _ in others:
        result.drop(other, shown(value), f"init_from takes one source, {key}'s")


def preload_entry(result, key, options):
    """One `preload_from_files` entry: `[(key, init_from, notes)]`, or [] after saying why it is not carried."""
    if not isinstance(options, dict) or not is_plain(options):
        result.drop(key, shown(options), "needs the config to run to be known; write init_from")
        return []
    if not options.get("init_for_train", False):
        result.drop(key, shown(options), "init_for_train is not set: RETURNN loads it for recognition only, "
                    "not for training")
        return []
    filename = options.get("filename")
    if not isinstance(filename, str) or not filename:
        result.drop(key, shown(options), "no filename: write init_from.path")
        return []
    init_from, notes = {"path": filename}, []
    prefix = options.get("prefix") or ""
    if prefix:
        # The file's `X` is this model's `prefix + X`.
        init_from["variables"] = {"^(.*)$": prefix.replace("\\", "\\\\") + "\\1"}
        notes.append(f"{key}.prefix: {prefix!r}: each variable X of the file loads into {prefix}X "
                     "(init_from.variables)")
    if not options.get("ignore_missing", False):
        notes.append(f"{key}: RETURNN refused a {prefix or ''}variable missing from the file (ignore_missing "
                     "false); init_from loads those it finds (train says `initialized N of M`)")
    for option, why in PRELOAD_UNCARRIED.items():
        if options.get(option):
            result.drop(f"{key}.{option}", shown(options[option]), why)
    return [(key, init_from, notes)]


def optimizer_switches(result, settings, optimizer_params):
    """`optimizer = {...}`, or the first of RETURNN's switches that is on, with `momentum`.

    `rmsprop = 0.9` (a float) is RMSProp with that decay (TF1's `decay`, Keras' `rho`);
    `rmsprop = True` RMSProp with TF1's decay 0.9. RETURNN asserts `momentum` is 0 with
    adam, nadam, adadelta and adagrad; with rmsprop it is RMSProp's momentum; alone it
    is TF1 momentum SGD.
    """
    data = result.data
    momentum = settings.get("momentum")
    if isinstance(momentum, Opaque):
        result.drop("momentum", momentum.source, "needs the config to run to be known; write the value")
        momentum = None
    if "optimizer" in settings:
        value = settings["optimizer"]
        if is_plain(value):
            data["optimizer"] = plain(value)  # {class: adam, ...}: the compat pass reads it
            if momentum and takes_momentum(value):
                optimizer_params["momentum"] = momentum
            elif momentum:
                result.drop("momentum", momentum, "RETURNN passes momentum only to an optimizer class taking "
                            "it; this one does not")
        else:
            result.drop("optimizer", shown(value), "needs the config to run to be known; write the value")
        return
    for key in (*OPTIMIZER_FLAGS, *OTHER_FLAGS):
        value = settings.get(key)
        if isinstance(value, Opaque):
            result.drop(key, value.source, "needs the config to run to be known; write the value")
            continue
        is_float = key == "rmsprop" and isinstance(value, float)
        if not (value is True or is_float or (isinstance(value, int) and not isinstance(value, bool) and value)):
            continue
        data["optimizer"] = {**OPTIMIZER_FLAGS, **OTHER_FLAGS}[key]
        if is_float:
            optimizer_params["rho"] = value
            result.notes.append(f"rmsprop: {value} is RMSProp's decay (TF1 decay, Keras rho), as RETURNN reads a float")
        if key == "rmsprop" and momentum:
            optimizer_params["momentum"] = momentum
        elif momentum:
            result.drop("momentum", momentum, f"RETURNN refuses momentum with {key} (its updater asserts it is 0)")
        return
    if momentum:
        data["optimizer"] = "Momentum"
        optimizer_params["momentum"] = momentum
        result.notes.append(f"momentum: {momentum} with no optimizer switched on is RETURNN's TF1 momentum SGD")


def takes_momentum(block):
    """Whether RETURNN's `optimizer = {"class": ...}` names a class with a `momentum` argument."""
    from opt_train.config.compat import resolved
    from opt_train.optimizers import specs

    name = block.get("class") if isinstance(block, dict) else block
    try:
        return "momentum" in specs.spec(resolved(name))
    except (ValueError, TypeError):
        return True  # not a registered name: carried, and the validator names what is wrong


def partition_epoch(result, settings, path):
    """RETURNN's `partition_epoch` of the `train` dataset: its epochs (num_epochs, learning_rates) are sub-epochs.

    Returns the partition (1 when there is none); names the key in a note when the
    dataset cannot be read without running the config.
    """
    train = settings.get("train")
    if isinstance(train, dict):
        value = train.get("partition_epoch")
        if value is None:
            return 1
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        result.notes.append(f"train.partition_epoch: {shown(value)} needs the config to run to be known; "
                            "num_epochs and learning_rates count its sub-epochs: divide them by it")
        return 1
    with open(path, encoding="utf-8") as handle:
        mentioned = "partition_epoch" in handle.read()
    if mentioned and train is not None:
        result.notes.append("train: its partition_epoch needs the config to run to be known; RETURNN counts "
                            "num_epochs and learning_rates in sub-epochs of it: divide them by it")
    return 1


def returnn_epsilon(result):
    """RETURNN passes `optimizer_epsilon` (default 1e-16) to every optimizer taking an epsilon."""
    from opt_train.optimizers import specs

    name = result.data.get("optimizer")
    params = result.data.get("optimizer_params") or {}
    try:
        takes_epsilon = "epsilon" in specs.spec(name)
    except ValueError:
        return  # not a registered name: the validator reports it
    if takes_epsilon and "epsilon" not in params:
        result.data["optimizer_params"] = {**params, "epsilon": 1e-16}
        result.notes.append("optimizer_epsilon: not set, so RETURNN's default 1e-16 (opt-train's class "
                            "default would differ)")


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


def accumulate_as_sum(result):
    """RETURNN sums the accumulated gradients; opt-train's iter_size averages unless told otherwise."""
    if "iter_size_mode" in FIELD_NAMES:
        result.data["iter_size_mode"] = "sum"
    else:
        result.notes.append("accum_grad_multiple_step: RETURNN sums the accumulated gradients; "
                            "iter_size averages them (scale learning_rate by iter_size for the same step)")


# RETURNN's per-layer `updater_opts` keys besides `optimizer`: its updater post-processes each
# variable's gradient with them (returnn/tf/updater.py `_post_process_grad`); opt-train's one
# pipeline serves every group alike.
PER_LAYER_PIPELINE = ("accum_grad_multiple_step", "gradient_noise", "gradient_clip", "gradient_clip_norm",
                      "gradient_clip_avg_norm", "gradient_clip_global_norm", "global_norm_tag",
                      "gradient_clip_global_norm_tag", "grad_norm_to_clip_to_zero", "maximize_grad_norm",
                      "gradient_nan_inf_filter", "debug_grad_summaries", "tags")


def layer_optimizers(result, settings, tf_backend=True):
    """Layers' `updater_opts = {"optimizer": {...}}` -> `optimizer_groups`, one group per distinct optimizer.

    RETURNN gives such a layer's variables an optimizer of its own (returnn/tf/updater.py
    `_create_optimizer`): the block's `class` (else the default optimizer's class) with the
    block's own options only, plus the config's `optimizer_epsilon` (default 1e-16) and
    `momentum` where the class takes them, at the global rate times `learning_rate_multiplier`.
    Layers with the same block share one optimizer. A group naming its optimizer means that:
    its own parameters, the run's rate times `lr_multiplier`. Each group's regex is the
    layer's name as the first part of a variable path (`^layer1/`), which holds only for a
    model whose layers are named as the RETURNN network's.
    """
    from opt_train.config.compat import resolved
    from opt_train.optimizers import specs

    network = settings.get("network")
    if not isinstance(network, dict):
        return
    by_block, order = {}, []
    for layer, spec in network.items():
        for inner, opts in _nested_updater_opts(spec, f"network.{layer}"):
            result.drop(inner, shown(opts), "a sub-network layer's updater_opts: its variables' paths are the "
                        "model's to name; write an optimizer_groups entry for them")
        if not isinstance(spec, dict) or "updater_opts" not in spec:
            continue
        opts = spec["updater_opts"]
        where = f"network.{layer}.updater_opts"
        if not isinstance(opts, dict) or not is_plain(opts):
            result.drop(where, shown(opts), "needs the config to run to be known; write an optimizer_groups entry")
            continue
        for key, value in opts.items():
            if key in PER_LAYER_PIPELINE:
                result.drop(f"{where}.{key}", shown(value), "RETURNN's per-layer gradient option; opt-train's "
                            "one gradient pipeline serves every group alike (set the top-level key for all)")
            elif key != "optimizer":
                result.drop(f"{where}.{key}", shown(value), "no opt-train equivalent")
        block = opts.get("optimizer")
        if not block:
            continue  # RETURNN's default optimizer, as the variables no group takes
        block = {"class": block} if isinstance(block, str) else dict(block)
        if "learning_rate" in block:
            result.drop(f"{where}.optimizer.learning_rate", shown(block.pop("learning_rate")),
                        "RETURNN refuses it (the rate is the global one); a group's rate is lr_multiplier times the run's")
        key = repr(sorted(block.items()))
        if key not in by_block:
            by_block[key] = (block, [])
            order.append(key)
        by_block[key][1].append(str(layer))
    groups = []
    for key in order:
        block, layers = by_block[key]
        block = dict(block)
        name = block.pop("class", None)
        is_nadam = isinstance(name, str) and name.lower() in ("nadam", "nadamoptimizer")
        optimizer = "ReturnnNadam" if is_nadam else resolved(name) if name else result.data.get("optimizer")
        multiplier = block.pop("learning_rate_multiplier", None)
        params = dict(block)
        try:
            takes = specs.spec(optimizer)
        except (ValueError, TypeError):
            takes = {}
        if tf_backend and "epsilon" in takes:
            params.setdefault("epsilon", settings.get("optimizer_epsilon", 1e-16))
        if "momentum" in takes and settings.get("momentum"):
            params.setdefault("momentum", settings["momentum"])
        names = "|".join(re.escape(layer) for layer in layers)
        group = {"variables": f"^({names})/" if len(layers) > 1 else f"^{names}/", "optimizer": optimizer}
        if params:
            group["optimizer_params"] = params
        if multiplier is not None:
            group["lr_multiplier"] = multiplier
        groups.append(group)
    if groups:
        result.data["optimizer_groups"] = groups
        result.notes.append("optimizer_groups: the layers' updater_opts optimizers, each with its own options and "
                            "RETURNN's optimizer_epsilon / momentum as RETURNN passes them; `^layer/` matches "
                            "a model whose layers keep the RETURNN network's names: adjust the regexes to your model")


def _nested_updater_opts(spec, where):
    """`(key, updater_opts)` of the layers inside a layer (a rec unit, a subnetwork), at any depth."""
    found = []
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "updater_opts":
                continue
            if isinstance(value, dict):
                if "updater_opts" in value:
                    found.append((f"{where}.{key}.updater_opts", value["updater_opts"]))
                found.extend(_nested_updater_opts(value, f"{where}.{key}"))
    return found
