"""A sweep trial's link to its Optuna study: reports the metric at each evaluation and says when the pruner stops it.

The sweep driver starts each trial with `OPT_TRAIN_SWEEP_TRIAL` in its environment
(JSON: storage URL, study name, trial id, metric, pruner); outside a sweep nothing
here is used and Optuna is never imported.
"""

from __future__ import annotations

import json
import math
import os

ENVIRONMENT_VARIABLE = "OPT_TRAIN_SWEEP_TRIAL"
# The exit code of a trial its pruner stopped (0 done, 1 failed, 2 bad config).
PRUNED_EXIT_CODE = 3


def make_pruner(name, params=None):
    """Optuna's pruner for the sweep's pruner `name` (none, median, asha, hyperband) with its keyword `params`."""
    import optuna

    classes = {
        "none": optuna.pruners.NopPruner,
        "median": optuna.pruners.MedianPruner,
        "asha": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
    }
    return classes[name](**(params or {}))


def trial_link(environ=None):
    """The `TrialLink` the environment describes, or None when this run is not a sweep trial with a pruner."""
    text = (os.environ if environ is None else environ).get(ENVIRONMENT_VARIABLE)
    if not text:
        return None
    described = json.loads(text)
    if described.get("pruner", "none") == "none":
        return None
    return TrialLink(**described)


class TrialLink:
    """Reports `metric` to Optuna trial `trial_id` of `study` in `storage`; `should_stop` asks its pruner."""

    def __init__(self, storage, study, trial_id, metric, pruner="none", pruner_params=None):
        self.storage, self.study_name, self.trial_id = storage, study, trial_id
        self.metric, self.pruner, self.pruner_params = metric, pruner, pruner_params or {}
        self._trial = None

    def _optuna_trial(self):
        if self._trial is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            # SQLite: wait for the driver's writes instead of failing after SQLite's default 5 s.
            engine = {"connect_args": {"timeout": 60}} if self.storage.startswith("sqlite:") else None
            study = optuna.load_study(
                study_name=self.study_name,
                storage=optuna.storages.RDBStorage(self.storage, engine_kwargs=engine),
                # Only the pruner matters here; the driver's sampler proposes the values.
                sampler=optuna.samplers.RandomSampler(),
                pruner=make_pruner(self.pruner, self.pruner_params),
            )
            self._trial = optuna.trial.Trial(study, self.trial_id)
        return self._trial

    def should_stop(self, step, figures):
        """Reports `figures[metric]` at `step`; True when the pruner says this trial is losing."""
        value = figures.get(self.metric)
        if not isinstance(value, (int, float)) or math.isnan(value):
            return False
        trial = self._optuna_trial()
        trial.report(float(value), int(step))
        return bool(trial.should_prune())
