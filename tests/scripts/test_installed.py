"""scripts/installed.py: test.sh skips pip only for an editable install of this checkout, current and complete."""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

from tests.support import REPO

spec = importlib.util.spec_from_file_location("installed", REPO / "scripts" / "installed.py")
installed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(installed)


class Dist:
    """The parts of an importlib.metadata distribution the check reads."""

    def __init__(self, url=None, editable=True, requires=()):
        self.direct = json.dumps({"url": url, "dir_info": {"editable": editable}}) if url else None
        self.requires = list(requires)

    def read_text(self, name):
        return self.direct if name == "direct_url.json" else None


def test_only_an_editable_install_of_this_checkout_counts(tmp_path):
    assert installed._editable_of_this_checkout(Dist(REPO.as_uri()))
    assert not installed._editable_of_this_checkout(Dist(tmp_path.as_uri()))
    assert not installed._editable_of_this_checkout(Dist(REPO.as_uri(), editable=False))
    assert not installed._editable_of_this_checkout(Dist())  # no direct_url.json: a plain install


def test_every_requirement_of_the_asked_extras_must_be_met():
    pytest_version = importlib.metadata.version("pytest")
    met = Dist(requires=[f"pytest=={pytest_version}", 'no-such-distribution-xyz; extra == "other"'])
    assert installed._requirements_met(met, ["dev"])
    assert not installed._requirements_met(met, ["other"])
    assert not installed._requirements_met(Dist(requires=["pytest<1"]), [])


def test_the_script_says_no_for_a_copy_of_the_checkout(tmp_path):
    # A clean clone elsewhere is not what the installed distribution points at: pip must run there.
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "installed.py").write_text((REPO / "scripts" / "installed.py").read_text())
    for name in installed.SETUP_FILES:
        (tmp_path / name).write_text("")
    copy = subprocess.run([sys.executable, str(tmp_path / "scripts" / "installed.py"), "dev"],
                          cwd=os.path.dirname(tmp_path))
    assert copy.returncode == 1
