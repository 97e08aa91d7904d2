"""OpenSeq2Seq configs (`base_params`, `train_params`, `eval_params`) to opt-train keys."""

from __future__ import annotations

from opt_train.config import compat
from opt_train.config.schema import FIELD_NAMES
from opt_train.convert import Conversion
from opt_train.convert.pyconfig import Opaque, PyConfigError, is_plain, plain, read_config

# OpenSeq2Seq keys the compat pass reads with their OpenSeq2Seq meaning.
# Keys that describe the model and the data: opt-train's `model` / `data` replace them.
MODEL_KEYS = ("encoder", "encoder_params", "decoder", "decoder_params", "loss", "loss_params")
DATA_KEYS = ("data_layer", "data_layer_params")
# (OpenSeq2Seq's `loss` names one of its own loss classes, not a Keras loss: left to fill in.)
ACCEPTED = (set(FIELD_NAMES) | {"eval_batch_size_per_gpu"}) - set(MODEL_KEYS) - set(DATA_KEYS)
WHY = {
    "base_model": f"choose `model`: {compat.MODEL_HINT}",
    "encoder": "part of the model: `model` / `model_params`",
    "encoder_params": "part of the model: `model_params`",
    "decoder": "part of the model: `model` / `model_params`",
    "decoder_params": "part of the model: `model_params`",
    "loss": "the task's loss comes with `data`",
    "loss_params": "the task's loss comes with `data`",
    "data_layer": "choose `data` (digits, reversal, npz, csv, ...)",
    "data_layer_params": "`data_params` of the chosen `data`",
    "gpu_ids": "which GPUs is TensorFlow's choice: num_gpus replicas (tf.distribute), or one GPU per rank under Horovod",
    "print_bench_info_steps": "opt-train prints samples/s with every loss line",
}


def convert_openseq2seq(path):
    names, lines = read_config(path)
    if not isinstance(names.get("base_params"), dict):
        line = lines.get("base_params", 1)
        raise PyConfigError(path, line, "no `base_params = {...}` dictionary: not an OpenSeq2Seq config")
    result = Conversion(source=path, kind="openseq2seq")
    if "base_model" in names:
        result.drop("base_model", names["base_model"], WHY["base_model"])
    params = dict(names["base_params"])
    train = names.get("train_params")
    if isinstance(train, dict):
        params.update(train)  # OpenSeq2Seq lays train_params over base_params for training
    for key, value in params.items():
        carry(result, key, value)
    eval_params = names.get("eval_params")
    if isinstance(eval_params, dict):
        for key, value in eval_params.items():
            if key == "batch_size_per_gpu" and value != result.data.get("batch_size_per_gpu"):
                carry(result, "eval_batch_size_per_gpu", value)
            elif key != "batch_size_per_gpu":
                result.drop(f"eval_params.{key}", shown(value), WHY.get(key, "evaluation runs on `data`'s eval split"))
    for key in ("infer_params", "interactive_infer_params"):
        if key in names:
            result.drop(key, "{...}", "inference is `opt-train eval` on the eval split")
    finish(result)
    return result


def carry(result, key, value):
    if key == "load_model" and isinstance(value, str):
        if value:
            load_model(result, value)
        return
    if key not in ACCEPTED:
        result.drop(key, shown(value), WHY.get(key, "no opt-train equivalent"))
        return
    if not is_plain(value):
        result.drop(key, shown(value), "needs the config to run to be known; write the value")
        return
    result.data[key] = plain(value)


def load_model(result, path):
    """OpenSeq2Seq's `load_model`: a new run from the variables of that logdir's checkpoint found in both with their
    shape (its train() restores `tf.global_variables()` the checkpoint holds at the same shape): `init_from`
    with `skip_mismatch`."""
    result.data["init_from"] = {"path": path, "skip_mismatch": True}
    result.notes.append(
        f"load_model: {path!r} is init_from with skip_mismatch (OpenSeq2Seq loaded the variables found in both "
        "at the same shape); its optimizer slots are not carried, and its TF1 names (`ForwardPass/...`) "
        "map to this model's with init_from.variables (docs/fine-tuning.md)")


def shown(value):
    """A value as the config wrote it, for a comment."""
    if isinstance(value, Opaque):
        return value.source
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(item) for item in value) + "]"
    return str(value) if not isinstance(value, str) or value.startswith(("tf.", "open_seq2seq.")) else repr(value)


def finish(result):
    """The compat pass on the carried keys: opt-train's own spellings, its notes as comments.

    The source's model and data are its own classes: `model` and `data` are written as
    `(fill in)`, which `opt-train validate` refuses with a line saying what to name.
    """
    to_fill = [key for key, value in result.data.items() if value == compat.FILL_IN]
    issues, notes = compat.apply(result.data, {})
    for issue in issues:
        if issue.key not in to_fill:
            result.drop(issue.key, issue.value, f"{issue.code}: {issue.message}")
    result.data.update({key: compat.FILL_IN for key in to_fill})
    result.notes.extend(notes)
    for part in ("model", "data"):
        if part not in result.data:
            result.data[part] = compat.FILL_IN
    result.notes.append(f"model, data: {compat.FILL_IN} -- the source's own classes (see below) have no "
                        "opt-train build; validate and train refuse the file until you name them")
