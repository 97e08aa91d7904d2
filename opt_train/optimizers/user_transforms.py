"""`gradient_transforms:` from YAML: checks each entry TF-free, and loads its factory into a transform.

An entry names a factory, its parameters, and the built-in stage it follows:

    gradient_transforms:
      - {factory: "my_package.grads:add_noise", params: {stddev: 0.01}, after: allreduce}
      - {factory: gradient_noise, params: {eta: 0.01}}

`factory` is `package.module:function` (or `package.module.function`), or the
name of a built-in transform (a row of `TRANSFORMS`: its factory, parameters and summary),
which is written exactly as a user's would be: a module with a factory. The factory is called as
`factory(**params)` and returns an `opt_train.optimizers.GradientTransform`.

Every error carries the full key it is about (`.key`, e.g.
`gradient_transforms[1].after`) and a stable `.code`, so the config layer
reports it at that key whether it is found by `validate` or while `train`
builds the pipeline.
"""

from __future__ import annotations

import inspect

from opt_train import params as p
from opt_train import usercode
from opt_train.errors import PARAM_CODES, ParamError
from opt_train.registry import Row, Table
from opt_train.suggest import UnknownNameError

# The built-in stages a transform may follow, in pipeline order. `clip` and
# `larc` name the same place: the last built-in stage, right before the optimizer
# (whichever of clipping / LARC is configured, or neither).
STAGES = ("unscale", "accumulate", "allreduce", "finite", "clip", "larc")
LAST_STAGE = "clip"
ENTRY_KEYS = ("factory", "params", "after")



def _eta_or_stddev(params):
    eta, stddev = params["eta"], params["stddev"]
    if (eta is None) == (stddev is None):
        raise ParamError(
            "eta" if eta is None else "stddev", "missing" if eta is None else "conflict",
            "needs exactly one of `eta` (the paper's annealed noise) and `stddev` (RETURNN's constant noise)",
            text="needs exactly one of `eta` (the paper's annealed noise) and `stddev` (RETURNN's constant "
            f"noise). Received: eta={eta!r}, stddev={stddev!r}",
        )


_POSITIVE = p.optional(p.number(0, low_open=True))

# The built-in transforms; `code` is the factory, "module:function" (the same form a user writes),
# called with the row's parameters checked and filled.
TRANSFORMS = Table("gradient transform", [
    Row(
        name="gradient_noise",
        summary="Gaussian noise added to every gradient: annealed (`eta`, `gamma`; Neelakantan et al. 2015) "
        "or constant (`stddev`, RETURNN's gradient_noise)",
        code="opt_train.optimizers.gradient_noise:gradient_noise",
        params={
            "eta": p.Param(None, _POSITIVE, "the variance at t = 0 of the annealed noise"),
            "gamma": p.Param(0.55, p.number(0), "the decay exponent of the variance"),
            "stddev": p.Param(None, _POSITIVE, "a constant standard deviation instead (truncated normal)"),
            "seed": p.Param(0, p.integer(), "the noise's seed"),
        },
        cross=_eta_or_stddev,
    ),
], owner="{name}", required_by="by {name}")
BUILTIN_TRANSFORMS = TRANSFORMS.column("code")

KEY = "gradient_transforms"


def position(stage):
    """The canonical place a stage name stands for (`larc` -> `clip`)."""
    return LAST_STAGE if stage == "larc" else stage


def _unknown(error, key, code="unknown_name"):
    """An `UnknownNameError` (it carries the suggestion) with the key and code it is about."""
    error.key = key
    error.code = code
    return error


def check_entry(index, entry):
    """One entry as `{factory, params, after}` with `after` filled in; raises a `ParamError` at the entry's key."""
    here = f"{KEY}[{index}]"
    if not isinstance(entry, dict):
        raise ParamError.at(
            here, "wrong_type",
            f"must be a mapping {{factory: ..., params: ..., after: ...}}. Received: {entry!r}",
        )
    for name in entry:
        if name not in ENTRY_KEYS:
            raise _unknown(
                UnknownNameError("gradient transform key", name, ENTRY_KEYS), f"{here}.{name}", "unknown_key"
            )
    if "factory" not in entry:
        raise ParamError.at(f"{here}.factory", "missing", "is required")
    factory = entry["factory"]
    if not isinstance(factory, str) and not callable(factory):
        raise ParamError.at(
            f"{here}.factory", "wrong_type",
            f"must be 'package.module:function' or a built-in name ({', '.join(BUILTIN_TRANSFORMS)}). "
            f"Received: {factory!r}",
        )
    if isinstance(factory, str):
        split_factory(factory, f"{here}.factory")
    params = entry.get("params") or {}
    if not isinstance(params, dict):
        raise ParamError.at(f"{here}.params", "wrong_type", f"must be a mapping. Received: {params!r}")
    after = entry.get("after", LAST_STAGE)
    if not isinstance(after, str) or after not in STAGES:
        raise _unknown(UnknownNameError("pipeline stage", after, STAGES), f"{here}.after")
    if isinstance(factory, str) and factory in BUILTIN_TRANSFORMS:
        _check_builtin_params(factory, params, here)
    return {"factory": factory, "params": dict(params), "after": after}


