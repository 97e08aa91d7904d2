"""Reads OpenSeq2Seq / RETURNN / TF1 spellings in raw config data as opt-train's keys, before validation."""

from __future__ import annotations

from opt_train.config.foreign import CONTRIB_VARIANCE_SCALING, FOREIGN_PREFIXES, INITIALIZERS, REGULARIZER_NAMES, strip_prefix
from opt_train.config.issues import ConfigIssue
from opt_train.config.issues import locate


class Pass:
    """One compatibility pass over merged data: moves keys (with their file lines), collects issues and notes."""

    def __init__(self, data, locations):
        self.data = data
        self.locations = locations
        self.issues = []
        self.notes = []

    def issue(self, key, code, message, value=None):
        file, line = locate(self.locations, key)
        self.issues.append(ConfigIssue(file, line, key, code, message, value))

    def note(self, key, message):
        file, line = locate(self.locations, key)
        where = f"{file}:{line}: " if file and line else ""
        self.notes.append(f"{where}{key}: {message}")

    def relocate(self, old, new):
        """The file lines recorded under dotted `old` now belong to `new`."""
        for key in [key for key in self.locations if key == old or key.startswith(old + ".")]:
            self.locations[new + key[len(old):]] = self.locations.pop(key)

    def rename(self, old, new, note=None):
        """Top-level `old` becomes `new`; both given and different is a conflict at `old`."""
        if old not in self.data:
            return
        value = self.data.pop(old)
        if new in self.data and self.data[new] != value:
            self.issue(old, "conflict", f"is {new} (OpenSeq2Seq's name); both are given and differ. "
                       f"{new} is {self.data[new]!r}; set one", value)
            return
        self.data[new] = value
        self.relocate(old, new)
        if note:
            self.note(new, note)


def apply(data, locations):
    """Rewrites `data` in place into opt-train's keys; returns `(issues, notes)`.

    Issues are conflicts between a foreign spelling and the opt-train key; notes say
    what opt-train does with an accepted foreign key, for `validate` and `train` to print.
    """
    if not isinstance(data, dict):
        return [], []
    step = Pass(data, locations)
    fill_ins(step)
    optimizer_block(step)
    learning_rate_in_policy(step)
    dtype_spelling(step)
    names_with_prefixes(step)
    novograd_weight_decay(step)
    regularizer_spelling(step)
    initializer_spelling(step)
    step.rename("eval_batch_size_per_gpu", "eval_batch_size")
    openseq2seq_model_and_data(step)
    for key in ("lr_control", "early_stopping", "restore_best_checkpoint"):
        if data.get(key) not in (None, False) and not data.get("eval_steps"):
            step.issue(key, "conflict", "acts on each evaluation, so it needs eval_steps")
    if data.get("print_samples_steps") is not None:
        step.note("print_samples_steps", "the built-in models have no text samples to print; "
                  "opt-train prints the loss every print_loss_steps and eval metrics every eval_steps")
    return step.issues, step.notes


# What `opt-train convert` writes where the source's model or data class was: validate
# refuses it with a line saying what to fill in, so a converted config never trains a default.
FILL_IN = "(fill in)"
MODEL_HINT = "a built-in model (mlp, cnn, transformer, ...; `opt-train list models`) or {factory: package.module:function}"
DATA_HINT = "a built-in dataset (digits, reversal, npz, csv, tfrecord, ...; `opt-train list datasets`) or {factory: package.module:function}"

