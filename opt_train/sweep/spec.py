"""What to sweep: the `sweep:` YAML block and the `opt-train sweep` options merged into one checked `SweepSpec`.

TF-free: the CLI builds a spec, and reports every problem in it, before anything runs.
"""

from __future__ import annotations

import dataclasses

import yaml

from opt_train import params as p
from opt_train.config import ConfigError, ConfigIssue
from opt_train.config.source import parse_scalar
from opt_train.errors import ParamError
from opt_train.suggest import UnknownNameError, closest
from opt_train.trial import PRUNERS

# Trials one sweep may plan: past this, planning (and checking every trial's config) would
# take longer than a user waits for a first line; split the sweep or sample instead.
MAX_TRIALS = 10_000
# The figures of final_metrics.json besides the evaluation's.
RUN_FIGURES = ("train/loss", "global_step", "skipped_steps")
# What each task kind's evaluation reports (opt_train.data.task.Task.make_metrics / finalize).
EVAL_FIGURES = {
    "classification": ("loss", "accuracy"),
    "sequence": ("loss", "accuracy", "perplexity"),
    "regression": ("loss", "mse", "mae"),
}

# Where problems with `--grid` / `--random` etc. are said to come from.
GRID_OPTION = "--grid"
OPTIONS = "options"

BLOCK_KEYS = ("grid", "random", "trials", "seed", "metric", "mode", "repeats", "sampler", "pruner", "storage", "study")
# Optuna's samplers and pruners by the names users write (opt_train/sweep/study.py maps them).
SAMPLERS = ("grid", "random", "tpe", "cmaes", "qmc")
DISTRIBUTIONS = ("log_uniform", "uniform", "int_uniform", "choice")
MODES = ("min", "max")
# Keys the sweep sets itself for every trial, so they cannot be swept.
RESERVED_KEYS = ("logdir", "sweep")
DEFAULT_METRIC = "eval/loss"
# Metrics where smaller is better, when the user names a metric but no mode.
_SMALLER_IS_BETTER = ("loss", "perplexity", "error", "wer", "cer", "mse", "mae")


@dataclasses.dataclass(frozen=True)
class Distribution:
    """One `random:` range: `kind` is one of DISTRIBUTIONS; `args` its bounds or choices."""

    kind: str
    args: tuple


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A checked sweep: grid values per key, random ranges, how many draws, repeats and the ranking metric."""

    grid: dict = dataclasses.field(default_factory=dict)
    random: dict = dataclasses.field(default_factory=dict)
    trials: int | None = None
    seed: int = 0
    metric: str = DEFAULT_METRIC
    mode: str = "min"
    repeats: int = 1
    sampler: str = "grid"
    pruner: str = "none"
    pruner_params: dict = dataclasses.field(default_factory=dict)
    storage: str | None = None
    study: str | None = None

    @property
    def swept_keys(self):
        """The config keys that differ between trials, grid keys first."""
        return list(self.grid) + [key for key in self.random if key not in self.grid]


@dataclasses.dataclass(frozen=True)
class SweepOptions:
    """What the command line said; None means "not given, use the YAML block or the default"."""

    grids: tuple = ()
    random_trials: int | None = None
    seed: int | None = None
    repeats: int | None = None
    metric: str | None = None
    mode: str | None = None
    sampler: str | None = None
    pruner: str | None = None
    storage: str | None = None
    study: str | None = None


class _Issues:
    """Collects problems so the user sees all of them at once: the config layer's `ConfigIssue`s."""

    def __init__(self, locate):
        self.locate = locate
        self.found = []

    def block(self, key, code, message, value=None):
        file, line = self.locate(key)
        self.found.append(ConfigIssue(file, line, key, code, message, value))

    def option(self, where, key, code, message, value=None):
        self.found.append(ConfigIssue(where, 0, key, code, message, value))

    def error(self, key, error, option=None):
        """A rule's `ParamError`, at block `key` or, from the command line, at `option`."""
        if option is None:
            self.block(key, error.code, error.message, error.value)
        else:
            self.option(option, "", error.code, error.message, error.value)