def split_factory(target, key):
    """`("module", "function")` of a factory string; a built-in name gives its module."""
    target = BUILTIN_TRANSFORMS.get(target, target)
    try:
        return usercode.split(target)
    except ValueError:
        if "." not in target and ":" not in target:
            raise _unknown(UnknownNameError("gradient transform", target, BUILTIN_TRANSFORMS), key) from None
        raise ParamError.at(
            key, "wrong_type",
            f"must be 'package.module:function' or a built-in name ({', '.join(BUILTIN_TRANSFORMS)}). "
            f"Received: {target!r}",
        ) from None


def load_factory(target, key):
    """The callable a factory string names; a `usercode.UserCodeError` at `key` when it cannot be loaded."""
    if callable(target):
        return target
    return usercode.load(":".join(split_factory(target, key)), key)


def _check_builtin_params(name, params, here):
    """A built-in's parameters, checked by its row's rules (TF-free)."""
    errors = TRANSFORMS.param_errors(name, params)[1]
    if not errors:
        return
    error = errors[0]
    if error.code == "unknown_key":
        raise _unknown(error, f"{here}.params.{error.param}", "unknown_key")
    raise _at_param(error, params, here)


def bind(function, params, here, label="factory"):
    """Checks `params` against `function`'s signature: an unknown or a missing parameter, at its key."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    accepted = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    named = [n for n, p in accepted.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for param in params:
        if param not in named and not takes_any:
            raise _unknown(
                UnknownNameError(f"{label} parameter", param, named), f"{here}.params.{param}", "unknown_key"
            )
    for param in named:
        if accepted[param].default is inspect.Parameter.empty and param not in params:
            raise ParamError.at(f"{here}.params.{param}", "missing", "is required")


def _at_param(error, params, here):
    """A factory's `ValueError` placed at the parameter it names (its `.param`), else at `params`."""
    name = getattr(error, "param", None)
    key = f"{here}.params.{name}" if name in params else f"{here}.params"
    code = getattr(error, "code", None)
    return ParamError.at(key, code if code in PARAM_CODES else "out_of_range", str(error))


def build(specs):
    """`[(stage, GradientTransform)]` from checked or raw entries (imports each factory, then calls it).

    Entries may also be `(after, transform)` pairs built in Python.
    """
    from opt_train.optimizers.transform import GradientTransform

    built = []
    for index, entry in enumerate(specs or ()):
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], GradientTransform):
            after, transform = entry
            if after not in STAGES:
                raise _unknown(UnknownNameError("pipeline stage", after, STAGES), f"{KEY}[{index}].after")
            built.append((position(after), _with_autograph(transform)))
            continue
        entry = check_entry(index, entry)
        here = f"{KEY}[{index}]"
        function = load_factory(entry["factory"], f"{here}.factory")
        params = entry["params"]
        bind(function, params, here)
        try:
            # A ValueError is the factory rejecting a parameter; anything else is a bug in it.
            transform = usercode.call(function, f"{here}.factory", passthrough=ValueError, **params)
        except ValueError as error:
            raise _at_param(error, params, here) from None
        if not isinstance(transform, GradientTransform):
            raise ParamError.at(
                f"{here}.factory", "wrong_type",
                "must return an opt_train.optimizers.GradientTransform(init, update). "
                f"Received: {type(transform).__name__}",
            )
        if entry["factory"] not in BUILTIN_TRANSFORMS:
            transform = _with_autograph(transform)
        built.append((position(entry["after"]), transform))
    return built


def _with_autograph(transform):
    """`transform` with AutoGraph applied to its `update`.

    The step is traced without AutoGraph (as Keras 3's fit traces its own); a user's
    transform keeps it, so one written with Python `if` / `for` over tensors, as
    Optax-style code may be, traces as it did when the whole step was converted.
    """
    import tensorflow as tf
    from tensorflow.python.autograph.core import ag_ctx

    # Keras 2's way to convert a layer's `call` at trace time (`tf_convert`, with the status a
    # converting tf.function sets). `tf.autograph.to_graph` fails on closures, which factories
    # return, and a nested tf.function cannot take Keras 3 variables as arguments.
    enabled = ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED)
    return transform._replace(update=tf.__internal__.autograph.tf_convert(transform.update, enabled))
