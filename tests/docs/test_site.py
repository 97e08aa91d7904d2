"""The documentation: the MkDocs site builds with no broken link or anchor, the README's links
resolve, and every `opt-train ...` command shown in a shell block still parses."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import click
import pytest
from markdown.extensions.toc import slugify

from opt_train.cli.main import cli
from tests.support import QUIET_SETTINGS, REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
SHELL_FENCES = {"bash", "sh", "shell", "console"}


def test_the_site_builds_strictly(tmp_path):
    # --strict turns every warning into a failure; mkdocs.yml's `validation:` makes a link to
    # a missing page or a missing #anchor a warning, and a page left out of `nav` one too.
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "config" / "index.html").is_file()


def headings(text):
    """The `#` headings of a Markdown text, fenced blocks left out."""
    found, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def test_every_link_of_the_readme_reaches_a_page_and_heading():
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local)
    for link in local:
        path, _, anchor = link.partition("#")
        target = REPO / path
        assert target.is_file(), f"README links to {link}: no such file"
        if anchor:
            slugs = {slugify(heading.replace("`", ""), "-") for heading in headings(target.read_text())}
            assert anchor in slugs, f"README links to {link}: no such heading"


def shell_commands(text):
    """The command lines of the text's shell blocks (```bash etc.; `$ `-prefixed lines in any block),
    with backslash continuations joined."""
    commands, fence, pending = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence is None:
            continue
        if fence not in SHELL_FENCES and not line.startswith("$ "):
            continue
        line = pending + line.removeprefix("$ ")
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        commands.append(line.strip())
    return commands


def opt_train_argv(command):
    """The arguments after `opt-train` in a shell line (after env settings or a launcher such as
    horovodrun), stopping at a comment, pipe, redirection or `&&`; None when it runs no opt-train."""
    if "opt-train" not in command:
        return None  # e.g. a line of a multi-line `python -c "..."`, which shlex cannot split alone
    words = shlex.split(command, comments=True)
    if "opt-train" not in words:
        return None
    args = []
    for word in words[words.index("opt-train") + 1:]:
        if word in {"|", ">", ">>", "&&", ";", "2>&1"}:
            break
        args.append(word)
    return args


def parse(args):
    """Runs the real CLI's parser over `args` down to the command it names, without invoking it:
    unknown commands or options, missing arguments and bad values raise click's usage errors.
    OpenSeq2Seq's run.py flags (`--config_file=...`) are translated first, as `main()` does."""
    from opt_train.cli import run_py

    translated = run_py.opt_train_words(list(args))
    if translated is not None:
        args, _ = translated
    command, name, parent = cli, "opt-train", None
    while True:
        ctx = command.make_context(name, list(args), parent=parent)
        if not isinstance(command, click.Group):
            return ctx
        # click < 8.2 keeps the command name in `protected_args`, later versions in `_protected_args`.
        first = ctx._protected_args if hasattr(ctx, "_protected_args") else ctx.protected_args
        rest = [*first, *ctx.args]
        if not rest:
            return ctx
        name, command, args = command.resolve_command(ctx, rest)
        parent = ctx


def doc_commands():
    """(page, the arguments after `opt-train`) for every such command in docs/ and the README."""
    found = set()
    for page in [*PAGES, REPO / "README.md"]:
        for line in shell_commands(page.read_text()):
            args = opt_train_argv(line)
            if args is not None:
                found.add((page.name, shlex.join(args)))
    return sorted(found)


DOC_COMMANDS = doc_commands()


def test_the_docs_show_commands_of_every_kind():
    shown = {args.split()[0] for _, args in DOC_COMMANDS if args}
    assert {"train", "validate", "lr", "sweep", "convert", "data", "configs"} <= shown, shown


@pytest.fixture
def verbose_undone():
    """`--verbose`'s callback runs while a line is parsed (`quiet.configure(True)`): the settings
    it makes in this process (environment, loggers) are put back after the test."""
    import logging

    from absl import logging as absl_logging

    environment = {name: os.environ.get(name) for name in QUIET_SETTINGS}
    levels = {name: logging.getLogger(name).level for name in ("tensorflow", "absl")}
    verbosity = absl_logging.get_verbosity()
    yield
    for name, value in environment.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    absl_logging.set_verbosity(verbosity)


@pytest.mark.parametrize("page, args", DOC_COMMANDS, ids=[f"{p}: {a}"[:90] for p, a in DOC_COMMANDS])
def test_every_command_in_the_docs_parses(page, args, tmp_path, monkeypatch, verbose_undone):
    # In an empty folder: an input file the command requires to exist (the user's own, such as
    # an OpenSeq2Seq config for `convert`) is created empty there, then the parse is run again.
    monkeypatch.chdir(tmp_path)
    for _ in range(5):
        try:
            ctx = parse(shlex.split(args))
            break
        except click.BadParameter as error:
            missing = re.search(r"'([^']+)' does not exist", error.format_message())
            if not (missing and isinstance(error.param.type, click.Path)) or pathlib.Path(missing[1]).is_absolute():
                raise
            (tmp_path / missing[1]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / missing[1]).touch()
    else:
        pytest.fail(f"{page}: `opt-train {args}` still misses files after 5 tries")
    assert ctx.command is not cli or "--config" in args, f"{page}: `opt-train {args}` names no command"


@pytest.mark.parametrize("args, problem", [
    ("train --config x.yaml --np", "requires an argument"),
    ("train --cofnig x.yaml", "No such option"),
    ("trian --config x.yaml", "No such command"),
    ("sweep --config x.yaml --parallel many", "is not a valid integer"),
    ("configs copy", "Missing"),
])
def test_the_parser_check_refuses_what_the_cli_refuses(args, problem):
    with pytest.raises(click.UsageError, match=problem):
        parse(shlex.split(args))
