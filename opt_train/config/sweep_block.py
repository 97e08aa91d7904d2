"""The rules of the `sweep:` block (TF-free): its keys, grid, random ranges, counts, metric, mode, sampler, pruner,
storage and study, each problem at its full key (`sweep.grid.logdir`) so `validate`, `train` and `sweep` refuse it
alike, at its file and line.

The same value rules judge the `opt-train sweep` options (`opt_train/sweep/spec.py`), which
may complete the block (`--random N` gives the draws its ranges need): rules that need both
sides live there.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from opt_train import params as p
from opt_train.config.issues import RuleErrors, below
from opt_train.errors import ParamError
from opt_train.registry import Row, Table
from opt_train.suggest import UnknownNameError, closest
from opt_train.trial import PRUNERS

BLOCK_KEYS = ("grid", "random", "trials", "seed", "metric", "mode", "repeats", "sampler", "pruner", "storage", "study",
              "gpus", "heartbeat_secs", "max_trial_retries")
# Optuna's samplers by the names users write: `code` is the class `opt_train/sweep/study.py` seeds
# (pruners: opt_train/trial.py).
SAMPLER_TABLE = Table("sampler", [
    # Every grid point is queued with all its values fixed (enqueue_trial), so the sampler
    # proposes nothing. Optuna's GridSampler is not used: it picks points at random when
    # workers race and fails on queued trials, which carry no grid id.
    Row(name="grid", summary="every point of sweep.grid, in order (queued; the default without ranges)",
        code="optuna.samplers:RandomSampler"),
    Row(name="random", summary="independent uniform draws from sweep.random's ranges",
        code="optuna.samplers:RandomSampler"),
    Row(name="tpe", summary="Optuna's tree-structured Parzen estimator (the default with ranges)",
        code="optuna.samplers:TPESampler"),
    Row(name="cmaes", summary="Optuna's CMA-ES over the numeric ranges", code="optuna.samplers:CmaEsSampler"),
    Row(name="qmc", summary="a scrambled quasi-Monte Carlo (Sobol) sequence over the ranges",
        code="optuna.samplers:QMCSampler"),
])
SAMPLERS = tuple(SAMPLER_TABLE.rows)
DISTRIBUTIONS = ("log_uniform", "uniform", "int_uniform", "choice")
MODES = ("min", "max")
# Keys the sweep sets itself for every trial, so they cannot be swept.
RESERVED_KEYS = ("logdir", "sweep")
DEFAULT_METRIC = "eval/loss"
# The figures of a trial's final_metrics.json besides its evaluation's (`eval/<name>`, `eval_metric_names`).
RUN_FIGURES = ("train/loss", "global_step", "skipped_steps")
# The worker's own settings, the block's or `--heartbeat-secs` / `--max-trial-retries`: seconds between a
# worker's heartbeats for its running trials, and how often a trial whose worker fell silent is queued again.
HEARTBEAT_SECONDS = 60
MAX_TRIAL_RETRIES = 2
# The integer keys and their smallest value (None: any integer).
COUNTS = {"trials": 1, "seed": None, "repeats": 1, "heartbeat_secs": 1, "max_trial_retries": 0}
# A GPU's index, or a GPU's or MIG instance's UUID as nvidia-smi -L prints it.
GPU_NAME = re.compile(r"^(\d+|(GPU|MIG)-[0-9A-Za-z-]+)$")
RESERVED_MESSAGE = "is set by the sweep for every trial and cannot be swept"


@dataclasses.dataclass(frozen=True)
class Distribution:
    """One `random:` range: `kind` is one of DISTRIBUTIONS; `args` its bounds or choices."""

    kind: str
    args: tuple


def sweep_block(name, value):
    """The config layer's rule for the `sweep` key: the block as given, or `RuleErrors` at each bad key."""
    if value is None:
        return None
    _, errors = check_block(value)
    if errors:
        raise RuleErrors(errors)
    return value


