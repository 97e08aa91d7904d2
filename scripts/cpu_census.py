"""Where a command's CPU goes, per process: every Python process it starts logs its own CPU at exit, and the processes are summed by what they ran and who started them.

    python scripts/cpu_census.py                        # the whole suite (bash scripts/test.sh -q)
    python scripts/cpu_census.py -- python -m pytest -n 0 tests/e2e/test_sweep.py

For the command's run, a `.pth` file in this Python's site-packages makes every process of this
interpreter (children of children, os._exit included) write `{pid, ppid, argv, cpu, tensorflow}`
to a folder when it ends. The file is removed afterwards, after a Ctrl-C too; if this process is
killed, it stays, inert without the variable it asks for. A process killed by SIGKILL writes
nothing, and a Python other than this one is not seen. `tests.cpu_report` counts
by test file; this counts by process, which is what says whether a change to how processes start
can pay (docs/development.md).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import site
import subprocess
import sys
import tempfile

VARIABLE = "OPT_TRAIN_CPU_CENSUS"
MODULE = "_opt_train_cpu_census"
# Inert without the variable, silent on any failure (a process of another run must not notice it),
# and writing no bytecode of the recorder: nothing of it stays in site-packages.
_IMPORT = "\n".join(["try:", " written = sys.dont_write_bytecode", " sys.dont_write_bytecode = True", " try:",
                     f"  import {MODULE}", " finally:", "  sys.dont_write_bytecode = written",
                     "except Exception:", " pass"])
PTH_LINE = f"import os, sys; exec({_IMPORT!r}) if os.environ.get({VARIABLE!r}) else None\n"
RECORDER = f'''"""Writes this process's CPU seconds at exit into ${VARIABLE} (scripts/cpu_census.py)."""
import atexit, json, os, sys

def _write():
    times = os.times()
    record = {{"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:4], "cpu": times.user + times.system,
              "tensorflow": "tensorflow" in sys.modules}}
    try:
        with open(os.path.join(os.environ["{VARIABLE}"], f"{{os.getpid()}}.json"), "w") as handle:
            json.dump(record, handle)
    except Exception:
        pass

def _exit(code, _exit=os._exit):
    _write()
    _exit(code)

atexit.register(_write)
os._exit = _exit
'''
TEST_COMMAND = ["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test.sh"), "-q"]
ROWS_SHOWN = 30


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the folder for the records (default: a temporary one, removed)")
    parser.add_argument("command", nargs="*", help="the command to count (after --; default: the whole suite)")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = options.out or scratch
        os.makedirs(folder, exist_ok=True)
        code = run(options.command or TEST_COMMAND, folder)
        print(table(read(folder)))
    return code


def run(command, folder):
    """Runs `command` with every process of this Python recording into `folder`; its exit code."""
    packages = site.getsitepackages()[0]
    recorder, pth = os.path.join(packages, f"{MODULE}.py"), os.path.join(packages, f"{MODULE}.pth")
    with open(recorder, "w", encoding="utf-8") as handle:
        handle.write(RECORDER)
    try:
        with open(pth, "w", encoding="utf-8") as handle:
            handle.write(PTH_LINE)
        return subprocess.run(command, env={**os.environ, VARIABLE: os.path.abspath(folder)}, check=False).returncode
    finally:
        for path in (pth, recorder):  # the .pth first: nothing imports the recorder after it
            if os.path.exists(path):
                os.remove(path)


def read(folder):
    """{pid: record} of the processes that wrote one."""
    records = {}
    for path in glob.glob(os.path.join(folder, "*.json")):
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        records[record["pid"]] = record
    return records


def describe(argv):
    """A process's command in a few words: its script or module and first argument."""
    if not argv:
        return "?"
    program = argv[0]
    if os.path.basename(program) == "__main__.py":  # `python -m package`: the package
        program = os.path.dirname(program)
    words = [os.path.basename(program) if program != "-c" else program]
    words += [os.path.basename(word) if os.sep in word else word for word in argv[1:3]]
    return " ".join(words)[:48]


def table(records):
    """The records summed by (command, parent's command), costliest first."""
    cpu, count, tensorflow = collections.Counter(), collections.Counter(), collections.Counter()
    for record in records.values():
        parent = records.get(record["ppid"])
        key = describe(record["argv"]), describe(parent["argv"]) if parent else "(not recorded)"
        cpu[key] += record["cpu"]
        count[key] += 1
        tensorflow[key] += record["tensorflow"]
    lines = [f"{len(records)} processes, {sum(cpu.values()):.0f} CPU-s; "
             f"{sum(tensorflow.values())} imported TensorFlow ({sum(r['cpu'] for r in records.values() if r['tensorflow']):.0f} CPU-s)",
             f"{'CPU-s':>8} {'procs':>5} {'TF':>4}  command  <-  started by"]
    for key, seconds in cpu.most_common(ROWS_SHOWN):
        lines.append(f"{seconds:8.1f} {count[key]:5d} {tensorflow[key]:4d}  {key[0]}  <-  {key[1]}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
