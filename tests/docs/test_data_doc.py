"""docs/data.md runs as written: its files are written and its commands run, in order, in an empty folder."""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "data.md"
FENCE = re.compile(r"^```(\w+)(?:[ \t]+(\S+))?\n(.*?)^```", re.S | re.M)
# `opt-train` is this checkout's code (the installed console script may point elsewhere).
PRELUDE = 'set -e\nopt-train() { "$PY" -m opt_train "$@"; }\npython() { "$PY" "$@"; }\n'


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


@pytest.mark.slow
def test_every_command_of_the_walk_through_runs(tmp_path):
    env = {**os.environ, "PY": sys.executable, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    outputs = []
    for kind, name, text in steps():
        if kind == "file":
            (tmp_path / name).write_text(text)
            continue
        done = subprocess.run(["bash", "-c", PRELUDE + text], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{text}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
        outputs.append(done.stdout + done.stderr)
    # What the page says happened, happened.
    with open(tmp_path / "predictions.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(tmp_path / "credit.csv", newline="") as handle:
        truth = [row["label"] for row in csv.DictReader(handle)]
    assert list(rows[0]) == ["class", "label"] and len(rows) == len(truth)
    assert sum(row["label"] == label for row, label in zip(rows, truth)) / len(truth) >= 0.9
    assert any("0=bad, 1=good" in text for text in outputs)
    assert any("b'good'" in text and "b'bad'" in text for text in outputs)  # the plain SavedModel's labels
