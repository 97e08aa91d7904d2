"""How a run ends early: the training layer's exceptions (TF-free, so the CLI can catch them cheaply)."""

from opt_train.errors import PRUNED_EXIT_CODE, Interrupted, RunRefused, TrainingFailed

__all__ = ["Interrupted", "Pruned", "RunRefused", "TrainingFailed"]


class Pruned(Interrupted):
    """A sweep's pruner stopped this trial at an evaluation; a checkpoint was saved there.

    `exit_code` is `PRUNED_EXIT_CODE`, so the sweep records the trial as pruned rather than failed.
    """

    def __init__(self, message):
        RuntimeError.__init__(self, message)
        self.exit_code = PRUNED_EXIT_CODE