def check_block(block):
    """`(good, errors)`: the block's values that pass their rules (grid `{key: list}`, random
    `{key: Distribution}`, pruner `(name, params)`, the rest as given) and a `ParamError` at its full key
    for every problem."""
    errors = []
    if block is None:
        return {}, errors
    if not isinstance(block, dict):
        return {}, [ParamError.at("sweep", "wrong_type", "must be a mapping", block)]
    for error in p.unknown_keys(BLOCK_KEYS, block, "sweep", key_kind="sweep key"):
        error.key = f"sweep.{error.param}"
        errors.append(error)
    good = {}
    if block.get("grid") is not None:
        good["grid"] = _grid(block["grid"], errors)
    if block.get("random") is not None:
        good["random"] = _random(block["random"], errors)
    rules = {**{key: functools.partial(count, key) for key in COUNTS},
             "metric": metric, "mode": mode, "sampler": sampler, "pruner": pruner, "storage": text, "study": text,
             "gpus": gpus}
    for key, rule in rules.items():
        if key not in block:
            continue
        try:
            good[key] = rule(block[key])
        except (ParamError, RuleErrors) as problem:
            for error in getattr(problem, "errors", [problem]):
                error.key = error.key or below(f"sweep.{key}", error.param)
                errors.append(error)
    return good, errors


def reserved(key):
    """True when the sweep sets `key` itself (`logdir`, `sweep...`)."""
    return str(key).split(".")[0] in RESERVED_KEYS


def _grid(grid, errors):
    if not isinstance(grid, dict):
        errors.append(ParamError.at("sweep.grid", "wrong_type", "must map dotted config keys to lists of values", grid))
        return {}
    checked = {}
    for key, values in grid.items():
        where = f"sweep.grid.{key}"
        if reserved(key):
            errors.append(ParamError.at(where, "conflict", RESERVED_MESSAGE))
        elif not isinstance(values, list):
            errors.append(ParamError.at(where, "wrong_type", "must be a list of values", values))
        elif not values:
            errors.append(ParamError.at(where, "out_of_range", "must list at least one value"))
        else:
            checked[str(key)] = list(values)
    return checked


def _random(ranges, errors):
    if not isinstance(ranges, dict):
        errors.append(ParamError.at("sweep.random", "wrong_type", "must map dotted config keys to ranges", ranges))
        return {}
    checked = {}
    for key, spec in ranges.items():
        where = f"sweep.random.{key}"
        if reserved(key):
            errors.append(ParamError.at(where, "conflict", RESERVED_MESSAGE))
            continue
        try:
            checked[str(key)] = parse_distribution(spec)
        except ParamError as error:
            errors.append(ParamError.at(where, error.code, error.message, spec))
    return checked


def parse_distribution(spec):
    """`{"log_uniform": [1e-4, 1e-1]}` -> `Distribution("log_uniform", (1e-4, 1e-1))`. Raises `ParamError`."""
    shapes = ", ".join(f"{{{name}: [...]}}" for name in DISTRIBUTIONS)
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ParamError(None, "wrong_type", f"must be one of {shapes}", spec)
    (kind, args), = spec.items()
    if kind not in DISTRIBUTIONS:
        error = UnknownNameError("range", kind, DISTRIBUTIONS)
        raise ParamError(kind, "out_of_range", str(error), args)
    if not isinstance(args, list):
        raise ParamError(kind, "out_of_range", f"`{kind}` must be a list", args)
    if kind == "choice":
        if not args:
            raise ParamError(kind, "out_of_range", "`choice` must list at least one value", args)
        return Distribution(kind, tuple(args))
    return Distribution(kind, _bounds(kind, args))


def _bounds(kind, args):
    def bad(rule):
        raise ParamError(kind, "out_of_range", f"`{kind}` {rule}", args,
                         text=f"`{kind}` {rule}. Received: {kind}={args}")

    numeric = len(args) == 2 and all(p.is_number(arg) for arg in args)
    if not numeric:
        bad("must be [low, high] with two finite numbers")
    low, high = args
    if low > high:
        bad("must have low <= high")
    if kind == "log_uniform" and low <= 0:
        bad("bounds must be > 0")
    if kind == "int_uniform" and not all(isinstance(arg, int) for arg in args):
        bad("bounds must be integers")
    return (low, high)


# -- value rules, for the block and the command-line options alike: each raises a ParamError --------


def count(key, value):
    """`trials`, `seed` or `repeats`: an integer, at least its minimum."""
    try:
        return p.integer(COUNTS[key], whole_floats=False)(key, value)
    except ParamError as error:
        error.param = None  # filed at the key itself (`sweep.trials`), not below it
        raise


