"""How a run ends early: the training layer's exceptions (TF-free, so the CLI can catch them cheaply)."""

from opt_train.errors import PRUNED_EXIT_CODE, BadUsage, TrainingFailed, signal_exit_code

__all__ = ["Interrupted", "Pruned", "RunRefused", "TrainingFailed"]


class Interrupted(RuntimeError):
    """The run was asked to stop (SIGINT, SIGTERM) and stopped at an update boundary.

    `exit_code` is the shell's code for that signal, 128 + its number.
    """

    def __init__(self, message, signal_number):
        super().__init__(message)
        self.exit_code = signal_exit_code(signal_number)


class RunRefused(BadUsage, ValueError):
    """The run cannot start as asked, and nothing was changed: exit 2, one line.

    The logdir holds another run, is busy, cannot be written, or a checkpoint given
    (or found) does not restore into this run.
    """


class Pruned(Interrupted):
    """A sweep's pruner stopped this trial at an evaluation; a checkpoint was saved there.

    `exit_code` is `PRUNED_EXIT_CODE`, so the sweep records the trial as pruned rather than failed.
    """

    def __init__(self, message):
        RuntimeError.__init__(self, message)
        self.exit_code = PRUNED_EXIT_CODE
