"""RETURNN's optimizer settings to opt-train's: its switches, its epsilon default, layers' `updater_opts` as `optimizer_groups`.

The switches: `optimizer = {...}`, the first of `adam = True`, `nadam`, `adadelta`, ... that
is on, and `momentum`.
"""

from __future__ import annotations

import re

from opt_train.convert.openseq2seq import shown
from opt_train.convert.pyconfig import Opaque, is_plain, plain

# RETURNN's optimizer switches, in the order its TF updater (returnn/tf/updater.py,
# `_create_default_optimizer`) tests them: the first one on wins; `momentum` alone is
# TF1 momentum SGD, nothing at all plain gradient descent.
OPTIMIZER_FLAGS = {
    "adam": "Adam", "nadam": "ReturnnNadam", "adadelta": "Adadelta", "adagrad": "Adagrad",
    "rmsprop": "RMSProp",
}
# Not RETURNN's TF updater switches, but read as such by older opt-train conversions.
OTHER_FLAGS = {"adamax": "Adamax", "amsgrad": "AMSGrad"}


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