def split_values(text):
    """`"0.1,[64, 32],'a,b'"` -> `["0.1", "[64, 32]", "'a,b'"]`: commas inside brackets or quotes stay."""
    parts, depth, quote, current = [], 0, None, []
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    parts.append("".join(current).strip())
    return parts


def parse_grid_option(text):
    """`"optimizer=Adam,Momentum"` -> `("optimizer", ["Adam", "Momentum"])`; values read as YAML.

    Raises `ValueError` saying what is wrong.
    """
    if "=" not in text:
        raise ValueError("expected KEY=V1,V2,..., e.g. optimizer_params.learning_rate=0.1,0.01")
    key, raw = (part.strip() for part in text.split("=", 1))
    if not key or not all(part.strip() for part in key.split(".")):
        raise ValueError("expected a dotted key before '='")
    texts = split_values(raw)
    if not raw or any(not item for item in texts):
        raise ValueError("expected a comma-separated list of values after '=', none of them empty")
    values = []
    for item in texts:
        try:
            values.append(parse_scalar(item))
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or "invalid YAML"
            raise ValueError(f"the value {item!r} is not valid YAML ({problem})") from None
    return key, values


def build_spec(block, options=None, locate=None):
    """The sweep described by the config's `sweep:` `block` (a dict or None) and the command-line `options`.

    Command-line values win over the block's; `--grid` keys replace the block's grid
    values for the same key. `locate(dotted_key) -> (file, line)` places block problems
    (e.g. `TrainConfig.locate`). Raises `ConfigError` listing every problem.
    """
    options = options or SweepOptions()
    issues = _Issues(locate or (lambda key: (None, None)))
    block = _known_block(block or {}, issues)
    grid = _block_grid(block.get("grid"), issues)
    grid.update(_option_grids(options.grids, issues))
    random = _block_random(block.get("random"), issues)
    trials = _pick(options.random_trials, "--random", block, "trials", issues, minimum=1)
    seed = _pick(options.seed, "--seed", block, "seed", issues, minimum=None)
    repeats = _pick(options.repeats, "--repeats", block, "repeats", issues, minimum=1)
    metric = _metric(options.metric, block, issues)
    mode = _mode(options.mode, block, metric, issues)
    _check_reserved(list(grid) + list(random), issues)
    _check_random_count(random, trials, options, issues)
    sampler = _sampler(options.sampler, block, random, repeats, issues)
    pruner, pruner_params = _pruner(options.pruner, block, issues)
    storage = _text(options.storage, "--storage", block, "storage", issues)
    study = _text(options.study, "--study", block, "study", issues)
    planned = _count(grid) * (repeats or 1) * ((trials or 1) if random else 1)
    if planned > MAX_TRIALS:
        issues.block(
            "sweep.grid" if block.get("grid") else "sweep", "too_large",
            f"plans {planned:,} trials, more than {MAX_TRIALS:,}; split the sweep, or sample ranges "
            "(sweep.random) for a number of trials",
        )
    if not grid and not random and (repeats or 1) == 1 and not issues.found:
        issues.option(
            OPTIONS, "", "missing",
            "nothing to sweep: give --grid KEY=V1,V2, ranges in the config's sweep block, or --repeats",
        )
    if issues.found:
        raise ConfigError(issues.found)
    return SweepSpec(
        grid=grid, random=random, trials=trials, seed=seed or 0, metric=metric,
        mode=mode, repeats=repeats or 1, sampler=sampler, pruner=pruner, pruner_params=pruner_params,
        storage=storage, study=study,
    )


def _count(grid):
    count = 1
    for values in grid.values():
        count *= len(values)
    return count


