"""`opt-train convert`: OpenSeq2Seq and RETURNN Python configs to opt-train YAML, read from their syntax tree."""

from __future__ import annotations

import dataclasses

import yaml

from opt_train.convert.pyconfig import PyConfigError
from opt_train.errors import ParamError

FORMATS = ("openseq2seq", "returnn")


@dataclasses.dataclass
class Conversion:
    """What a converter made of one file: the carried keys, what it left out and why, notes."""

    source: str
    kind: str
    data: dict = dataclasses.field(default_factory=dict)
    dropped: list = dataclasses.field(default_factory=list)  # (key, value as written, why)
    notes: list = dataclasses.field(default_factory=list)

    def drop(self, key, written, why):
        self.dropped.append((key, written, why))

    def to_yaml(self):
        """The YAML file: a header, the carried keys in the source's order, then what to fill in."""
        lines = [
            f"# Converted by `opt-train convert {self.kind}` from {self.source}",
            "# (read from its syntax tree; nothing in it was run).",
        ]
        if self.data:
            lines.append(yaml.safe_dump(self.data, sort_keys=False, default_flow_style=None).rstrip())
        if self.notes:
            lines.append("")
            lines.append("# What opt-train does with keys it carried:")
            lines.extend(f"#   {note}" for note in self.notes)
        if self.dropped:
            lines.append("")
            lines.append("# Not carried (fill in what the run needs; the rest has no opt-train equivalent):")
            for key, written, why in self.dropped:
                shown = " ".join(str(written).split())
                if len(shown) > 100:
                    shown = shown[:97] + "..."
                lines.append(f"#   {key}: {shown}  -- {why}")
        return "\n".join(lines) + "\n"


def convert(kind, path):
    """The `Conversion` of the Python config at `path` (`kind`: openseq2seq or returnn).

    Raises `PyConfigError` (a ValueError naming file and line) for a file that
    cannot be read as that kind of config.
    """
    if kind == "openseq2seq":
        from opt_train.convert.openseq2seq import convert_openseq2seq

        return convert_openseq2seq(path)
    if kind == "returnn":
        from opt_train.convert.returnn import convert_returnn

        return convert_returnn(path)
    raise ParamError.said("kind", "unknown_name", f"`kind` must be one of {', '.join(FORMATS)}. Received: kind={kind!r}",
                          kind)


__all__ = ["FORMATS", "Conversion", "PyConfigError", "convert"]
