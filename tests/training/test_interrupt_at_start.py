"""Ctrl-C while `train` is still importing TensorFlow exits 130, like a Ctrl-C during training."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support import REPO, signals_as_a_terminal_leaves_them, write_run


def _tensorflow_loaded(pid):
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
            return "libtensorflow" in maps.read()
    except OSError:
        return False


def test_ctrl_c_during_the_tensorflow_import_exits_130(tmp_path):
    config = write_run(tmp_path, {"max_steps": 5})
    process = subprocess.Popen(
        [sys.executable, "-m", "opt_train", "train", "--config", str(config)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=signals_as_a_terminal_leaves_them,
    )
    # The TensorFlow library is mapped at the start of its import, seconds before it ends.
    deadline = time.monotonic() + 120
    while not _tensorflow_loaded(process.pid) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, out + err
    assert "Traceback" not in err and "Aborted!" not in err
    assert "interrupted by SIGINT before training started" in err  # not an exit without a word


# A Ctrl-C where the import's own code would lose it, made to land there exactly: the region
# of the import (keras_bridges.left_out) is entered through `ctrl_c`, which sends SIGINT and
# goes on running Python, where the KeyboardInterrupt is raised.
CTRL_C_IN_THE_IMPORT = """
import contextlib, os, signal
from opt_train import keras_bridges
from opt_train.cli.main import main

def land():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass

class Finalized:
    def __del__(self):
        land()

def ctrl_c():
{ctrl_c}

left_out = keras_bridges.left_out

@contextlib.contextmanager
def left_out_after_a_ctrl_c():
    ctrl_c()
    with left_out():
        yield

keras_bridges.left_out = left_out_after_a_ctrl_c
main()
"""
WHERE_IT_LANDS = {
    # In a finalizer (the garbage collector runs many during the import): Python prints
    # "Exception ignored" (to the silenced stderr) and drops it; the run trained and exited 0.
    "dropped-by-a-finalizer": "    Finalized()",
    # In code that turns it into another error: the ImportError's traceback, exit 1.
    "turned-into-an-import-error": (
        "    try:\n        land()\n    except KeyboardInterrupt:\n        raise ImportError('a half-made module')"
    ),
}


@pytest.mark.parametrize("where", list(WHERE_IT_LANDS))
def test_ctrl_c_the_import_would_lose_still_exits_130(tmp_path, where):
    config = write_run(tmp_path, {"max_steps": 5})
    child = CTRL_C_IN_THE_IMPORT.replace("{ctrl_c}", WHERE_IT_LANDS[where])
    done = subprocess.run(
        [sys.executable, "-c", child, "train", "--config", str(config)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
        preexec_fn=signals_as_a_terminal_leaves_them,
    )
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted by SIGINT before training started" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()
