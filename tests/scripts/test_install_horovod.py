"""scripts/install_horovod.sh: an import that worked is not repeated while Horovod's and TensorFlow's libraries stay the same."""

import os
import subprocess
import sys

import pytest

from tests.processes import needs_horovod
from tests.support import REPO

pytestmark = needs_horovod

# The interpreter the script runs, with `import horovod.tensorflow` answered and counted
# instead of made: the rest (the libraries' fingerprint) is the real Python's.
PYTHON = """#!/usr/bin/env bash
if [[ $1 == -c && $2 == "import horovod.tensorflow" ]]; then
    echo import >>"$IMPORTS"
    exit 0
fi
exec {python} "$@"
"""


def test_a_stamp_of_the_same_libraries_stands_for_the_import_and_any_other_stamp_does_not(tmp_path):
    python = tmp_path / "python"
    python.write_text(PYTHON.format(python=sys.executable))
    python.chmod(0o755)
    imports, cache = tmp_path / "imports", tmp_path / "cache"
    env = {**os.environ, "PYTHON": str(python), "OPT_TRAIN_CACHE": str(cache), "IMPORTS": str(imports)}

    def install():
        done = subprocess.run(["bash", str(REPO / "scripts" / "install_horovod.sh")], env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0 and "nothing to do" in done.stdout, done.stdout + done.stderr
        return imports.read_text().count("import")

    assert install() == 1  # no stamp yet: imported, then stamped
    stamp = cache / "horovod-imports.stamp"
    assert "horovod/tensorflow/mpi_lib" in stamp.read_text() and sys.version in stamp.read_text()
    assert install() == 1  # the same libraries: the stamp answers
    written = stamp.read_text()
    stamp.write_text(written.replace("mpi_lib", "mpi_lib_of_another_build"))
    assert install() == 2  # another build's stamp: imported again, and stamped anew
    assert stamp.read_text() == written