def gpus(value):
    """`[0, 1]` or `"0,1"` -> `("0", "1")`: the GPUs a sweep worker gives its trials, indices or UUIDs, each once."""
    if isinstance(value, (list, tuple)):
        names = tuple("" if isinstance(item, bool) or item is None else str(item).strip() for item in value)
    else:
        names = tuple(part.strip() for part in str(value).split(","))
    if not names or not all(names):
        raise ParamError(None, "wrong_type", "is empty or has an empty entry; give GPU indices or UUIDs, e.g. 0,1,2,3",
                         value)
    bad = [name for name in names if not GPU_NAME.match(name)]
    if bad:
        raise ParamError(None, "wrong_type", f"{bad[0]!r} is not a GPU index or UUID (e.g. 0,1,2,3 or GPU-5f3c...)",
                         value)
    if len(set(names)) < len(names):
        raise ParamError(None, "conflict", "names a GPU twice; each GPU is given to one trial at a time", value)
    return names


def worker_settings(block, gpus_option=None, heartbeat_secs=None, max_trial_retries=None):
    """`(gpus, heartbeat_secs, max_trial_retries)` of a sweep worker: each the command line's when given, else the
    (checked) `block`'s, else the default (`gpus` None: found on the machine, `opt_train.sweep.devices.find_gpus`).
    `gpus` is `(names, where)`, `where` naming the option or key they came from, or None."""
    block = block or {}
    if gpus_option is not None:
        found = (gpus_option, "--gpus")
    elif block.get("gpus") is not None:
        found = (",".join(gpus(block["gpus"])), "sweep.gpus")
    else:
        found = None
    return (found,
            heartbeat_secs if heartbeat_secs is not None else block.get("heartbeat_secs", HEARTBEAT_SECONDS),
            max_trial_retries if max_trial_retries is not None else block.get("max_trial_retries", MAX_TRIAL_RETRIES))


def metric(value):
    if not isinstance(value, str) or not value.strip():
        raise ParamError(None, "wrong_type", "must name a metric such as eval/accuracy", value)
    return value.strip()


def metric_problem(metric, kind, metric_names=()):
    """Why no trial of a `kind` task with `metrics: metric_names` (registry names) reports `metric`
    (a did-you-mean), or None. The eval figures are the run's own (`opt_train.data.task.eval_metric_names`)."""
    from opt_train.data.task import eval_metric_names

    known = [*RUN_FIGURES, *(f"eval/{name}" for name in eval_metric_names(kind, metric_names))]
    if metric in known:
        return None
    hint = closest(metric, known)
    return (f"no trial reports {metric!r}; " + (f"did you mean '{hint}'?" if hint else "")
            + f" ({kind} runs report {', '.join(known)})")


def mode(value):
    if value not in MODES:
        raise ParamError(None, "out_of_range", "must be min or max", value)
    return value


def sampler(value):
    if value not in SAMPLERS:
        hint = closest(str(value), SAMPLERS)
        message = f"unknown sampler; did you mean '{hint}'?" if hint else f"unknown sampler (valid: {', '.join(SAMPLERS)})"
        raise ParamError(None, "unknown_name", message, value)
    return value


def pruner(spec):
    """`(name, keyword arguments)` from `NAME` or `{NAME: {argument: value}}`; `RuleErrors` lists every problem,
    each below the key by `NAME.argument`."""
    params = {}
    if isinstance(spec, dict) and len(spec) == 1:
        (spec, params), = spec.items()
        params = {} if params is None else params
    if not isinstance(spec, str) or not isinstance(params, dict):
        raise ParamError(None, "wrong_type", "must be a pruner name or {name: {argument: value}}", spec)
    if spec not in PRUNERS:
        hint = closest(spec, PRUNERS)
        message = f"unknown pruner; did you mean '{hint}'?" if hint else f"unknown pruner (valid: {', '.join(PRUNERS)})"
        raise ParamError(None, "unknown_name", message, spec)
    spec = PRUNERS.resolve(spec)
    accepted = tuple(PRUNERS[spec].params)
    errors = []
    for error in PRUNERS.param_errors(spec, params)[1]:
        key = error.param
        if error.code == "unknown_key":
            hint = closest(str(key), accepted)
            suffix = f"; did you mean '{hint}'?" if hint else f" (valid: {', '.join(accepted) or 'none'})"
            error = ParamError(key, "unknown_key", f"unknown argument of the {spec} pruner{suffix}", params[key])
        error.param = f"{spec}.{key}"
        errors.append(error)
    if errors:
        raise RuleErrors(errors)
    return spec, dict(params)


def text(value):
    """`storage`, `study`: a non-empty string (stripped)."""
    if not isinstance(value, str) or not value.strip():
        raise ParamError(None, "wrong_type", "must be a non-empty string", value)
    return value.strip()
