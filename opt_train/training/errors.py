"""How a run ends early: the training layer's exceptions, and how their lines list names (TF-free, so the CLI can catch them cheaply)."""

from opt_train.errors import PRUNED_EXIT_CODE, Interrupted, RunRefused, TrainingFailed

__all__ = ["Interrupted", "Pruned", "RunRefused", "TrainingFailed", "listed"]

# How many names one line shows before "and N more".
SHOWN_NAMES = 5


def listed(names):
    """`names` for one line: the first `SHOWN_NAMES`, comma-separated, then "and N more"; "" for none."""
    names = list(names)
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")


class Pruned(Interrupted):
    """A sweep's pruner stopped this trial at an evaluation; a checkpoint was saved there.

    `exit_code` is `PRUNED_EXIT_CODE`, so the sweep records the trial as pruned rather than failed.
    """

    def __init__(self, message):
        RuntimeError.__init__(self, message)
        self.exit_code = PRUNED_EXIT_CODE
