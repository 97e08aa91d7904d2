"""Config problems: one `ConfigIssue` per bad key, all of them raised together as a `ConfigError`."""

from __future__ import annotations

import dataclasses

from opt_train.errors import CODES, BadUsage, ParamError  # CODES: re-exported as opt_train.config.CODES

# Where `--set key=value` overrides are said to come from.
OVERRIDE_FILE = "--set"


# An error stays a line a person reads: a huge value is cut, a flood of problems counted.
MAX_VALUE_CHARS = 120
MAX_ISSUES_SHOWN = 50


def show_value(value):
    """A received value as a user would have typed it (strings quoted), cut to a readable length."""
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if len(text) > MAX_VALUE_CHARS:
        text = f"{text[:MAX_VALUE_CHARS - 3]}... ({len(text):,} characters)"
    return text


@dataclasses.dataclass(frozen=True)
class ConfigIssue:
    """One problem with one key: where it was set, what is wrong, a stable code and the value."""

    file: str | None
    line: int | None
    key: str
    code: str
    message: str
    value: object = None

    def format(self):
        """`file:line: key: message. Received: value [code]`, leaving out what is unknown."""
        parts = [self.location(), self.key] if self.location() else [self.key]
        text = ": ".join(part for part in parts if part)
        body = self.message
        if self.value is not None:
            body = f"{body}. Received: {show_value(self.value)}"
        return f"{text}: {body} [{self.code}]" if text else f"{body} [{self.code}]"

    def location(self):
        """`file:line`, just `file` when the line is unknown or 0 (`--set`), or ''."""
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file

    def __str__(self):
        return self.format()


class ConfigError(BadUsage, ValueError):
    """Every problem found in a config; `str()` is one line per issue, the first issue first.

    `details` is what the user needs beyond that line, e.g. the traceback of their own
    factory code (shown above the error, never ours).
    """

    def __init__(self, issues, details=""):
        self.issues = list(issues)
        self.details = details
        lines = [issue.format() for issue in self.issues[:MAX_ISSUES_SHOWN]]
        if len(self.issues) > MAX_ISSUES_SHOWN:
            lines.append(f"... and {len(self.issues) - MAX_ISSUES_SHOWN:,} more problems")
        super().__init__("\n".join(lines))


class RuleError(ParamError):
    """A config rule failed: a `ParamError` built in the config layer's argument order.

    `subkey` (the error's `param`) names the part of a block that failed
    (`larc_eta` inside `larc_params`), relative to the key the rule was applied to.
    """

    def __init__(self, message, value=None, code="out_of_range", subkey=None):
        super().__init__(subkey, code, message, value)

    @property
    def subkey(self):
        return self.param


class RuleErrors(ValueError):
    """Several `ParamError`s from one check, all to be reported."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(error.message for error in self.errors))


def as_param_error(error):
    """`error` itself when it carries a code. An error from code outside opt-train (a user's
    optimizer class) carries none: it is reported whole, as `out_of_range`, where it was raised."""
    if isinstance(error, ParamError):
        return error
    return ParamError(None, "out_of_range", str(error).rstrip("."))


def below(key, subkey):
    """`key.sub` or `key[i]`: where a failure below `key` is reported (`key` itself when no sub-key)."""
    if not subkey:
        return key
    return f"{key}{subkey}" if subkey.startswith("[") else f"{key}.{subkey}"


def parent_key(dotted_key):
    """`a.b[1]` -> `a.b` -> `a` -> `''`."""
    cut = max(dotted_key.rfind("."), dotted_key.rfind("["))
    return dotted_key[:cut] if cut > 0 else ""


def locate(locations, dotted_key):
    """`(file, line)` where `dotted_key` or its nearest enclosing key was set, else `(None, None)`."""
    key = dotted_key
    while key:
        if key in locations:
            return locations[key]
        key = parent_key(key)
    return None, None
