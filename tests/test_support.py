"""The suite's helpers for processes (tests/support.py) that a test could get wrong without failing."""

import subprocess
import sys

import pytest

from tests.support import rest_of_output

# Three lines in one write (shorter than the pipe's atomic size): a test's readline() takes the
# first, and the file object's buffer the other two.
THREE_LINES = "import sys; sys.stdout.write('a\\nb\\nc\\n'); sys.stdout.flush()"


def _after_one_line():
    process = subprocess.Popen([sys.executable, "-c", THREE_LINES], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "a\n"
    return process


def test_rest_of_output_keeps_the_lines_already_buffered_where_communicate_with_a_timeout_loses_them():
    assert _after_one_line().communicate(timeout=60)[0] == ""  # what the helper exists for
    process = _after_one_line()
    assert rest_of_output(process, timeout=60) == "b\nc\n"
    assert process.returncode == 0


def test_rest_of_output_kills_a_process_that_outlives_its_timeout():
    process = subprocess.Popen([sys.executable, "-c", "import time; print('a', flush=True); time.sleep(600)"],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "a\n"
    with pytest.raises(subprocess.TimeoutExpired):
        rest_of_output(process, timeout=0.5)
    assert process.returncode == -9