def metric_problem(metric, config):
    """Why no trial of `config` can report `metric` (a did-you-mean), or None."""
    from opt_train.data.objective_names import resolve_metric
    from opt_train.data.registry import task_kind

    kind = task_kind(config.data, config.data_params)
    names = [*EVAL_FIGURES.get(kind, ()), *(resolve_metric(name) for name in getattr(config, "metrics", ()))]
    known = [*RUN_FIGURES, *(f"eval/{name}" for name in names)]
    if metric in known:
        return None
    hint = closest(metric, known)
    return (f"no trial reports {metric!r}; " + (f"did you mean '{hint}'?" if hint else "")
            + f" ({kind} runs report {', '.join(known)})")


def _known_block(block, issues):
    if not isinstance(block, dict):
        issues.block("sweep", "wrong_type", "must be a mapping", block)
        return {}
    for error in p.unknown_keys(BLOCK_KEYS, block, "sweep", key_kind="sweep key"):
        issues.error(f"sweep.{error.param}", error)
    return {key: value for key, value in block.items() if key in BLOCK_KEYS}


def _block_grid(grid, issues):
    if grid is None:
        return {}
    if not isinstance(grid, dict):
        issues.block("sweep.grid", "wrong_type", "must map dotted config keys to lists of values", grid)
        return {}
    checked = {}
    for key, values in grid.items():
        where = f"sweep.grid.{key}"
        if not isinstance(values, list):
            issues.block(where, "wrong_type", "must be a list of values", values)
        elif not values:
            issues.block(where, "out_of_range", "must list at least one value")
        else:
            checked[str(key)] = list(values)
    return checked


def _option_grids(texts, issues):
    grids = {}
    for text in texts:
        try:
            key, values = parse_grid_option(text)
        except ValueError as error:
            issues.option(GRID_OPTION, "", "bad_override", str(error), text)
            continue
        if key in grids:
            issues.option(GRID_OPTION, key, "conflict", "given twice; list all its values in one --grid", text)
            continue
        grids[key] = values
    return grids


def _block_random(ranges, issues):
    if ranges is None:
        return {}
    if not isinstance(ranges, dict):
        issues.block("sweep.random", "wrong_type", "must map dotted config keys to ranges", ranges)
        return {}
    checked = {}
    for key, spec in ranges.items():
        where = f"sweep.random.{key}"
        try:
            checked[str(key)] = parse_distribution(spec)
        except ParamError as error:
            issues.block(where, error.code, error.message, spec)
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


def _pick(option_value, option_name, block, key, issues, minimum):
    """The command-line value when given, else the block's; checked to be an integer >= minimum."""
    if option_value is not None:
        value, option = option_value, option_name
    elif key in block:
        value, option = block[key], None
    else:
        return None
    try:
        return p.integer(minimum, whole_floats=False)(key, value)
    except ParamError as error:
        issues.error(f"sweep.{key}", error, option)
        return None


def _metric(option_value, block, issues):
    metric = option_value if option_value is not None else block.get("metric", DEFAULT_METRIC)
    if not isinstance(metric, str) or not metric.strip():
        issues.block("sweep.metric", "wrong_type", "must name a metric such as eval/accuracy", metric)
        return DEFAULT_METRIC
    return metric.strip()


def default_mode(metric):
    """`min` for losses, errors and perplexities, `max` for anything else (accuracy, BLEU, ...)."""
    name = metric.rsplit("/", 1)[-1].lower()
    return "min" if any(word in name for word in _SMALLER_IS_BETTER) else "max"


def _mode(option_value, block, metric, issues):
    mode = option_value if option_value is not None else block.get("mode")
    if mode is None:
        return default_mode(metric)
    if mode not in MODES:
        issues.block("sweep.mode", "out_of_range", "must be min or max", mode)
        return default_mode(metric)
    return mode


def _check_reserved(keys, issues):
    for key in keys:
        if key.split(".")[0] in RESERVED_KEYS:
            message = "is set by the sweep for every trial and cannot be swept"
            issues.option(GRID_OPTION, key, "conflict", message)


