"""RETURNN configs (top-level Python assignments) to opt-train keys: the key-by-key map and `convert_returnn`.

The file is read without running it (`pyconfig.read_config`); the optimizer's settings
are `returnn_optimizer`'s, the learning rate's `returnn_rates`', the imports of another
model's parameters `returnn_warm_start`'s.
"""

from __future__ import annotations

import os.path

from opt_train.config.compat import FILL_IN, MODEL_HINT
from opt_train.config.schema import FIELD_NAMES
from opt_train.convert import Conversion
from opt_train.convert.openseq2seq import finish, shown
from opt_train.convert.pyconfig import Opaque, PyConfigError, Symbol, _Function, is_plain, read_config
from opt_train.convert.returnn_optimizer import (
    OPTIMIZER_FLAGS, OTHER_FLAGS, layer_optimizers, optimizer_switches, returnn_epsilon,
)
from opt_train.convert.returnn_rates import (
    NEWBOB_MODES, NEWBOB_PARAMS, NEWBOB_READ, dynamic_learning_rate, learning_rates, newbob,
)
from opt_train.convert.returnn_warm_start import WARM_START_KEYS, warm_start

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


def accumulate_as_sum(result):
    """RETURNN sums the accumulated gradients; opt-train's iter_size averages unless told otherwise."""
    if "iter_size_mode" in FIELD_NAMES:
        result.data["iter_size_mode"] = "sum"
    else:
        result.notes.append("accum_grad_multiple_step: RETURNN sums the accumulated gradients; "
                            "iter_size averages them (scale learning_rate by iter_size for the same step)")


