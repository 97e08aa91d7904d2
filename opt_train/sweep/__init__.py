"""Hyperparameter sweeps (`opt-train sweep`) on an Optuna study: queue trials, run each as an `opt-train train`
process, tell the study, collect results.

Importing this package imports neither TensorFlow nor Optuna; running a sweep imports
Optuna, and writing the HParams summaries imports TensorFlow.
"""

from opt_train.sweep.collect import SweepResult, study_status
from opt_train.sweep.driver import run_sweep
from opt_train.sweep.planning import TrialConfigError, dry_run_lines, plan_sweep, preview_trials
from opt_train.sweep.plan import SweepPlan, Trial, plan_queue
from opt_train.sweep.spec import SweepOptions, SweepSpec, build_spec

__all__ = [
    "SweepOptions",
    "SweepPlan",
    "SweepResult",
    "SweepSpec",
    "Trial",
    "TrialConfigError",
    "build_spec",
    "dry_run_lines",
    "plan_queue",
    "plan_sweep",
    "preview_trials",
    "run_sweep",
    "study_status",
]
