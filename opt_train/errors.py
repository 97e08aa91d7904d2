"""The errors every layer shares (TF-free): `ParamError` (a check's parameter, code and value), `RunRefused`,
`TrainingFailed`, `Interrupted`, and every exit code an `opt-train` command ends with (`EXIT_CODES`, their one home)."""

from __future__ import annotations

import signal

# The stable codes tests and tools may rely on; the wording of messages may change.
CODES = (
    "unknown_key",
    "unknown_name",
    "wrong_type",
    "out_of_range",
    "conflict",
    "missing",
    "yaml_syntax",
    "file_not_found",
    "base_cycle",
    "bad_override",
    "duplicate_key",
    "too_large",  # a config, value or model over a bound (size, aliases, nesting, memory)
    "user_code",  # the user's own code named by a config failed
)


# ----- exit codes: an error's is its class attribute (click's `ClickException.exit_code` way); the
# codes that end a command without an error are named here. `EXIT_CODES` is the table `opt-train
# --help` prints and the docs' tables are held to (tests/test_errors.py). -----


class OptTrainError(Exception):
    """The base of the errors an `opt-train` command ends on: `exit_code` is the code it ends with.

    Exit 1: the run started and cannot go on (`TrainingFailed`); a bug (any other exception)
    ends with Python's 1 too, its traceback kept.
    """

    exit_code = 1


class BadUsage(OptTrainError):
    """Bad usage or a bad config (`ParamError`, the config layer's `ConfigError`, a refused logdir): exit 2,
    one line per problem, no traceback (click's `UsageError` exits 2 as well)."""

    exit_code = 2


DONE_EXIT_CODE = 0
FAILED_EXIT_CODE = OptTrainError.exit_code
USAGE_EXIT_CODE = BadUsage.exit_code
# A sweep's pruner stopped the trial at an evaluation (a checkpoint saved there): not a failure.
PRUNED_EXIT_CODE = 3


def signal_exit_code(signal_number):
    """The code of a command stopped by signal `signal_number`, as a shell's: 128 + its number."""
    return 128 + int(signal_number)


# Ctrl-C (130) and SIGTERM (143): the run stopped at an update boundary, a checkpoint saved there.
INTERRUPTED_EXIT_CODES = (signal_exit_code(signal.SIGINT), signal_exit_code(signal.SIGTERM))

# (codes, meaning) for every way a command ends, in order.
EXIT_CODES = (
    ((DONE_EXIT_CODE,), 'done (also "nothing to train": the run already reached `max_steps`)'),
    ((FAILED_EXIT_CODE,), "training failed: diverged, `on_nonfinite: stop`, too many overflows in a row, disk full, "
                          "a rank died or hung; a sweep whose every trial failed"),
    ((USAGE_EXIT_CODE,), "bad usage, bad config, or an unusable logdir or checkpoint: one line per problem, "
                         "no traceback"),
    ((PRUNED_EXIT_CODE,), "a sweep trial stopped by its pruner (a checkpoint saved there)"),
    (INTERRUPTED_EXIT_CODES, "stopped by Ctrl-C / SIGTERM (128 + the signal's number); a checkpoint saved at the "
                             "update it stopped on, and the same command resumes it"),
)


def exit_codes_markdown():
    """`EXIT_CODES` as the docs' Markdown table (README.md, docs/commands.md)."""
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {' / '.join(map(str, codes))} | {meaning} |" for codes, meaning in EXIT_CODES]
    return "\n".join(rows)


def exit_codes_help():
    """`EXIT_CODES` as the lines `opt-train --help` ends with (click keeps a paragraph after `\\b` as it is)."""
    width = max(len(" / ".join(map(str, codes))) for codes, _ in EXIT_CODES)
    lines = [f"  {' / '.join(map(str, codes)):<{width}}  {meaning.replace('`', '')}" for codes, meaning in EXIT_CODES]
    return "\n".join(["\b", "Exit codes:", *lines])


# What a parameter check may say; the others belong to reading files.
PARAM_CODES = ("unknown_key", "unknown_name", "wrong_type", "out_of_range", "conflict", "missing", "file_not_found",
               "too_large")


class ParamError(BadUsage, ValueError):
    """A parameter that breaks its rule.

    `param` names it (`beta_1`), `code` is one of `PARAM_CODES`, `message` says what
    is wrong in a few words ("must be > 0"), `value` is what was received. `key`,
    when set, is the full dotted config key the problem belongs to (`warmup.steps`),
    for a check that knows it better than the caller. `str()` is the Keras wording,
    "`beta_1` must be in [0, 1). Received: beta_1=1.5", unless `text` gives another.
    The config layer reads the attributes only, never the text.
    """

    def __init__(self, param, code, message, value=None, *, text=None, key=None):
        if code not in PARAM_CODES:
            raise AssertionError(f"ParamError code {code!r} is not one of {PARAM_CODES}")
        self.param = param
        self.code = code
        self.message = message
        self.value = value
        self.key = key
        super().__init__(text or keras_text(param, message, value))

    @classmethod
    def at(cls, key, code, message, value=None):
        """A problem reported at the full config `key` (`model`, `gradient_transforms[0].after`).

        For checks that know the key better than any parameter name: `message` is the
        whole text, and the config layer files the error at `key` with `code`.
        """
        return cls(None, code, message, value, key=key, text=message)

    @classmethod
    def said(cls, param, code, text, value=None):
        """A problem whose whole sentence is `text`, another library's own ("`momentum` must be a float
        between [0, 1]."): `str()` is `text` unchanged; `message` is it up to its "Received:" part, which
        the config layer adds itself from `value`."""
        message = text.split(" Received:", 1)[0].rstrip(" .")
        return cls(param, code, message, value, text=text)


def keras_text(param, message, value=None):
    """"`power` must be > 0. Received: power=0" (no "Received" part when `value` is None)."""
    head = f"`{param}` {message}" if param else message[:1].upper() + message[1:]
    if value is None:
        return head if head.endswith(".") else f"{head}."
    return f"{head}. Received: {param}={value!r}" if param else f"{head}. Received: {value!r}"


class RunRefused(BadUsage, ValueError):
    """The run cannot start as asked, and nothing was changed: exit 2, one line.

    The logdir holds another run, is busy, cannot be written, or a checkpoint given
    (or found) does not restore into this run. Here, not in the training layer, because
    the checkpoint-path reader (`opt_train.checkpoint_paths`) that raises it serves the
    config layer too; `opt_train.training.errors` re-exports it.
    """


class Interrupted(RuntimeError):
    """The run was asked to stop (SIGINT, SIGTERM) and stopped where it could (an update boundary, or before
    any worker started to train).

    `exit_code` is the shell's code for that signal, 128 + its number.
    """

    def __init__(self, message, signal_number):
        super().__init__(message)
        self.exit_code = signal_exit_code(signal_number)


class TrainingFailed(OptTrainError, RuntimeError):
    """The run started (or the sweep's study was opened) and cannot go on: diverged, too many overflows, a rank
    died, the study's database did not answer. Exit 1 (`OptTrainError`'s), one line."""