def _check_random_count(random, trials, options, issues):
    if random and trials is None:
        issues.block("sweep.random", "missing", "needs a number of draws: set sweep.trials or give --random N")
    if not random and trials is not None:
        message = (
            "needs ranges to draw from in the config's sweep.random block, "
            "e.g. optimizer_params.learning_rate: {log_uniform: [1e-4, 1e-1]}"
        )
        if options.random_trials is not None:
            issues.option("--random", "", "missing", message, trials)
        else:
            issues.block("sweep.trials", "missing", message, trials)


def _sampler(option_value, block, random, repeats, issues):
    """The sampler's name: `grid` for a plain grid, `tpe` when there are ranges to draw from."""
    name = option_value if option_value is not None else block.get("sampler")
    where = "--sampler" if option_value is not None else "sweep.sampler"
    report = issues.option if option_value is not None else None
    default = "tpe" if random else "grid"
    if name is None:
        name = default
    elif name not in SAMPLERS:
        hint = closest(str(name), SAMPLERS)
        message = f"unknown sampler; did you mean '{hint}'?" if hint else f"unknown sampler (valid: {', '.join(SAMPLERS)})"
        _report(issues, report, where, "unknown_name", message, name)
        return default
    if name == "grid" and random:
        _report(issues, report, where, "conflict", "the grid sampler cannot draw from sweep.random ranges; use random, tpe, cmaes or qmc", name)
    if name != "grid" and random and (repeats or 1) > 1:
        _report(issues, report, where, "conflict", "repeats need a grid: a sampler proposes each point once; raise sweep.trials instead", name)
    return name


def _pruner(option_value, block, issues):
    """`(name, keyword arguments)` from `--pruner NAME` or `pruner: NAME` / `pruner: {NAME: {arg: value}}`."""
    spec = option_value if option_value is not None else block.get("pruner", "none")
    where = "--pruner" if option_value is not None else "sweep.pruner"
    report = issues.option if option_value is not None else None
    params = {}
    if isinstance(spec, dict) and len(spec) == 1:
        (spec, params), = spec.items()
        params = {} if params is None else params
    if not isinstance(spec, str) or not isinstance(params, dict):
        _report(issues, report, where, "wrong_type", "must be a pruner name or {name: {argument: value}}", spec)
        return "none", {}
    if spec not in PRUNERS:
        hint = closest(spec, PRUNERS)
        message = f"unknown pruner; did you mean '{hint}'?" if hint else f"unknown pruner (valid: {', '.join(PRUNERS)})"
        _report(issues, report, where, "unknown_name", message, spec)
        return "none", {}
    for key, value in params.items():
        accepted = PRUNERS[spec][1]
        if key not in accepted:
            hint = closest(str(key), accepted)
            suffix = f"; did you mean '{hint}'?" if hint else f" (valid: {', '.join(accepted) or 'none'})"
            _report(issues, report, f"{where}.{spec}.{key}", "unknown_key", f"unknown argument of the {spec} pruner{suffix}", value)
        elif not (isinstance(value, int) and not isinstance(value, bool) and value >= 0) and value != "auto":
            _report(issues, report, f"{where}.{spec}.{key}", "wrong_type", "must be an integer >= 0", value)
    return spec, dict(params)


def _text(option_value, option_name, block, key, issues):
    value = option_value if option_value is not None else block.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        report = issues.option if option_value is not None else None
        _report(issues, report, option_name if option_value is not None else f"sweep.{key}", "wrong_type", "must be a non-empty string", value)
        return None
    return value.strip() if value else None


def _report(issues, option_report, where, code, message, value):
    """A problem with a command-line option (`option_report`) or with the block key `where`."""
    if option_report is not None:
        option_report(where.split(".")[0], ".".join(where.split(".")[1:]), code, message, value)
    else:
        issues.block(where, code, message, value)
