"""A sweep trial's link to its Optuna study: reports the metric at each evaluation and says when the pruner stops it.

The sweep driver starts each trial with `OPT_TRAIN_SWEEP_TRIAL` in its environment
(`opt_train/trial.py`, the contract both ends read: storage URL, study name, trial id,
metric, pruner); outside a sweep nothing here is used and Optuna is never imported.
"""

from __future__ import annotations

import math

from opt_train.trial import description, make_pruner


def trial_link(environ=None):
    """The `TrialLink` the environment describes, or None when this run is not a sweep trial with a pruner."""
    described = description(environ)
    if described is None or described.get("pruner", "none") == "none":
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
