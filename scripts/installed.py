"""Exits 0 when this checkout is already installed as `pip install -e ".[EXTRAS]"` would leave it, else 1.

    python scripts/installed.py dev,profile,mlflow

Installed means: the `opt-train` distribution is an editable install of this very
directory, made after setup.cfg and pyproject.toml last changed, and every requirement
of the package and of EXTRAS is met by an installed distribution. `scripts/test.sh` runs
pip only when it is not: pip resolves the ~100 distributions anew on every call (~15 s),
even when nothing changed. Any doubt (no metadata, an unreadable requirement) says "not
installed", so pip decides.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import sys
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_FILES = ("setup.cfg", "pyproject.toml")


def _editable_of_this_checkout(dist):
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if not direct.get("dir_info", {}).get("editable"):
        return False
    path = urllib.request.url2pathname(urllib.parse.urlparse(direct.get("url", "")).path)
    return os.path.realpath(path) == os.path.realpath(ROOT)


def _newer_than_setup_files(dist):
    written = [dist.locate_file(f) for f in dist.files or () if f.name == "METADATA"]
    if not written:
        return False
    installed = os.path.getmtime(written[0])
    return all(os.path.getmtime(os.path.join(ROOT, name)) < installed for name in SETUP_FILES)


def _requirements_met(dist, extras):
    from packaging.requirements import Requirement

    for line in dist.requires or ():
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            continue
        try:
            version = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            return False
        if not requirement.specifier.contains(version, prereleases=True):
            return False
    return True


def installed(extras):
    try:
        dist = metadata.distribution("opt-train")
        return (_editable_of_this_checkout(dist) and _newer_than_setup_files(dist)
                and _requirements_met(dist, extras))
    except Exception:  # noqa: BLE001 - any doubt: let pip decide
        return False


if __name__ == "__main__":
    sys.exit(0 if installed([e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e]) else 1)
