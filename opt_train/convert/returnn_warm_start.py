"""RETURNN's imports of another model's parameters (`import_model_train_epoch1`, `load`, `preload_from_files`) to one `init_from`."""

from __future__ import annotations

from opt_train.convert.openseq2seq import shown
from opt_train.convert.pyconfig import is_plain

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
