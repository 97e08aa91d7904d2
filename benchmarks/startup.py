"""Start-up costs, each in a fresh process: `opt-train --help`, TensorFlow's import, the first training step, `--benchmark`.

`--benchmark` runs in the harness's own process in a `--quick` run (`cli_benchmark(in_process=True)`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

_FIRST_STEP_LINE = re.compile(r"^step 1/")


def _command():
    """This Python's console script, else the one on PATH, else the module.

    The one beside `sys.executable` first: on PATH a version manager's shim (pyenv's is a
    bash script that runs `pyenv exec`) can come first and add its own start-up, 0.07 s on
    2026-11-29, to every figure.
    """
    beside = os.path.join(os.path.dirname(sys.executable), "opt-train")
    script = beside if os.access(beside, os.X_OK) else shutil.which("opt-train")
    return [script] if script else [sys.executable, "-m", "opt_train"]


def _environment():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


def help_seconds(runs=5):
    """Median wall time of `opt-train --help` over `runs` fresh processes."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*_command(), "--help"], check=True, capture_output=True, env=_environment(),
                       timeout=SUBPROCESS_TIMEOUT_SECONDS)
        times.append(time.perf_counter() - start)
    return {"median_seconds": statistics.median(times), "runs_seconds": [round(t, 4) for t in times]}


# A start-up measurement that takes longer than this is broken, not slow.
SUBPROCESS_TIMEOUT_SECONDS = 600

# TensorFlow's import as a command does it (Keras without its optional bridges,
# `opt_train.keras_bridges`) and plain; each child prints its CPU and wall seconds.
_IMPORTS = {
    "opt_train": "from opt_train import quiet; quiet.import_tensorflow()",
    "plain": "import tensorflow; tensorflow.config.list_physical_devices()",
}
_TIMED_IMPORT = (
    "import json, time\n"
    "cpu, wall = time.process_time(), time.perf_counter()\n"
    "{statement}\n"
    "print(json.dumps([time.process_time() - cpu, time.perf_counter() - wall]))\n"
)


def tensorflow_import_seconds(runs=5):
    """CPU and wall seconds of TensorFlow's import in fresh processes, a command's way against plain.

    The two alternate (opt_train, plain, plain, opt_train, ...) so a drift of the
    machine's speed touches both; `cpu_ratio` is plain's median CPU over opt_train's.
    """
    seconds = {name: [] for name in _IMPORTS}
    for run in range(runs):
        for name in (list(_IMPORTS) if run % 2 == 0 else list(reversed(_IMPORTS))):
            finished = subprocess.run([sys.executable, "-c", _TIMED_IMPORT.format(statement=_IMPORTS[name])],
                                      check=True, capture_output=True, text=True, env=_environment(),
                                      timeout=SUBPROCESS_TIMEOUT_SECONDS)
            seconds[name].append(json.loads(finished.stdout.splitlines()[-1]))
    figures = {
        name: {"median_cpu_seconds": statistics.median(cpu for cpu, _ in values),
               "median_wall_seconds": statistics.median(wall for _, wall in values),
               "runs_cpu_seconds": [round(cpu, 3) for cpu, _ in values]}
        for name, values in seconds.items()
    }
    figures["cpu_ratio"] = round(figures["plain"]["median_cpu_seconds"] / figures["opt_train"]["median_cpu_seconds"], 3)
    return figures


def first_step_seconds(config_path, overrides, logdir):
    """Seconds from launching `opt-train train --set max_steps=1` to its `step 1/1` line, and to its exit.

    The progress line is printed right after the first update, so the first figure
    is start-up + building + tracing + one step; the second adds the final
    evaluation and checkpoint.
    """
    args = [*_command(), "train", "--config", config_path, "--no-resume", "--set", "max_steps=1",
            "--set", f"logdir={logdir}"]
    for override in overrides:
        args += ["--set", override]
    start = time.perf_counter()
    # stderr joins stdout: one pipe read to its end can never fill and block the child.
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=_environment())
    first_step = None
    output = []
    for line in process.stdout:
        output.append(line)
        if first_step is None and _FIRST_STEP_LINE.match(line):
            first_step = time.perf_counter() - start
    process.wait(timeout=SUBPROCESS_TIMEOUT_SECONDS)
    total = time.perf_counter() - start
    if process.returncode != 0:
        return {"error": f"exit code {process.returncode}: {''.join(output).strip()[-400:]}"}
    return {"to_first_step_seconds": first_step, "to_exit_seconds": total}


def cli_benchmark(config_path, overrides, logdir, max_steps, in_process=False):
    """`opt-train train --benchmark`: its own time per step and samples/s, read from final_metrics.json.

    `in_process` (`--quick`): the command runs in this process (`benchmarks.opt_train_here`),
    not in a fresh one.
    """
    args = ["train", "--config", config_path, "--benchmark", "--no-resume",
            "--set", f"max_steps={max_steps}", "--set", f"logdir={logdir}"]
    for override in overrides:
        args += ["--set", override]
    if in_process:
        from benchmarks import opt_train_here

        code, stdout = opt_train_here(args)
        stderr = stdout
    else:
        finished = subprocess.run([*_command(), *args], capture_output=True, text=True, env=_environment(),
                                  timeout=SUBPROCESS_TIMEOUT_SECONDS)
        code, stdout, stderr = finished.returncode, finished.stdout, finished.stderr
    if code != 0:
        return {"error": f"exit code {code}: {stderr.strip()[-400:]}"}
    with open(os.path.join(logdir, "final_metrics.json"), encoding="utf-8") as handle:
        metrics = json.load(handle)
    summary = [line for line in stdout.splitlines() if line.startswith("benchmark:")]
    return {
        **{key.split("/", 1)[1]: value for key, value in metrics.items() if key.startswith("benchmark/")},
        "printed": summary[-1] if summary else None,
    }
