"""The docs' reference tables of the registries are what `opt-train list TOPIC --markdown` prints from them.

A table is pasted under its marker comment; a registry without a table in some page fails, so
a new kind of plug-in gets its docs table with its registry.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from opt_train.cli.list import MARKDOWN_TOPICS, markdown_table

DOCS = pathlib.Path(__file__).parents[2] / "docs"
MARKER = re.compile(r"<!-- Generated from the registry: `opt-train list (\w+) --markdown`[^\n]*-->\n")


def _pasted():
    """[(page, topic, the table under the marker)] over every docs page."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for match in MARKER.finditer(text):
            end = text.find("\n\n", match.end())
            found.append((page.name, match.group(1), text[match.end(): len(text) if end < 0 else end]))
    return found


PASTED = _pasted()


@pytest.mark.parametrize(("page", "topic", "table"), PASTED, ids=[f"{page}:{topic}" for page, topic, _ in PASTED])
def test_a_pasted_table_is_the_registrys(page, topic, table):
    assert topic in MARKDOWN_TOPICS, f"docs/{page}: no registry '{topic}'"
    assert table == markdown_table(topic), f"docs/{page}: paste the output of `opt-train list {topic} --markdown`"


def test_every_registry_has_its_table_in_the_docs():
    pasted = {topic for _, topic, _ in PASTED}
    assert set(MARKDOWN_TOPICS) - {"keys"} <= pasted


def test_list_markdown_prints_each_registrys_table(cli):
    for topic in MARKDOWN_TOPICS:
        result = cli("list", topic, "--markdown")
        assert result.exit_code == 0, result.output
        assert result.output.strip() == markdown_table(topic)


def test_the_commands_table_has_a_row_for_every_command_and_no_other():
    """Held to `opt_train.cli.main.COMMANDS` (a command added there without its row passed every test)."""
    from opt_train.cli.main import COMMANDS

    shown = set(re.findall(r"^\| `opt-train ([a-z]+)\b", (DOCS / "commands.md").read_text(), re.MULTILINE))
    assert shown == set(COMMANDS)


def test_the_error_codes_paragraph_names_every_code():
    """docs/config.md's "Codes:" paragraph against `opt_train.errors.CODES` (a new code passed every test)."""
    from opt_train.errors import CODES

    text = (DOCS / "config.md").read_text()
    paragraph = text[text.index("\nCodes: "):]
    paragraph = paragraph[: paragraph.index("\n\n")]
    missing = set(CODES) - set(re.findall(r"`(\w+)`", paragraph))
    assert not missing, f"docs/config.md's Codes: paragraph lacks {sorted(missing)}"
