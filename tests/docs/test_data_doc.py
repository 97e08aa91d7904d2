"""docs/data.md runs as written: its files are written and its commands run, in order, in an empty folder."""

import csv
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "data.md"
FENCE = re.compile(r"^```(\w+)(?:[ \t]+(\S+))?\n(.*?)^```", re.S | re.M)
# Each block runs in bash as written. `python` is this interpreter; `opt-train` hands its
# arguments and folder to the test, which runs the command in this process (TensorFlow is
# imported once, not once per command) and replies with its output and exit code. The
# plain-TensorFlow `python -c` that loads the SavedModel stays a fresh process, without opt-train.
# Each side hands over by renaming a finished file, which the other waits for. (The reply was a
# FIFO: once, in a full CI run, a shell ended at `set -e` with none of its command's output, most
# likely a `read` of the FIFO that saw end-of-file; a file has no open or EOF to time.)
PRELUDE = r"""set -e
opt-train() {
  printf '%s\0' "$PWD" "$@" > "$CALLS/request.part" && mv "$CALLS/request.part" "$CALLS/request"
  while [ ! -e "$CALLS/status" ]; do sleep 0.05; done
  read -r status < "$CALLS/status" && rm "$CALLS/status"
  cat "$CALLS/stdout"; cat "$CALLS/stderr" >&2
  return "$status"
}
python() { "$PY" "$@"; }
"""


def steps():
    """(kind, name, text) of each fenced block: a named yaml / python block is a file, a bash block commands."""
    found = []
    for language, name, text in FENCE.findall(DOC.read_text()):
        if language == "bash":
            found.append(("run", None, text))
        elif name:
            found.append(("file", name, text))
    return found


def test_the_doc_has_files_and_commands():
    kinds = [kind for kind, _, _ in steps()]
    assert kinds.count("run") >= 5 and kinds.count("file") >= 3
    commands = "\n".join(text for kind, _, text in steps() if kind == "run")
    for command in ("opt-train validate", "opt-train train", "opt-train predict"):
        assert command in commands


def _opt_train(folder, args, calls):
    """`opt-train ARGS` run in `folder` in this process; its output left in `calls` for the shell; its exit code."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    here = os.getcwd()
    try:
        os.chdir(folder)
        result = CliRunner().invoke(cli, args, prog_name="opt-train")
        output, errors, code = result.stdout, result.stderr, result.exit_code
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            errors += "".join(traceback.format_exception(result.exception))
    except Exception as error:  # the shell must hear back whatever happens here
        output, errors, code = "", "".join(traceback.format_exception(error)), 1
    finally:
        os.chdir(here)
    (calls / "stdout").write_text(output)
    (calls / "stderr").write_text(errors)
    return code


def _reply(calls, code):
    """Hands `code` to the shell: calls/status, whole once it exists (a shell that died never reads it)."""
    (calls / "status.part").write_text(f"{code}\n")
    os.replace(calls / "status.part", calls / "status")


def run_block(text, folder, env, calls):
    """Runs a bash block in `folder`, serving its `opt-train` calls; returns (exit code, stdout, stderr)."""
    request, out, err = calls / "request", calls / "bash.out", calls / "bash.err"
    (calls / "status").unlink(missing_ok=True)  # a reply an earlier shell did not live to read
    with open(out, "w") as stdout, open(err, "w") as stderr:
        bash = subprocess.Popen(["bash", "-c", PRELUDE + text], cwd=folder, env=env, stdout=stdout, stderr=stderr)
        while bash.poll() is None:
            if not request.exists():
                time.sleep(0.05)
                continue
            where, *args = request.read_bytes().decode().split("\0")[:-1]
            request.unlink()
            _reply(calls, _opt_train(where, args, calls))
    return bash.returncode, out.read_text(), err.read_text()


@pytest.mark.slow
def test_every_command_of_the_walk_through_runs(tmp_path):
    calls, folder = tmp_path / "calls", tmp_path / "walk-through"
    calls.mkdir(), folder.mkdir()
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "CALLS": str(calls)}
    outputs = []
    path, modules = list(sys.path), set(sys.modules)
    try:
        for kind, name, text in steps():
            if kind == "file":
                (folder / name).write_text(text)
                continue
            code, stdout, stderr = run_block(text, folder, env, calls)
            assert code == 0, f"{text}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
            outputs.append(stdout + stderr)
    finally:  # the page's own module (my_model) leaves with its folder
        sys.path[:] = path
        for module in set(sys.modules) - modules:
            if str(getattr(sys.modules[module], "__file__", None) or "").startswith(str(folder)):
                del sys.modules[module]
    # What the page says happened, happened.
    with open(folder / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(folder / "credit.csv", newline="") as handle:
        truth = [row["label"] for row in csv.DictReader(handle)]
    assert list(rows[0]) == ["class", "label"] and len(rows) == len(truth)
    assert sum(row["label"] == label for row, label in zip(rows, truth)) / len(truth) >= 0.9
    assert any("0=bad, 1=good" in text for text in outputs)
    assert any("b'good'" in text and "b'bad'" in text for text in outputs)  # the plain SavedModel's labels
