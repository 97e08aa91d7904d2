"""The harness's children (floors, peak RSS) end as `opt-train` does: exit hooks run, output flushed, no teardown."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A child that measured something: TensorFlow is loaded (a stand-in here: the real one costs
# seconds to import), an object the interpreter's teardown would finalize, and an exit hook.
CHILD = """
import atexit, sys, types
stand_in = types.ModuleType("tensorflow")
stand_in.config = types.SimpleNamespace(list_physical_devices=list)
sys.modules.setdefault("tensorflow", stand_in)
class Finalized:
    def __del__(self):
        print(" teardown", end="")
held = Finalized()
atexit.register(print, " exit hook", end="")
from benchmarks import command_line
command_line(lambda: print("measured", end=""))
"""


def test_a_child_ends_without_the_interpreter_teardown_its_output_flushed():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "measured exit hook"