# OpenSeq2Seq keys read by its model / data-layer classes (open_seq2seq/models/model.py,
# encoder_decoder.py; data layers). opt-train's `model` / `data` replace the classes, so
# these say nothing to it: each is taken out with one note line, never an unknown key.
OPENSEQ2SEQ_MODEL_KEYS = {
    "base_model": "OpenSeq2Seq's model class",
    "encoder": "OpenSeq2Seq's encoder class", "encoder_params": "its encoder's parameters",
    "decoder": "OpenSeq2Seq's decoder class", "decoder_params": "its decoder's parameters",
    "lm_vocab_file": "its language-model class's vocabulary file",
    "processed_data_folder": "its language-model class's data folder",
    "save_to_tensorboard": "its text-to-speech class's audio summaries",
}
OPENSEQ2SEQ_DATA_KEYS = {
    "data_layer": "OpenSeq2Seq's data-layer class", "data_layer_params": "its data layer's parameters",
}
# Model-class runtime keys with no opt-train counterpart.
OPENSEQ2SEQ_RUNTIME_KEYS = {
    "gpu_ids": "opt-train picks devices by num_gpus / horovodrun -np N, not by id",
    "print_bench_info_steps": "opt-train prints samples/s on every loss line",
    "finetune": "write load_model (weights only, as OpenSeq2Seq's finetune) and a new logdir",
    "hooks": "TF1 session hooks do not exist in TF2; opt-train's loop has no hook list",
    "use_trt": "TensorRT inference is not part of opt-train", "trt_precision_mode": "TensorRT is not part of opt-train",
    "trt_max_workspace_size_bytes": "TensorRT is not part of opt-train",
    "trt_minimum_segment_size": "TensorRT is not part of opt-train",
    "trt_is_dynamic_op": "TensorRT is not part of opt-train",
    "trt_maximum_cached_engines": "TensorRT is not part of opt-train",
}


FILL_IN_HINTS = {
    "model": f"the source's model was its own class: name {MODEL_HINT}",
    "data": f"the source's data was its own class: name {DATA_HINT}",
    "lr_policy": "the source's learning-rate schedule could not be read or has no opt-train policy (see the "
                 "file's comments): write lr_policy and lr_policy_params (`opt-train list lr_policies`)",
    "lr_control": "the source's learning-rate control has no opt-train equivalent (see the file's comments): "
                  "write lr_control {mode: newbob | newbob_abs | plateau, ...} or delete the line",
}


def fill_ins(step):
    """`(fill in)`, which `opt-train convert` writes where it could not carry a value: refused, saying what to write."""
    for key, hint in FILL_IN_HINTS.items():
        if step.data.get(key) == FILL_IN:
            step.issue(key, "missing", f"is to be filled in: {hint}", FILL_IN)
            step.data.pop(key)
            step.data.pop(f"{key}_params", None)  # they belong to what is to be filled in


def openseq2seq_model_and_data(step):
    """OpenSeq2Seq's model- and data-class keys: one note each; a missing `model` / `data` is refused.

    Without this, a config naming an OpenSeq2Seq encoder and data layer but no opt-train
    `model` / `data` would validate and train the default MLP on digits.
    """
    data = step.data
    loss = data.get("loss")
    foreign_loss = isinstance(loss, str) and loss.startswith(FOREIGN_PREFIXES) and not loss.startswith("keras.")
    model_keys = dict(OPENSEQ2SEQ_MODEL_KEYS)
    if foreign_loss:
        model_keys.update({"loss": "OpenSeq2Seq's loss class (the task's Keras loss comes with `data`)",
                           "loss_params": "its loss class's parameters"})
    found = {"model": [], "data": []}
    for table, part, place in ((model_keys, "model", "model_params"), (OPENSEQ2SEQ_DATA_KEYS, "data", "data_params")):
        for key, what in table.items():
            if key not in data:
                continue
            data.pop(key)
            found[part].append(key)
            step.note(key, f"{what}; opt-train's `{part}` replaces it, so it is not used "
                      f"(a {part} factory takes its own parameters in {place})")
    for key, why in OPENSEQ2SEQ_RUNTIME_KEYS.items():
        if key in data:
            data.pop(key)
            step.note(key, f"OpenSeq2Seq model setting, not used: {why}")
    for part, hint in (("model", MODEL_HINT), ("data", DATA_HINT)):
        if data.get(part) is None and found[part]:
            step.issue(part, "missing", f"is required: this config's {part} is OpenSeq2Seq's "
                       f"({', '.join(found[part])}), which opt-train cannot build; name {hint}")


