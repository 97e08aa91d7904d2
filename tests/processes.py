"""Starting real worker processes for tests: horovodrun ranks and tf.distribute workers, each with its TF_CONFIG, on localhost."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest

from tests.support import REPO

JOB_TIMEOUT_SECONDS = 900  # far above a normal run; reaching it means a hang
LAUNCH_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
HOROVOD_INSTALLED = importlib.util.find_spec("horovod") is not None
# Skips a test that needs Horovod where it is not installed.
needs_horovod = pytest.mark.skipif(not HOROVOD_INSTALLED,
                                   reason="Horovod is not installed (bash scripts/install_horovod.sh)")


# Horovod's own `horovodrun` (horovod.runner.launch), with one preflight answered instead of
# run: before each launch it asks whether Horovod was built with Gloo by importing
# horovod.tensorflow, so TensorFlow, in a forked process (~10 s of CPU, a third of a small
# job's). The ranks' hvd.init() over Gloo answers that anyway; the rendezvous, the ranks'
# environment, their output, ending them and the exit code are horovodrun's, unchanged.
HOROVODRUN = (
    "import sys\n"
    "from horovod.runner import launch\n"
    "launch.gloo_built = lambda verbose=False: True\n"
    "sys.argv[0] = 'horovodrun'\n"
    "sys.exit(launch.run_commandline())\n"
)


# See tests/distributed/horovodrun_grace.py: the wait for a rank horovodrun ends, set in its
# spawned middleman processes.
SHORT_GRACE = (
    "import os\n"
    "from horovod.runner.common.util import safe_shell_exec\n"
    "from tests.distributed import horovodrun_grace\n"
    "os.environ[horovodrun_grace.VARIABLE] = '{seconds}'\n"
    "safe_shell_exec._exec_middleman = horovodrun_grace.exec_middleman\n"
)


def horovodrun_argv(*command, ranks=2, grace_seconds=None):
    """`horovodrun -np RANKS -H localhost:RANKS --gloo COMMAND...` as an argument list (see HOROVODRUN).

    `grace_seconds`: how long horovodrun waits for a rank to end on SIGTERM before SIGKILL (None:
    its own 5 s); shorter only where the rank it ends is stopped, so the grace is only waiting.
    """
    script = HOROVODRUN if grace_seconds is None else SHORT_GRACE.format(seconds=grace_seconds) + HOROVODRUN
    return [sys.executable, "-c", script, "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo", *command]


def horovodrun(*command):
    """`horovodrun -np 2 -H localhost:2 --gloo COMMAND...` as a finished subprocess."""
    return subprocess.run(
        horovodrun_argv(*command), cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True,
        timeout=JOB_TIMEOUT_SECONDS,
    )


def free_ports(count):
    """`count` distinct free TCP ports on localhost (held open together while chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports, index):
    """The TF_CONFIG of worker `index` of a job of localhost workers on `ports`."""
    workers = [f"localhost:{port}" for port in ports]
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def run_tf_workers(command, count=2, timeout=JOB_TIMEOUT_SECONDS, tf_configs=None):
    """`command` started `count` times by hand, each with its own TF_CONFIG; returns the finished jobs.

    `tf_configs`: each worker's TF_CONFIG (default: one job of localhost workers on free ports).
    """
    if tf_configs is None:
        ports = free_ports(count)
        tf_configs = [tf_config(ports, i) for i in range(count)]
    jobs = [
        subprocess.Popen(command, cwd=REPO, env={**LAUNCH_ENV, "TF_CONFIG": text},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for text in tf_configs
    ]
    try:
        outputs = [job.communicate(timeout=timeout)[0] for job in jobs]
    finally:
        for job in jobs:
            job.kill()
    return [(job.returncode, output) for job, output in zip(jobs, outputs)]
