"""`-p tests.cpu_report`: each test file's CPU, its child processes' included, reaches the report under xdist."""

import re
import subprocess
import sys

import pytest

from tests.support import bare_environ

# A child that spends 0.6 s of CPU and says how much it spent, by its own clock.
CHILD = """
import time
end = time.process_time() + 0.6
while time.process_time() < end:
    pass
print(time.process_time())
"""
BUSY_TESTS = """
import pathlib, subprocess, sys


def test_spends_cpu_in_a_child():
    subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("child.py"))], check=True)


def test_idle():
    pass
"""


@pytest.mark.slow  # a pytest run with two xdist workers: about 6 s
def test_the_report_counts_a_tests_child_process_under_xdist(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "test_busy.py").write_text(BUSY_TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "-p", "tests.cpu_report", "-n", "2", str(tmp_path)],
        cwd=tmp_path, env=bare_environ(), capture_output=True, text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [row] = [line for line in run.stdout.splitlines() if line.endswith("test_busy.py")]
    seconds, tests = re.match(r"\s*([\d.]+)\s+(\d+) tests", row).groups()
    # The reference: the child's own CPU clock, which the report must include (it adds the test's own).
    assert int(tests) == 2 and float(seconds) >= 0.6, run.stdout[-3000:]
    assert re.search(r"CPU seconds by test file \(\d+ in all\)", run.stdout)
