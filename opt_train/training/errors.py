"""How a run ends early: the training layer's exceptions (TF-free, so the CLI can catch them cheaply)."""


class TrainingFailed(RuntimeError):
    """The run started but cannot go on: diverged, too many overflows, a rank died."""


class Interrupted(RuntimeError):
    """The run was asked to stop (SIGINT, SIGTERM) and stopped at an update boundary.

    `exit_code` is the shell's code for that signal, 128 + its number.
    """

    def __init__(self, message, signal_number):
        super().__init__(message)
        self.exit_code = 128 + signal_number


class RunRefused(ValueError):
    """The run cannot start as asked, and nothing was changed: exit 2, one line.

    The logdir holds another run, is busy, cannot be written, or a checkpoint given
    (or found) does not restore into this run.
    """
