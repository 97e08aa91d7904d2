"""The one registry type every plug-in kind is a table of: `Row`s found by any spelling, checked by one call, TF-free.

A kind (optimizers, models, datasets, lr policies, gradient transforms, loss scalers, lr
controls, sweep samplers and pruners, `summaries:` names; config keys in `opt_train.config.schema` follow the same
pattern) is one `Table` of `Row`s. A row names
its entry, says what it is in one line (`summary`), declares its parameters as an
`opt_train.params` spec, and names the code that implements it as a dotted
"package.module:attribute" string, imported only when `Table.load` is called, so a table
imports no TensorFlow. Fields a kind needs beside these live in a `Row` subclass of that kind.

Adding an entry is its module plus one row; `tests/test_registries.py` walks every table
in `TABLES` (its code imports, its summary is not empty, its defaults pass its own rules,
the TF-side tables hold exactly its names), so a forgotten site fails a test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.suggest import Registry


@dataclass(frozen=True, kw_only=True)
class Row:
    """One entry of a table: its name, one-line summary, parameters and where its code is.

    `params`: {parameter: `opt_train.params.Param`}. `code`: "package.module:attribute" (the
    class, factory or function that implements it; None for an entry with no code of its own).
    `aliases`: other names that resolve to this one (OpenSeq2Seq's function names).
    `cross`: a rule across parameters, `cross(filled)`, raising `ParamError`; it runs once every
    parameter passed its own rule.
    """

    name: str
    summary: str
    params: dict = field(default_factory=dict)
    code: str | None = None
    aliases: tuple = ()
    cross: Callable[[dict], Any] | None = None

    def locations(self):
        """Every "module:attribute" this row names (its `code`, and a kind's other code fields)."""
        return [self.code] if self.code else []

    def defaults(self):
        """{param: default} ("required" where the parameter has none), for listings."""
        return {key: "required" if param.required else param.default for key, param in self.params.items()}


def load(location):
    """The attribute "package.module:attribute" names, its module imported now."""
    module, _, attribute = location.partition(":")
    target = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


class Table(Registry):
    """The rows of one kind, by name: a `Registry` (any spelling, did-you-mean) whose names are its rows'.

    `owner` words a row in "unknown <owner> parameter" and "<owner> params must be a mapping",
    `required_by` in "is required <required_by>"; both are formatted with the table's `kind`
    and the row's `name`. `param`: the config key whose value names a row (`loss_scaling`);
    `key`: the config key of a row's parameter block, prefixed to each error's parameter.
    `as_given`: the checked parameters reach the code as the user gave them (defaults filled),
    not as their rules return them (`4` stays `4`, not `4.0`). `sites`: "module:attribute" of each
    TF-side table keyed by this kind's names (a dict filled as classes are defined, say); the
    registry test holds each to exactly the table's names. `columns`: the row fields the docs' table
    shows after the name ("parameters": the parameters with their defaults).
    """

    def __init__(self, kind, rows, *, param=None, owner="{kind} '{name}'", required_by="by {kind} '{name}'",
                 key=None, as_given=False, sites=(), columns=("summary", "parameters")):
        self.rows = {row.name: row for row in rows}
        assert len(self.rows) == len(rows), f"two {kind} rows share a name"
        aliases = {alias: row.name for row in rows for alias in row.aliases}
        super().__init__(kind, self.rows, aliases, param=param)
        self._owner = owner
        self._required_by = required_by
        self.key = key
        self.as_given = as_given
        self.sites = tuple(sites)
        self.columns = tuple(columns)

    def __getitem__(self, name):
        """The row of `name` (any spelling); `UnknownNameError` when there is none."""
        return self.rows[self.resolve(name)]

    def column(self, attribute):
        """{name: row.<attribute>} over every row, in table order."""
        return {name: getattr(row, attribute) for name, row in self.rows.items()}

    def owner(self, name):
        return self._owner.format(kind=self.kind, name=name)

    def param_errors(self, name, params):
        """`(filled, errors)`: `params` for row `name` checked by its rules, defaults filled, every problem found.

        The one call shape every kind checks its parameters with. An error has its `param`;
        with the table's `key` it also has its full config key (`loss_scaling_params.scale_max`).
        """
        row = self[name]
        owner = self.owner(row.name)
        filled, errors = p.param_errors(
            row.params, params, owner, required_by=self._required_by.format(kind=self.kind, name=row.name),
        )
        if self.as_given and not errors:
            given = params or {}
            filled = {param: given[param] if param in given else filled[param] for param in row.params}
        if not errors and row.cross is not None:
            try:
                row.cross(filled)
            except p.ParamErrors as several:
                errors += several.errors
            except ParamError as error:
                errors.append(error)
        if self.key:
            for error in errors:
                if getattr(error, "key", None) is None and error.param:
                    error.key = f"{self.key}.{error.param}"
        return filled, errors

    def check(self, name, params):
        """`params` for row `name` with defaults filled; raises the first problem."""
        return p.filled_or_first_error(self.param_errors(name, params))

    def load(self, name):
        """The code row `name` names, imported now (TensorFlow with it, for most kinds)."""
        return load(self[name].code)

    def markdown(self):
        """The table as the docs' Markdown: name (and aliases), summary and parameters with defaults."""
        aliases = any(row.aliases for row in self.rows.values())
        columns = self.columns
        head = ["name", *(["also"] if aliases else []), *columns]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in self.rows.values():
            cells = [f"`{row.name}`"] + ([", ".join(f"`{alias}`" for alias in row.aliases)] if aliases else [])
            for column in columns:
                if column == "parameters":
                    cells.append(describe_params(row.defaults(), markdown=True))
                else:
                    cells.append(_cell(getattr(row, column)))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _cell(value):
    if value is None:
        return "—"
    if isinstance(value, (tuple, list)):
        return ", ".join(map(str, value))
    return str(value).replace("|", "\\|")


def describe_params(defaults, *, markdown=False):
    """"a=1, b (required)" from {param: default}; "(no parameters)" / "—" for none."""
    if not defaults:
        return "—" if markdown else "(no parameters)"
    tick = "`" if markdown else ""
    return ", ".join(
        f"{tick}{key}{tick} (required)" if value == "required" else f"{tick}{key}={value!r}{tick}"
        for key, value in defaults.items()
    )


# Every table, as "module:attribute" (imported on first use: `tables()`): what `opt-train list`
# shows, what the docs' reference tables are printed from, and what tests/test_registries.py walks.
TABLES = {
    "optimizers": "opt_train.optimizers.table:OPTIMIZERS",
    "models": "opt_train.models.registry:MODELS",
    "datasets": "opt_train.data.registry:DATASETS",
    "lr_policies": "opt_train.lr_policies.registry:POLICIES",
    "gradient_transforms": "opt_train.optimizers.user_transforms:TRANSFORMS",
    "loss_scalers": "opt_train.optimizers.names:LOSS_SCALER_NAMES",
    "lr_controls": "opt_train.config.controls:LR_CONTROL_TABLE",
    "samplers": "opt_train.config.sweep_block:SAMPLER_TABLE",
    "pruners": "opt_train.trial:PRUNERS",
    "summaries": "opt_train.optimizers.names:SUMMARIES",
}


def table(kind):
    """The `Table` of `kind` (a key of `TABLES`), TF-free: how code below the table's layer reaches its rows."""
    return load(TABLES[kind])


def tables():
    """{kind: Table} of every registry (`TABLES`), TF-free."""
    return {kind: table(kind) for kind in TABLES}
