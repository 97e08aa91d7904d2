"""The trial's link to its study (opt_train/training/pruning.py) on a real SQLite Optuna study."""

import json

import optuna

from opt_train.training.pruning import TrialLink, trial_link
from opt_train.trial import ENVIRONMENT_VARIABLE, make_pruner


def test_no_link_outside_a_sweep_or_without_a_pruner():
    assert trial_link({}) is None
    described = {"storage": "sqlite://", "study": "s", "trial_id": 0, "metric": "eval/accuracy", "pruner": "none"}
    assert trial_link({ENVIRONMENT_VARIABLE: json.dumps(described)}) is None
    described["pruner"] = "median"
    assert isinstance(trial_link({ENVIRONMENT_VARIABLE: json.dumps(described)}), TrialLink)


def test_the_link_reports_to_the_study_and_asks_its_pruner(tmp_path):
    url = f"sqlite:///{tmp_path}/study.db"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize",
                                pruner=make_pruner("median", {"n_startup_trials": 1}))
    good = study.ask()
    good.report(0.9, 10)
    study.tell(good, 0.9)
    trial = study.ask()
    link = TrialLink(url, "s", trial._trial_id, "eval/accuracy", "median", {"n_startup_trials": 1})
    assert link.should_stop(10, {"eval/accuracy": 0.1}) is True
    assert link.should_stop(20, {"eval/accuracy": float("nan")}) is False  # NaN is not reported
    reported = optuna.load_study(study_name="s", storage=url).trials[1].intermediate_values
    assert reported == {10: 0.1}
    # The same decision Optuna's own pruner makes for that trial.
    assert bool(optuna.pruners.MedianPruner(n_startup_trials=1).prune(study, study.trials[1])) is True
