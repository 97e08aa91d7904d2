"""A sweep's plan: the queue of trials to hand to the Optuna study (grid points, repeats, sampled slots) and their commands.

A trial's folder is `trial-<number>-<digest>`, where the digest hashes the trial's full
resolved config (its logdir aside): the same config finds the same folder, and a
changed base config gives new trials. TF-free.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
import shlex
import sys

import yaml

# Keys of a resolved config that do not change what a trial trains.
_NOT_IDENTITY = ("logdir", "sweep")


def render(value):
    """`value` as the YAML text of a `--set` value that reads back to the same value."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf)
    # A scalar document ends with an explicit "..." end marker; a flow list or mapping does not.
    return text.removesuffix("\n").removesuffix("\n...")


def config_digest(config):
    """8 hex digits of a resolved `TrainConfig`: what the trial trains, whatever its logdir."""
    identity = {key: value for key, value in config.to_dict().items() if key not in _NOT_IDENTITY}
    payload = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:8]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One run of the sweep: its number in the study, the swept `(key, value)` pairs and its config digest."""

    number: int
    point: tuple
    digest: str = "00000000"
    repeat: int = 0
    # The folder the trial was given when it started (a retry or a resumed trial keeps it).
    folder: str | None = None

    @property
    def name(self):
        return self.folder or f"trial-{self.number:03d}-{self.digest}"

    @property
    def values(self):
        """The trial's swept values by key (`random_seed` included when repeats set it)."""
        return dict(self.point)

    def overrides(self):
        """The `--set KEY=VALUE` texts that make this trial differ from the base config."""
        return [f"{key}={render(value)}" for key, value in self.point]

    def describe(self):
        """`optimizer=Adam optimizer_params.learning_rate=0.1` (or `(base config)`)."""
        return " ".join(self.overrides()) or "(base config)"


@dataclasses.dataclass(frozen=True)
class QueueEntry:
    """One trial the study is asked to run: the values fixed in advance (grid, seed) and the repeat index."""

    fixed: tuple
    repeat: int = 0


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """What a sweep needs to run: the checked spec, the base configs and overrides, DIR, the queue.

    `base_digest` names the base config (the "generation" of the study's trials);
    `np` > 1 runs every trial as `opt-train train --np NP` (NP workers on this host, of the
    backend the config's `distributed` names: tf unless it says horovod).
    """

    spec: object
    configs: tuple
    base_overrides: tuple
    out: str
    queue: tuple = ()
    base_digest: str = ""
    np: int = 1
    # GPUs the largest trial takes (num_gpus x np): a worker starts a trial once that many are free.
    gpus_per_trial: int = 1
    resolved: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def logdir(self, trial):
        return os.path.join(self.out, trial.name)

    def trial_overrides(self, trial):
        """Base `--set`s, then the trial's, then its logdir (later ones win)."""
        return [*self.base_overrides, *trial.overrides(), f"logdir={render(self.logdir(trial))}"]

    def command(self, trial, python=None):
        """The argv that runs `trial` through the same code path as `opt-train train` (`--np NP` with np > 1)."""
        argv = [python or sys.executable, "-m", "opt_train", "train"]
        overrides = self.trial_overrides(trial)
        if self.np > 1:
            # opt-train's own launcher: a stopped trial's ranks checkpoint and it exits 143, a
            # failed one names its rank in one line, a hung rank ends after rank_timeout_secs.
            argv += ["--np", str(self.np)]
        for path in self.configs:
            argv += ["--config", path]
        for text in overrides:
            argv += ["--set", text]
        return argv

    def shell_command(self, trial):
        """`command(trial)` quoted for a POSIX shell, one line."""
        return shlex.join(self.command(trial))


TRIAL_FOLDER = re.compile(r"^trial-\d+-([0-9a-f]{8})$")


def grid_points(grid):
    """Every combination of the grid's values, the first key varying slowest, as `(key, value)` tuples."""
    keys = list(grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(grid[key] for key in keys))]


def plan_queue(spec, base_seed=0):
    """The trials the study runs, in order: each grid point `repeats` times (seeds `base_seed + r`), or,
    with ranges to sample, `trials` sampled trials per grid point.

    A point that sets `random_seed` itself repeats around that seed instead.
    """
    queue = []
    for point in grid_points(spec.grid):
        if spec.random:
            queue.extend(QueueEntry(point) for _ in range(spec.trials or 0))
        elif spec.repeats == 1:
            queue.append(QueueEntry(point))
        else:
            first_seed = int(dict(point).get("random_seed", base_seed))
            point = tuple((key, value) for key, value in point if key != "random_seed")
            queue.extend(QueueEntry(point + (("random_seed", first_seed + r),), r) for r in range(spec.repeats))
    return tuple(queue)


def check_points(spec, queue):
    """The points whose configs are checked before anything runs: every queued point, each at the
    ranges' low ends, at their high ends, and with each `choice` value."""
    if not spec.random:
        return [entry.fixed for entry in queue]
    low = {key: (d.args[0]) for key, d in spec.random.items()}
    high = {key: (d.args[-1] if d.kind == "choice" else d.args[1]) for key, d in spec.random.items()}
    variants = [low, high]
    for key, distribution in spec.random.items():
        if distribution.kind == "choice":
            variants += [{**low, key: choice} for choice in distribution.args]
    points, seen = [], set()
    fixed_points = {render(list(entry.fixed)): entry.fixed for entry in queue}
    for fixed in fixed_points.values():
        for variant in variants:
            point = fixed + tuple(variant.items())
            if render(list(point)) not in seen:
                seen.add(render(list(point)))
                points.append(point)
    return points
