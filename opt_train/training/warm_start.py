"""`init_from`: a fresh run starts from another model's weights, variable by variable, through a path map.

A source is a TF checkpoint, a `.keras` file or a `.weights.h5` file
(`opt_train.checkpoint_paths.init_source`). Each names its variables:

- an opt-train run's checkpoint by the Keras paths of its model's variables, which the
  run saves beside them (the checkpoint item `variable_paths`, `model_variables` order);
- any other TF checkpoint by its keys, without TF2's `/.ATTRIBUTES/VARIABLE_VALUE`
  ending (a TF1 checkpoint's keys are its variable names); optimizer slots are left out;
- a `.keras` file by the Keras paths of the model it holds (loaded by Keras, compiled not);
- a `.weights.h5` file by `layer/position`: Keras stores each layer's variables by their
  position, not by name, and this model's variables are matched the same way
  (`backbone/0` is the first variable of layer `backbone`, as `load_weights` reads it).

`variables: {regex: template}` picks and renames: a source variable loads into the
variable at `re.sub(regex, template)` of its path, for the first regex that `re.search`
finds in it; a source variable no regex finds is not loaded. Without it every source
variable keeps its path. A shape that differs is refused, or skipped with
`skip_mismatch`.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import tensorflow as tf

from opt_train.checkpoint_paths import init_source
from opt_train.training.errors import listed

# The checkpoint item holding the Keras path of each of `model_variables` (the same order).
PATHS_ITEM = "variable_paths"
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


# A Keras SeedGenerator's state (Dropout's, a random layer's) is named by a process-wide counter
# (`seed_generator_20/...`): its path says nothing of the model, and would make two runs' checkpoints
# of one config differ. It is saved without a path, so no warm start maps it.
SEED_STATE = "seed_generator_state"


def path_table(model):
    """The `variable_paths` item: a string variable of the model's variable paths, saved with the run's checkpoints."""
    paths = ["" if variable.name == SEED_STATE else variable.path for variable in model.variables]
    return tf.Variable(paths, dtype=tf.string, trainable=False, name=PATHS_ITEM)


class WarmStartError(ValueError):
    """A warm start refused: `key` is the `init_from` key it is reported at, `code` its `ParamError` code."""

    def __init__(self, key, code, message):
        super().__init__(message)
        self.key = key
        self.code = code
        self.message = message


# -- sources: {name: (shape, read)} ------------------------------------------------


def checkpoint_variables(prefix):
    """The variables of a TF checkpoint by name: an opt-train run's by Keras path, any other's by key."""
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    table = f"{PATHS_ITEM}{_VALUE}"
    found = {}
    if table in shapes:
        for index, path in enumerate(reader.get_tensor(table)):
            key = f"model_variables/{index}{_VALUE}"
            if path and key in shapes:
                found[path.decode()] = (tuple(shapes[key]), _reading(reader, key))
        return found
    for key, shape in shapes.items():
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH" or ".OPTIMIZER_SLOT" in key:
            continue
        name = key[: -len(_VALUE)] if key.endswith(_VALUE) else key
        found[name] = (tuple(shape), _reading(reader, key))
    return found


def _reading(reader, key):
    return lambda: reader.get_tensor(key)


def keras_file_variables(path):
    """The variables of the model a `.keras` file holds, by Keras path (the file's code does not run: safe mode)."""
    import keras

    model = keras.saving.load_model(path, compile=False, safe_mode=True)
    return {variable.path: (tuple(variable.shape), _value_of(variable)) for variable in model.weights}


def _value_of(variable):
    return lambda: np.asarray(variable.numpy())


def weights_file_variables(path):
    """The variables of a `.weights.h5` file as `layer/position` (Keras stores a layer's variables by position).

    A layer name found twice in the file (nested models may repeat one) names no variable:
    which of them is meant cannot be told.
    """
    import h5py

    found, repeated = {}, set()
    with h5py.File(path, "r") as file:
        groups = []
        file.visititems(lambda name, item: groups.append((name, item)) if _is_vars(name, item) else None)
        for name, group in groups:
            layer = group.attrs.get("name") or name.split("/")[-2]
            layer = layer.decode() if isinstance(layer, bytes) else str(layer)
            for position in group:
                key = f"{layer}/{position}"
                if key in found:
                    repeated.add(key)
                found[key] = (tuple(group[position].shape), _read_h5(path, f"{name}/{position}"))
    return {key: value for key, value in found.items() if key not in repeated}


def _is_vars(name, item):
    import h5py

    return isinstance(item, h5py.Group) and name.split("/")[-1] == "vars"


def _read_h5(path, dataset):
    def read():
        import h5py

        with h5py.File(path, "r") as file:
            return np.asarray(file[dataset])

    return read


READERS = {"checkpoint": checkpoint_variables, "keras": keras_file_variables, "weights": weights_file_variables}


# -- this model's variables by the same names -------------------------------------


def _legacy(source):
    """True for an opt-train checkpoint written before it held `variable_paths`: its model's
    variables are known by their position only (`model_variables/N`)."""
    return bool(source) and all(name.startswith("model_variables/") for name in source)


def model_variables(model, kind, legacy=False):
    """{name: [variables]} of `model` as a source of `kind` names them (`layer/position` for a
    `.weights.h5`; `model_variables/N`, the checkpoint's list, for an opt-train checkpoint of
    before `variable_paths`)."""
    if legacy:
        return {f"model_variables/{index}": [variable] for index, variable in enumerate(model.variables)}
    if kind != "weights":
        named = {}
        for variable in model.weights:
            named.setdefault(variable.path, []).append(variable)
        return named
    named = {}
    # Keras's own walk over every layer, nested ones included (private: its saving walks the same way).
    for layer in model._flatten_layers(include_self=False, recursive=True):
        # Keras's own order in a weights file (Layer.save_own_variables).
        own = list(layer._trainable_variables) + list(layer._non_trainable_variables)
        for position, variable in enumerate(own):
            named.setdefault(f"{layer.name}/{position}", []).append(variable)
    return named


# -- the plan and its application ---------------------------------------------------


def plan(source, targets, variables):
    """`(loads, mismatched, unused)` for `source` {name: (shape, read)} onto `targets` {name: [variables]}.

    `loads`: [(source name, target name, read)]; `mismatched`: [(source name, shape,
    target name, shape)]; `unused`: source names mapped nowhere in this model.
    Raises WarmStartError when two source variables map to one of this model's.
    """
    patterns = [(re.compile(pattern), template) for pattern, template in (variables or {}).items()]
    loads, mismatched, unused, taken = [], [], [], {}
    for name in sorted(source):
        shape, read = source[name]
        target = _mapped(name, patterns) if patterns else name
        if target is None:
            continue
        if target not in targets:
            unused.append(name)
            continue
        if target in taken:
            raise WarmStartError("init_from.variables", "conflict",
                                 f"maps both `{taken[target]}` and `{name}` of the source to `{target}`")
        taken[target] = name
        wanted = tuple(targets[target][0].shape)
        if tuple(shape) != wanted:
            mismatched.append((name, tuple(shape), target, wanted))
            continue
        loads.append((name, target, read))
    return loads, mismatched, unused


def _mapped(name, patterns):
    for pattern, template in patterns:
        if pattern.search(name):
            return pattern.sub(template, name, count=1)
    return None


def _shape(shape):
    return str(tuple(shape))


def warm_start(model, spec, say, *, verbose=False, refresh=None, option="init_from.path"):
    """Loads `spec` (`init_from`'s `{path, variables, skip_mismatch}`) into `model`; returns (loaded, total).

    `say(line)` hears `initialized N of M variables from PATH`, the variables skipped for
    their shape, and with `verbose` the variables of this model the source did not give
    and the source's that found no place here. `refresh()` runs after the assignment
    (float32 master copies of low-precision weights take the new values).
    Raises WarmStartError (a mismatch without `skip_mismatch`, nothing found) or RunRefused.
    """
    kind, path = init_source(spec["path"], option=option)
    source = _read_source(kind, path)
    targets = model_variables(model, kind, legacy=kind == "checkpoint" and _legacy(source))
    key = "init_from.variables" if spec.get("variables") else "init_from.path"
    loads, mismatched, unused = plan(source, targets, spec.get("variables"))
    if mismatched and not spec.get("skip_mismatch"):
        name, shape, target, wanted = mismatched[0]
        more = f" ({len(mismatched) - 1} more differ)" if len(mismatched) > 1 else ""
        raise WarmStartError(
            key, "conflict",
            f"`{name}` {_shape(shape)} in {path} does not fit `{target}` {_shape(wanted)} of this model{more}; "
            "init_from.skip_mismatch: true skips such variables")
    total = len({id(variable) for group in targets.values() for variable in group})
    if not loads:
        raise WarmStartError(
            key, "out_of_range",
            f"none of the {len(source)} variables in {path} ({listed(sorted(source))}) is one of this model's "
            f"({listed(sorted(targets))})" + ("" if spec.get("variables") else "; map them with init_from.variables"))
    loaded = set()
    for _, target, read in loads:
        value = read()
        for variable in targets[target]:
            variable.assign(tf.cast(value, variable.dtype))
            loaded.add(id(variable))
    if refresh is not None:
        refresh()
    say(f"initialized {len(loaded)} of {total} variables from {path}")
    if mismatched:
        say(f"init_from: skipped {len(mismatched)} of another shape (skip_mismatch): " + listed(
            f"{name} {_shape(shape)} -> {target} {_shape(wanted)}" for name, shape, target, wanted in mismatched))
    if verbose:
        given = {target for _, target, _ in loads} | {target for _, _, target, _ in mismatched}
        missing = [name for name in sorted(targets) if name not in given]
        if missing:
            say(f"init_from: not found in {path}: " + ", ".join(missing))
        if unused:
            say("init_from: found no variable of this model: " + ", ".join(unused))
    return len(loaded), total


def _read_source(kind, path):
    """The source's variables; an unreadable file is a WarmStartError at `init_from.path`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras's notes while it rebuilds a .keras model
            return READERS[kind](path)
    except (tf.errors.OpError, OSError, ValueError, TypeError, KeyError) as error:
        lines = str(error).strip().splitlines()
        raise WarmStartError("init_from.path", "out_of_range",
                             f"cannot read {os.path.basename(path)}: {lines[0] if lines else type(error).__name__}") from None


def warm_start_run(config, run, say, *, spec=None, key="init_from"):
    """`warm_start` of a fresh run's model from `spec` (default `config.init_from`); a refusal is a
    ConfigError at its key (`load_model`, OpenSeq2Seq's spelling of `{path}`, passes `key="load_model"`)."""
    from opt_train import quiet
    from opt_train.config import ConfigError
    from opt_train.errors import RunRefused

    spec = config.init_from if spec is None else spec
    try:
        return warm_start(run.model, spec, say, verbose=quiet.verbose(),
                          refresh=lambda: refresh_masters(run.train_op), option=_path_key(key))
    except WarmStartError as error:
        at = error.key if key == "init_from" else key
        raise ConfigError([config.issue(at, error.message, error.code)]) from None
    except RunRefused as error:  # no checkpoint there (load_model), or the source went away since validation
        raise ConfigError([config.issue(_path_key(key), str(error), "file_not_found", spec["path"])]) from None


def _path_key(key):
    return "init_from.path" if key == "init_from" else key


def refresh_masters(train_op):
    """Gives the float32 master copies of low-precision weights (dtype float16 / bfloat16) their weights' new values."""
    refresh = getattr(train_op.optimizer, "refresh_masters", None)
    if refresh is not None:
        refresh(train_op.variables_to_train)
