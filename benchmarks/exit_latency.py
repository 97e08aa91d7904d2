"""Where the time after `done:` goes: `opt-train train` timed from its last line to the process's end.

Each run is a fresh process on a small config. The child marks three moments on its
stderr: the `done:` line (stdout), the CLI's return (before the interpreter's teardown:
atexit handlers, module and object finalisation, TensorFlow's thread pools), and the
parent sees the exit. `python -m benchmarks.exit_latency [runs]` prints one JSON object.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

CONFIG = {
    "model": "mlp", "model_params": {"hidden_units": [16]}, "data": "digits", "batch_size_per_gpu": 16,
    "optimizer": "Adam", "optimizer_params": {"learning_rate": 0.01}, "max_steps": 20,
}

# The child: `opt-train train`, with the moment the CLI returns written to stderr.
CHILD = """
import sys, time
from opt_train.cli.main import cli
try:
    cli.main(args=sys.argv[1:], prog_name="opt-train", standalone_mode=False)
finally:
    sys.stderr.write(f"RETURNED {time.time()}\\n")
    sys.stderr.flush()
"""


def one_run(folder, command):
    """`command` "teardown": the CLI with Python's usual exit (the cause); "opt-train": the real command."""
    config = os.path.join(folder, "config.yaml")
    with open(config, "w", encoding="utf-8") as handle:
        yaml.safe_dump({**CONFIG, "logdir": os.path.join(folder, "run")}, handle)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.getcwd()}
    program = ["-c", CHILD] if command == "teardown" else ["-m", "opt_train"]
    process = subprocess.Popen([sys.executable, *program, "train", "--config", config, "--no-resume"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    done_at = None
    for line in process.stdout:
        if line.startswith("done:"):
            done_at = time.time()
    stderr = process.stderr.read()
    process.wait()
    exited_at = time.time()
    returned = [float(line.split()[1]) for line in stderr.splitlines() if line.startswith("RETURNED ")]
    if done_at is None or process.returncode != 0:
        raise RuntimeError(f"the run failed ({process.returncode}): {stderr[-2000:]}")
    figures = {"done_to_exit": exited_at - done_at}
    if returned:
        figures.update(done_to_return=returned[0] - done_at, return_to_exit=exited_at - returned[0])
    return figures


def main(runs=3):
    report = {"load_before": os.getloadavg()}
    for command in ("teardown", "opt-train"):
        results = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as folder:
                results.append(one_run(folder, command))
        report[command] = {key: round(statistics.median(r[key] for r in results), 3) for key in results[0]}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