def optimizer_block(step):
    """RETURNN's `optimizer: {class: adam, epsilon: 1e-8}`: the name and its parameters."""
    block = step.data.get("optimizer")
    if not isinstance(block, dict) or "class" not in block:
        return
    block = dict(block)
    name = block.pop("class")
    params = step.data.get("optimizer_params")
    params = dict(params) if isinstance(params, dict) else {}
    for key, value in block.items():
        if key in params and params[key] != value:
            step.issue(f"optimizer.{key}", "conflict",
                       f"is also optimizer_params.{key} ({params[key]!r}); set one", value)
            continue
        params[key] = value
        step.relocate(f"optimizer.{key}", f"optimizer_params.{key}")
    step.locations.pop("optimizer.class", None)
    # RETURNN's `class: nadam` is its own NadamOptimizer, not Keras' Nadam.
    is_nadam = isinstance(name, str) and name.lower() in ("nadam", "nadamoptimizer")
    step.data["optimizer"] = "ReturnnNadam" if is_nadam else resolved(name)
    if params:
        step.data["optimizer_params"] = params


def resolved(name):
    """The optimizer registry's display name for `name`, or `name` for the validator to report."""
    from opt_train.optimizers import table

    try:
        return table.resolve(name)
    except ValueError:
        return name


def learning_rate_in_policy(step):
    """OpenSeq2Seq's policies take `learning_rate`: the same thing as optimizer_params.learning_rate."""
    policy = step.data.get("lr_policy_params")
    if not isinstance(policy, dict) or "learning_rate" not in policy:
        return
    optimizer = step.data.get("optimizer_params")
    if optimizer is None:
        optimizer = step.data["optimizer_params"] = {}
    if not isinstance(optimizer, dict):
        return  # the validator reports optimizer_params' type
    rate = policy.pop("learning_rate")
    if "learning_rate" in optimizer and not same_number(optimizer["learning_rate"], rate):
        step.issue(
            "lr_policy_params.learning_rate", "conflict",
            "is the base rate optimizer_params.learning_rate, which is "
            f"{optimizer['learning_rate']!r}; both are given and differ, set one", rate,
        )
        return
    optimizer["learning_rate"] = rate
    if "optimizer_params.learning_rate" not in step.locations:
        step.relocate("lr_policy_params.learning_rate", "optimizer_params.learning_rate")
    else:
        step.locations.pop("lr_policy_params.learning_rate", None)


