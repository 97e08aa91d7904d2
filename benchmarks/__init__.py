"""The performance harness: opt-train's training step against hand-written and `Model.fit` baselines.

Run everything with one command from the repository root:

    python -m benchmarks.run [--quick] [--out FILE]   (default: benchmarks/results/<date>-harness.json)

See benchmarks/README.md for what is measured and the latest figures.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_environment():
    """A fresh `opt-train` process's environment: TensorFlow quiet, this checkout imported, and none of
    the variables of a launched worker this benchmark may run in."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO)}
    for variable in ("TF_CONFIG", "OPT_TRAIN_LAUNCHED"):
        env.pop(variable, None)
    return env


def command_line(main):
    """`python -m benchmarks.<child>`: TensorFlow imported and the process ended as `opt-train` does, `main()` between.

    Without the interpreter's teardown of TensorFlow's objects and thread pools once
    TensorFlow ran: 1.5-2 s of CPU a process, nothing of which a measurement needs
    (its output is flushed first; see opt_train.cli.main and benchmarks/exit_latency.py).
    """
    from opt_train import quiet
    from opt_train.cli.main import _exit_without_teardown

    quiet.import_tensorflow()  # as a command imports it: Keras without its optional bridges
    main()
    _exit_without_teardown(0)


def opt_train_here(args):
    """`opt-train <args>` in this process, its output kept as a fresh process's would be: (exit code, output).

    What a `--quick` run does where a full one starts a fresh process: each costs a
    TensorFlow import, and no `--quick` figure means anything.
    """
    import contextlib
    import io

    from opt_train.cli.main import cli

    output = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        try:
            cli.main(args=args, prog_name="opt-train")  # the command's group: no process-wide log settings
        except SystemExit as stop:
            code = stop.code
    return code, output.getvalue()
