"""The suite's own set-up (tests/conftest.py): the temporary folder its processes share."""

import os
import stat
import subprocess
import sys
import tempfile

from tests.conftest import SUITE_TEMPORARY_PREFIX


def test_this_process_and_its_children_use_the_suites_temporary_folder_and_tmp_path_stays_outside_it(tmp_path):
    folder = os.environ["TMPDIR"]
    owner = os.path.basename(folder).removeprefix(SUITE_TEMPORARY_PREFIX).partition("-")[0]
    assert os.path.basename(folder).startswith(SUITE_TEMPORARY_PREFIX) and owner.isdigit()
    assert tempfile.gettempdir() == folder
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == folder
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o1777
    # Removed with the folder at the suite's end, a failed test's files would be gone; pytest keeps them.
    assert os.path.commonpath([folder, tmp_path]) != folder
