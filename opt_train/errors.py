"""The errors every layer shares (TF-free): `ParamError` (a check's parameter, code and value), `TrainingFailed`,
and the exit codes a run ends with."""

from __future__ import annotations

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

# Exit codes of `opt-train` commands (documented once here; docs/INTERFACES.md lists them):
# 0 done, 1 the run failed (`TrainingFailed`), 2 bad usage or config, 3 a sweep's pruner stopped the trial.
# A run stopped by a signal exits 128 + its number.
FAILED_EXIT_CODE = 1
USAGE_EXIT_CODE = 2
PRUNED_EXIT_CODE = 3

# What a parameter check may say; the others belong to reading files.
PARAM_CODES = ("unknown_key", "unknown_name", "wrong_type", "out_of_range", "conflict", "missing", "file_not_found")


class ParamError(ValueError):
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


class TrainingFailed(RuntimeError):
    """The run started (or the sweep's study was opened) and cannot go on: diverged, too many overflows, a rank
    died, the study's database did not answer. Exit 1, one line."""

    exit_code = FAILED_EXIT_CODE
