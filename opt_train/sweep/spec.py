"""What to sweep: the `sweep:` YAML block and the `opt-train sweep` options merged into one checked `SweepSpec`.

The block's own rules are the config layer's (`opt_train/config/sweep_block.py`: `validate`
and `train` refuse a bad block as `sweep` does); here are the options, read with the same
rules, what needs both (draws for the ranges, the sampler against ranges and repeats, the
planned size), and whether a trial reports the metric. TF-free: the CLI builds a spec, and
reports every problem in it, before anything runs.
"""

from __future__ import annotations

import dataclasses
import functools

import yaml

from opt_train.config import ConfigError, ConfigIssue
from opt_train.config import sweep_block as rules
from opt_train.config.issues import RuleErrors
from opt_train.config.source import parse_scalar
from opt_train.config.sweep_block import DEFAULT_METRIC, Distribution
from opt_train.errors import ParamError
from opt_train.suggest import closest

__all__ = ["Distribution", "SweepOptions", "SweepSpec", "build_spec", "metric_problem", "parse_grid_option"]

# Trials one sweep may plan: past this, planning (and checking every trial's config) would
# take longer than a user waits for a first line; split the sweep or sample instead.
MAX_TRIALS = 10_000

# Where problems with `--grid` / `--random` etc. are said to come from.
GRID_OPTION = "--grid"
OPTIONS = "options"
# Metrics where smaller is better, when the user names a metric but no mode.
_SMALLER_IS_BETTER = ("loss", "perplexity", "error", "wer", "cer", "mse", "mae")


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


def _bad_grid(text):
    return ParamError(None, "wrong_type", text, text=text)


def parse_grid_option(text):
    """`"optimizer=Adam,Momentum"` -> `("optimizer", ["Adam", "Momentum"])`; values read as YAML.

    Raises `ParamError` (a ValueError) saying what is wrong; the caller files it at `--grid`.
    """
    if "=" not in text:
        raise _bad_grid("expected KEY=V1,V2,..., e.g. optimizer_params.learning_rate=0.1,0.01")
    key, raw = (part.strip() for part in text.split("=", 1))
    if not key or not all(part.strip() for part in key.split(".")):
        raise _bad_grid("expected a dotted key before '='")
    texts = split_values(raw)
    if not raw or any(not item for item in texts):
        raise _bad_grid("expected a comma-separated list of values after '=', none of them empty")
    values = []
    for item in texts:
        try:
            values.append(parse_scalar(item))
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or "invalid YAML"
            raise _bad_grid(f"the value {item!r} is not valid YAML ({problem})") from None
    return key, values


def build_spec(block, options=None, locate=None):
    """The sweep described by the config's `sweep:` `block` (a dict or None) and the command-line `options`.

    Command-line values win over the block's; `--grid` keys replace the block's grid
    values for the same key. `locate(dotted_key) -> (file, line)` places block problems
    (e.g. `TrainConfig.locate`). Raises `ConfigError` listing every problem.
    """
    options = options or SweepOptions()
    issues = _Issues(locate or (lambda key: (None, None)))
    # A config that loaded has a good block already; a block given directly is judged here the same way.
    good, errors = rules.check_block(block)
    for error in errors:
        issues.block(error.key, error.code, error.message, error.value)
    grid = dict(good.get("grid") or {})
    grid.update(_option_grids(options.grids, issues))
    random = dict(good.get("random") or {})
    trials = _choose(options.random_trials, "--random", good, "trials", issues, functools.partial(rules.count, "trials"))
    seed = _choose(options.seed, "--seed", good, "seed", issues, functools.partial(rules.count, "seed"))
    repeats = _choose(options.repeats, "--repeats", good, "repeats", issues, functools.partial(rules.count, "repeats"))
    metric = _choose(options.metric, "--metric", good, "metric", issues, rules.metric) or DEFAULT_METRIC
    mode = _choose(options.mode, "--mode", good, "mode", issues, rules.mode) or default_mode(metric)
    _check_random_count(random, trials, options, issues)
    sampler = _sampler(options.sampler, good, random, repeats, issues)
    pruner, pruner_params = _choose(options.pruner, "--pruner", good, "pruner", issues, rules.pruner) or ("none", {})
    storage = _choose(options.storage, "--storage", good, "storage", issues, rules.text)
    study = _choose(options.study, "--study", good, "study", issues, rules.text)
    planned = _count(grid) * (repeats or 1) * ((trials or 1) if random else 1)
    if planned > MAX_TRIALS:
        issues.block(
            "sweep.grid" if good.get("grid") else "sweep", "too_large",
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
    """Why no trial of the loaded `config` reports `metric` (`sweep_block.metric_problem`), or None."""
    from opt_train.data.registry import task_kind

    return rules.metric_problem(metric, task_kind(config.data, config.data_params), config.metrics)


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
        if rules.reserved(key):
            issues.option(GRID_OPTION, key, "conflict", rules.RESERVED_MESSAGE)
            continue
        grids[key] = values
    return grids


def _choose(option_value, option_name, good, key, issues, rule):
    """The command-line value, checked by the block's `rule`, when given; else the block's (already checked)."""
    if option_value is None:
        return good.get(key)
    try:
        return rule(option_value)
    except (ParamError, RuleErrors) as problem:
        for error in getattr(problem, "errors", [problem]):
            issues.option(option_name, error.param or "", error.code, error.message, error.value)
        return None


def default_mode(metric):
    """The way an eval figure improves, as early stopping reads it (Keras's rule:
    `objective_names.monitor_direction`); for other names (BLEU, WER, ...) `min` for
    losses, errors and perplexities, `max` for anything else."""
    from opt_train.data.objective_names import monitor_direction

    name = metric.rsplit("/", 1)[-1].lower()
    try:
        return monitor_direction(name)
    except ValueError:
        return "min" if any(word in name for word in _SMALLER_IS_BETTER) else "max"


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


def _sampler(option_value, good, random, repeats, issues):
    """The sampler's name: `grid` for a plain grid, `tpe` when there are ranges to draw from."""
    default = "tpe" if random else "grid"
    name = _choose(option_value, "--sampler", good, "sampler", issues, rules.sampler)
    if name is None:
        if option_value is not None or "sampler" in good:
            return default  # a bad name, reported already
        name = default
    if option_value is not None:
        def report(code, message):
            issues.option("--sampler", "", code, message, name)
    else:
        def report(code, message):
            issues.block("sweep.sampler", code, message, name)
    if name == "grid" and random:
        report("conflict", "the grid sampler cannot draw from sweep.random ranges; use random, tpe, cmaes or qmc")
    if name != "grid" and random and (repeats or 1) > 1:
        report("conflict", "repeats need a grid: a sampler proposes each point once; raise sweep.trials instead")
    return name
