"""`opt-train` as a command line (`cli.main.main()` without argv), once TensorFlow ran, ends with its exit hooks run
and its output flushed, and without the interpreter's teardown (finalizing objects, TensorFlow's thread pools)."""

import os
import subprocess
import sys

from tests.support import bare_environ

# A command's process: TensorFlow imported as a command imports it, one function AutoGraph converts
# (it writes the converted source to the temporary folder and registers an exit hook that removes it;
# importing the source caches its bytecode in __pycache__ beside it, which nothing of TensorFlow removes),
# a hook of the user's own and an object the teardown would finalize; then `opt-train --version`. A script
# file: AutoGraph reads the source of what it converts.
COMMAND = """
import atexit, os, sys, tempfile
from opt_train import quiet
from opt_train.cli.main import main
tf = quiet.import_tensorflow()

@tf.function(autograph=True)
def countdown(x):
    while x > 0:
        x -= 1
    return x

countdown(tf.constant(2))
print(sorted(name.partition("_file")[0] for name in os.listdir(tempfile.gettempdir())))
atexit.register(print, "exit hook")
class Finalized:
    def __del__(self):
        print("finalized")
held = Finalized()
sys.argv = ["opt-train", "--version"]
main()
print("main returned")
"""


def test_a_command_runs_its_exit_hooks_and_leaves_nothing_in_the_temporary_folder(tmp_path):
    # AutoGraph's hook used to be skipped with the teardown: every run that exported left two sources and their
    # bytecode in /tmp. The bytecode is written as by default (no PYTHONDONTWRITEBYTECODE).
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = bare_environ(TMPDIR=str(temporary))
    script = tmp_path / "command.py"
    script.write_text(COMMAND)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "['__autograph_generated', '__pycache__']", done.stdout  # before the exit
    assert lines[1:] == ["opt-train, version 0.1.0", "exit hook"], done.stdout
    assert list(temporary.iterdir()) == []
