"""Where the harness writes its figures: a dated file per run, so a run never replaces an earlier one's."""

from __future__ import annotations

import datetime
import os

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def dated(name, quick=False, folder=FOLDER, today=None):
    """`<folder>/<YYYY-MM-DD>-<name>.json` (`-quick` for a smoke run), `-2`, `-3`, ... after it when taken."""
    stem = f"{(today or datetime.date.today()).isoformat()}-{name}{'-quick' if quick else ''}"
    path, number = os.path.join(folder, f"{stem}.json"), 2
    while os.path.exists(path):
        path, number = os.path.join(folder, f"{stem}-{number}.json"), number + 1
    return path
