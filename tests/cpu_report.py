"""The suite's CPU by test file, for choosing what to make cheaper: `bash scripts/test.sh -p tests.cpu_report`.

The suite is CPU-bound on 2 cores (three xdist workers keep both busy), so its time is its
CPU: each test's CPU seconds, its own process's and those of the child processes it waited
for (a worker, a trial, a launched rank), from `getrusage` around its setup, call and
teardown. Under xdist each worker measures its tests and the figure travels to the
controller in the teardown report's `user_properties`; the end of the run prints the files
that cost most, and the total. A server the suite starts and does not reap (PostgreSQL,
SLURM's daemons) is not counted.
"""

from __future__ import annotations

import collections
import resource

import pytest

PROPERTY = "cpu_seconds"
FILES_SHOWN = 25
_started = {}
_by_file = collections.defaultdict(float)
_tests_by_file = collections.Counter()


def _cpu_seconds():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _started[item.nodeid] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown" and item.nodeid in _started:
        outcome.get_result().user_properties.append((PROPERTY, _cpu_seconds() - _started.pop(item.nodeid)))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == PROPERTY:
            path = report.nodeid.split("::")[0]
            _by_file[path] += value
            _tests_by_file[path] += 1


def pytest_terminal_summary(terminalreporter):
    if not _by_file:
        return
    total = sum(_by_file.values())
    terminalreporter.section(f"CPU seconds by test file ({total:.0f} in all)")
    for path, seconds in sorted(_by_file.items(), key=lambda entry: -entry[1])[:FILES_SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f}  {_tests_by_file[path]:4d} tests  {path}")
