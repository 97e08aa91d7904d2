"""How a run ends early: the training layer's exceptions (TF-free, so the CLI can catch them cheaply)."""

from opt_train.errors import PRUNED_EXIT_CODE, Interrupted, TrainingFailed

__all__ = ["Interrupted", "Pruned", "RunRefused", "TrainingFailed"]


class RunRefused(ValueError):
    """The run cannot start as asked, and nothing was changed: exit 2, one line.

    The logdir holds another run, is busy, cannot be written, or a checkpoint given
    (or found) does not restore into this run.
    """


class Pruned(Interrupted):
    """A sweep's pruner stopped this trial at an evaluation; a checkpoint was saved there.

    `exit_code` is 3, so the sweep records the trial as pruned rather than failed.
    """

    def __init__(self, message):
        RuntimeError.__init__(self, message)
        self.exit_code = PRUNED_EXIT_CODE