def same_number(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def dtype_spelling(step):
    """`tf.float32`, `tensorflow.float16`, `tf.bfloat16` -> the dtype's own name."""
    value = step.data.get("dtype")
    if isinstance(value, str) and value.startswith(("tf.", "tensorflow.")):
        step.data["dtype"] = strip_prefix(value)


def names_with_prefixes(step):
    """`tf.train.MomentumOptimizer`, `open_seq2seq.optimizers.novograd.NovoGrad`,
    `open_seq2seq.optimizers.lr_policies.poly_decay`: opt-train's own class or policy."""
    from opt_train.lr_policies import registry as policies
    from opt_train.optimizers import table as optimizers

    for key, registry in (("optimizer", optimizers), ("lr_policy", policies)):
        value = step.data.get(key)
        if not isinstance(value, str) or not value.startswith(FOREIGN_PREFIXES):
            continue
        if key == "optimizer" and value.lower().endswith("contrib.opt.nadamoptimizer"):
            # TF1 contrib's Nadam is the formula RETURNN kept, not Keras' Nadam.
            step.data[key] = "ReturnnNadam"
            continue
        try:
            step.data[key] = registry.resolve(strip_prefix(value))
        except ValueError:
            pass  # left as a dotted path: the builder imports it or names what is missing


NOVOGRAD_DECAY_NOTE = (
    "NovoGrad's weight_decay is OpenSeq2Seq's coupled decay d (g/sqrt(v) + d*w goes through the momentum), "
    "read as coupled_weight_decay; Keras's decoupled decay (w -= lr*d*w) is decoupled_weight_decay")


def novograd_weight_decay(step):
    """NovoGrad is OpenSeq2Seq's optimizer, so its `weight_decay` keeps OpenSeq2Seq's (coupled) meaning.

    OpenSeq2Seq's novograd.py adds `weight_decay * w` to the normalised gradient
    before the momentum; the Keras base argument of the same name is decoupled.
    `weight_decay` -> `coupled_weight_decay` (with a note: the name is ambiguous),
    `decoupled_weight_decay` -> the Keras base `weight_decay`.
    """
    name = step.data.get("optimizer")
    if not isinstance(name, str) or resolved(name) != "NovoGrad":
        return
    params = step.data.get("optimizer_params")
    if not isinstance(params, dict) or not ({"weight_decay", "decoupled_weight_decay"} & set(params)):
        return
    params = dict(params)
    moves = []
    if "weight_decay" in params:
        step.note("optimizer_params.weight_decay", NOVOGRAD_DECAY_NOTE)
        value = params.pop("weight_decay")
        if "coupled_weight_decay" in params and params["coupled_weight_decay"] != value:
            step.issue("optimizer_params.weight_decay", "conflict",
                       "is NovoGrad's coupled_weight_decay (OpenSeq2Seq's meaning), which is "
                       f"{params['coupled_weight_decay']!r}; set one, or write decoupled_weight_decay "
                       "for Keras's decoupled decay", value)
            return
        params["coupled_weight_decay"] = value
        moves.append(("weight_decay", "coupled_weight_decay"))
    if "decoupled_weight_decay" in params:
        params["weight_decay"] = params.pop("decoupled_weight_decay")
        moves.append(("decoupled_weight_decay", "weight_decay"))
    lines = {old: step.locations.pop(f"optimizer_params.{old}", None) for old, _ in moves}
    for old, new in moves:
        if lines[old] is not None:
            step.locations[f"optimizer_params.{new}"] = lines[old]
    step.data["optimizer_params"] = params


def regularizer_spelling(step):
    value = step.data.get("regularizer")
    if not isinstance(value, str):
        return
    name = strip_prefix(value)
    if name in REGULARIZER_NAMES:
        step.data["regularizer"] = REGULARIZER_NAMES[name]
        if REGULARIZER_NAMES[name] == "tf1_l2":
            step.note("regularizer", f"{value} is TF1's scale * sum(w^2) / 2 (opt-train's tf1_l2)")


def initializer_spelling(step):
    """A TF1 initializer and its TF1 parameters -> the Keras initializer with the same draw."""
    value = step.data.get("initializer")
    if not isinstance(value, str):
        return
    name = strip_prefix(value)
    params = step.data.get("initializer_params")
    params = dict(params) if isinstance(params, dict) else {}
    if name not in INITIALIZERS:
        return
    keras_name, defaults = INITIALIZERS[name]
    if value.startswith("tf.contrib.layers.variance_scaling") or (
        name == "xavier_initializer" and params.get("uniform") is False
    ):
        defaults = dict(CONTRIB_VARIANCE_SCALING) if name != "xavier_initializer" else {
            "scale": 1.0, "mode": "fan_avg", "distribution": "truncated_normal"}
    keras_params = dict(defaults)
    for key, item in params.items():
        if key == "factor":  # tf.contrib.layers.variance_scaling_initializer
            keras_params["scale"] = item
        elif key == "mode" and isinstance(item, str):
            keras_params["mode"] = item.lower()
        elif key == "uniform":
            if item:
                keras_params["distribution"] = "uniform"
        elif key == "dtype":
            continue  # the dtype policy decides
        else:
            keras_params[key] = item
    step.data["initializer"] = keras_name
    if keras_params:
        step.data["initializer_params"] = keras_params
    step.note("initializer", f"{value} is Keras' {keras_name}({format_params(keras_params)}) "
              "on every kernel of the built-in models")


def format_params(params):
    return ", ".join(f"{key}={value!r}" for key, value in params.items())


def distribution_notes(data, config):
    """One note when `num_gpus` is written but Horovod runs the job: OpenSeq2Seq ignores it there too.

    `data` is the merged raw config (what was written), `config` the validated one,
    where `num_gpus` is already None under Horovod. `num_gpus: 1` is OpenSeq2Seq's own
    "one GPU per rank" and changes nothing: no note.
    """
    written = data.get("num_gpus") if isinstance(data, dict) else None
    if config.distributed != "horovod" or written in (None, 1):
        return []
    file, line = config.locate("num_gpus")
    where = f"{file}:{line}: " if file and line else ""
    return [f"{where}num_gpus: {written!r} is ignored under Horovod, as in OpenSeq2Seq: one GPU per rank, "
            "as many ranks as --np N (or horovodrun -np N) starts"]
