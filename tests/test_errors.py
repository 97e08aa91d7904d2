"""Exit codes have one home, `opt_train.errors`: the errors carry theirs, `--help` and the docs print the same
table, and no other module writes a code as a number."""

import ast
import pathlib
import re
import signal
import subprocess

import click
import pytest

from opt_train import errors
from opt_train.config import ConfigError
from opt_train.errors import (
    EXIT_CODES,
    FAILED_EXIT_CODE,
    INTERRUPTED_EXIT_CODES,
    PRUNED_EXIT_CODE,
    USAGE_EXIT_CODE,
    ParamError,
    TrainingFailed,
    exit_codes_markdown,
)
from opt_train.training.errors import Interrupted, Pruned, RunRefused
from tests.support import signals_as_a_terminal_leaves_them

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "opt_train"
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
CODES = {code for codes, _ in EXIT_CODES for code in codes}


def test_each_error_carries_its_code_as_click_s_do():
    assert ParamError("x", "missing", "is required").exit_code == USAGE_EXIT_CODE
    assert ConfigError([]).exit_code == RunRefused("busy").exit_code == USAGE_EXIT_CODE
    assert TrainingFailed("diverged").exit_code == FAILED_EXIT_CODE
    assert Pruned("pruned").exit_code == PRUNED_EXIT_CODE
    # click's own errors end a command too: its usage error and ours must mean the same code.
    assert (click.UsageError.exit_code, click.ClickException.exit_code) == (USAGE_EXIT_CODE, FAILED_EXIT_CODE)


def test_a_stop_by_signal_ends_as_a_shell_reports_it():
    """The reference is sh's own `$?` for a child that SIGINT / SIGTERM ended."""
    for number, code in zip((signal.SIGINT, signal.SIGTERM), INTERRUPTED_EXIT_CODES):
        shell = subprocess.run(["sh", "-c", f'sh -c "kill -{int(number)} \\$\\$"; echo $?'],
                               capture_output=True, text=True, check=True, preexec_fn=signals_as_a_terminal_leaves_them)
        assert int(shell.stdout) == code == Interrupted("stopped", number).exit_code


def test_help_lists_every_exit_code(cli):
    """Failed before: `opt-train --help` said 0/1/2 only."""
    result = cli("--help")
    assert result.exit_code == 0
    help_text = " ".join(result.output.split())
    for codes, meaning in EXIT_CODES:
        assert f"{' / '.join(map(str, codes))} {meaning.replace('`', '')}" in help_text


def test_the_exit_code_table_is_on_one_page_the_home_s():
    """One page per topic: docs/commands.md holds the table; the README links to it (it held a second copy)."""
    page = "docs/commands.md"
    assert exit_codes_markdown() in (REPO / page).read_text(), (
        f"{page}: paste this table (opt_train.errors.exit_codes_markdown()):\n{exit_codes_markdown()}"
    )
    holding = [path.name for path in DOCS if "| code | meaning |" in path.read_text()]
    assert holding == ["commands.md"], f"the exit-code table is on {holding}: keep it on {page} alone and link there"
    assert "](docs/commands.md#exit-codes)" in (REPO / "README.md").read_text()


