"""scripts/cpu_census.py: every Python process a command starts is counted once, with its own CPU and who started it, and the interpreter's site-packages is left as it was (in a throwaway venv)."""

import importlib.util
import os
import subprocess
import sys

from tests.support import REPO

SCRIPT = REPO / "scripts" / "cpu_census.py"
spec = importlib.util.spec_from_file_location("cpu_census", SCRIPT)
cpu_census = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cpu_census)
# A parent that starts a child spending at least 0.3 s of CPU.
PARENT = ("import subprocess, sys\n"
          "subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
          "while time.process_time() - t < 0.3: pass'], check=True)")


def test_a_parent_and_its_child_are_each_counted_once_and_site_packages_is_left_clean(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    packages = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    before = sorted(os.listdir(packages))
    # With bytecode written, as scripts/test.sh runs the suite: the recorder must leave no .pyc.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([python, str(SCRIPT), "--out", str(tmp_path / "records"), "--", python, "-c", PARENT],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    records = cpu_census.read(tmp_path / "records")
    assert len(records) == 2, records
    [parent] = [record for record in records.values() if record["ppid"] not in records]
    [child] = [record for record in records.values() if record["ppid"] == parent["pid"]]
    assert child["cpu"] >= 0.3 and not child["tensorflow"]
    assert done.stdout.startswith("2 processes, ") and "-c  <-  -c" in done.stdout, done.stdout
    assert sorted(os.listdir(packages)) == before