def _tables(text):
    """Each Markdown table of `text` as its list of rows (a row: its cells, stripped)."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


# A page says a code as "exit code 2", "exit 2", "exits 3", "(exit code 130)", "Exit codes: **0** ...".
MENTION = re.compile(r"\bexit(?:s|ing)?(?: with)?(?: codes?)?(?: of [^:]*)?:?\s+\**(\d+)", re.IGNORECASE)
SENTENCE = re.compile(r"\bexit codes?\b[^.|]*?:([^.|]*)", re.IGNORECASE | re.DOTALL)
# `kill -9` ends the process before any of opt-train's code runs: its 137 is the shell's (128 + 9).
NOT_OURS = {128 + signal.SIGKILL}


def _said_codes(text):
    said = {int(number) for number in MENTION.findall(text)}
    for sentence in SENTENCE.findall(text):
        said |= {int(number) for number in re.findall(r"(?<![\w.+-])(\d+)(?![\w.])", sentence)
                 if not re.search(rf"\b{number}\s*(?:s|seconds|updates|steps)\b", sentence)}
    for rows in _tables(text):
        header = [cell.lower() for cell in rows[0]]
        if header == ["code", "meaning"]:
            said |= {int(code) for row in rows[2:] for code in re.findall(r"\d+", row[0])}
        for column, title in enumerate(header):
            if "exit code" in title:
                said |= {int(code) for row in rows[2:] if column < len(row)
                         for code in re.findall(r"\b\d+\b", row[column])}
    return said


@pytest.mark.parametrize("page", DOCS, ids=[page.name for page in DOCS])
def test_every_exit_code_a_page_names_is_in_the_home(page):
    text = page.read_text()
    unknown = _said_codes(text) - CODES - NOT_OURS
    assert not unknown, f"{page.name} names exit codes opt_train.errors.EXIT_CODES does not: {sorted(unknown)}"
    for rows in _tables(text):
        if [cell.lower() for cell in rows[0]] == ["code", "meaning"]:
            assert "\n".join("| " + " | ".join(row) + " |" for row in rows).replace("| --- | --- |", "|---|---|") \
                == exit_codes_markdown(), f"{page.name}: a code/meaning table other than the home's"


def test_the_docs_check_sees_a_stray_code():
    assert _said_codes("Exit codes: **0** done, **4** lost.") >= {0, 4}
    assert _said_codes("it stops (exit code 5)") == {5}
    assert _said_codes("| what | exit code |\n|---|---|\n| kill | 9 |") == {9}


# Calls that end a process with a code, names that hold one, and the codes to look for.
EXITS = {"exit", "_exit", "Exit", "SystemExit"}
LITERAL_CODES = {FAILED_EXIT_CODE, USAGE_EXIT_CODE, PRUNED_EXIT_CODE, *INTERRUPTED_EXIT_CODES}


def _name(node):
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _literal_codes(node):
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [value.value for value in values
            if isinstance(value, ast.Constant) and type(value.value) is int and value.value in LITERAL_CODES]


def stray_exit_codes(source, path="<source>"):
    """`path:line: text` for each exit code written as a number in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Call) and _name(node.func) in EXITS and node.args:
            hit = bool(_literal_codes(node.args[0]))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            hit = any("code" in _name(target).lower() for target in targets) and bool(_literal_codes(node.value))
        elif isinstance(node, ast.keyword):
            hit = "code" in (node.arg or "").lower() and bool(_literal_codes(node.value))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            hit = any("code" in _name(side).lower() for side in sides) and any(
                _literal_codes(side) for side in sides)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
            hit = bool(_literal_codes(node.value.elts[0]))  # the launcher's `(exit code, message)`
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            hit = any(isinstance(side, ast.Constant) and side.value == 128 for side in (node.left, node.right))
        if hit:
            found.append(f"{path}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_no_module_but_the_home_writes_an_exit_code_as_a_number():
    """Failed before: 1, 2, 3 and 130 were literals in cli/common.py, distributed/launcher.py and
    sweep/driver.py, and 128 + signal in three places."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != pathlib.Path(errors.__file__):
            found += stray_exit_codes(path.read_text(), path.relative_to(REPO))
    assert not found, "exit codes as numbers (name them from opt_train.errors):\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "sys.exit(2)", "raise click.exceptions.Exit(130)", "exit_code = 1", "record(exit_code=3)",
    "if code == 2: pass", "if rank.code in (0, 2, 143): pass", "code = 128 + number", "return 128 + self._signal",
    "return 1, f'rank {n} hung'",
])
def test_the_literal_check_sees_each_form(line):
    assert stray_exit_codes(line)
