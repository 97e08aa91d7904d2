"""Small helpers shared by test modules (import as `from tests.support import ...`)."""

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading

import yaml

from opt_train import quiet

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

# One or two optimizers of each family (TF1, Keras, OpenSeq2Seq, RETURNN): the cases of a test run once per
# optimizer that stay in the fast subset; the others run with the slow tests. Each optimizer's own update rule
# has its parity test under tests/optimizers.
FAST_OPTIMIZERS = frozenset({"Momentum", "Adam", "SGD", "AdamW", "NovoGrad", "AMSGrad"})


def optimizer_cases(names):
    """`names` as pytest params, those outside FAST_OPTIMIZERS marked slow."""
    import pytest

    return [name if name in FAST_OPTIMIZERS else pytest.param(name, marks=pytest.mark.slow) for name in names]


# A run of seconds (an 8-unit mlp on the digits, Adam), for tests of what training leaves in a logdir.
SMALL_RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [8]},
    "data": "digits",
    "batch_size_per_gpu": 16,
    "optimizer": "Adam",
    "optimizer_params": {"learning_rate": 0.01},
    "max_steps": 6,
}


def write_run(folder, run, name="config.yaml", logdir="run"):
    """Writes the run config `run` (a dict) to folder/name as YAML, its keys in their order; returns the path.

    Its `logdir` is folder/logdir (which replaces one `run` names); `logdir=None` leaves `run`'s
    own, or none. The folder is made when missing.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    payload = dict(run) if logdir is None else {**run, "logdir": str(folder / logdir)}
    path = folder / name
    path.write_text(yaml.safe_dump(payload, sort_keys=False))
    return path


@contextlib.contextmanager
def without_export():
    """Runs in this process skip the end-of-run export (for tests that never look at logdir/export).

    Writing the SavedModel traces the model again: about a sixth of a 60-update run of a
    small MLP on 2 cores. The export itself is tests/models/test_export.py's (and test_ema.py's).
    """
    from unittest import mock

    from opt_train.training import export

    with mock.patch.object(export, "export_at_end", lambda run, say: None):
        yield


def train_in_process(folder, run, export=False):
    """`(config, logdir, output)`: `run` written to folder/config.yaml and trained by `opt-train train` in this
    process, into folder/run; without the end-of-run export unless `export`.

    A plain function, not a session fixture: a fixture wider than its module would put every test
    using it in one xdist group (tests/conftest.py), though it shares nothing but this code.
    """
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    config = write_run(folder, run)
    with contextlib.nullcontext() if export else without_export():
        result = CliRunner().invoke(cli, ["train", "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return config, pathlib.Path(folder) / "run", result.output


def copy_run(logdir, to):
    """A copy at `to` (returned) of the finished run in `logdir`, without its lock file: a module's trained
    run, copied for each test that changes it, is then a logdir nobody holds."""
    import shutil

    from opt_train.training.logdir import LOCK_FILE

    shutil.copytree(logdir, to)
    (pathlib.Path(to) / LOCK_FILE).unlink(missing_ok=True)
    return pathlib.Path(to)


# What a cluster launcher hands its workers: the machine running the tests must not pass
# any of them to the runs and launchers the tests start, nor into a config's verdict.
LAUNCH_VARIABLES = ("TF_CONFIG", "HOROVOD_SIZE", "HOROVOD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "OPT_TRAIN_LAUNCHED")


# What `quiet.configure` sets for `--verbose`: a test's process (an xdist worker) passes its
# environment on to every later test's child processes (tests/conftest.py checks it is kept).
QUIET_SETTINGS = ("TF_CPP_MIN_LOG_LEVEL", quiet.VERBOSE_VARIABLE)


def bare_environ(**extra):
    """A user's bare environment for a fresh process: the system's PATH, this checkout importable, TensorFlow
    quiet, and the suite's temporary folder (tests/conftest.py), with `extra` over them."""
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3",
            "TMPDIR": tempfile.gettempdir(), **extra}


def rest_of_output(process, timeout):
    """What `process` writes to its stdout pipe from here on, once it has ended; killed after `timeout` seconds.

    Not `process.communicate(timeout=...)`: with a timeout it reads the pipe's file descriptor itself,
    and loses what an earlier `readline()` or `for line in process.stdout` had already taken into the
    file object's buffer (a sweep worker's lines that came with the one a test waited for).
    """
    rest = []
    reader = threading.Thread(target=lambda: rest.append(process.stdout.read()), daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join()
    return rest[0]


def unlaunched_environ(**extra):
    """This process's environment without `LAUNCH_VARIABLES`, plus `extra`."""
    return {**{key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES}, **extra}


def checkpoint_tensors(logdir):
    """Every tensor of the run's latest checkpoint by name (weights, slots, lr position, pipeline state),
    TensorFlow's bookkeeping left out: what an exact resume must give back."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(pathlib.Path(logdir) / "checkpoints")))
    bookkeeping = ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter/")
    names = sorted(n for n in reader.get_variable_to_shape_map() if not n.startswith(bookkeeping))
    return {name: reader.get_tensor(name) for name in names}


def read_json(path):
    return json.loads(pathlib.Path(path).read_text())


def read_jsonl(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]


def signals_as_a_terminal_leaves_them():
    """A child's `preexec_fn`: SIGINT and SIGTERM at their defaults, as a process started from a terminal has them.

    A suite started as a background job (`cmd &`, no job control) has SIGINT ignored; its children
    inherit that, and Python (or a shell) then raises or dies on nothing.
    """
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def run_python(code, *args, cwd=None):
    """`python -c code ARGS` in a fresh process that imports this checkout's `opt_train`; output captured as text."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
    )


# The end of a fresh process's script that ran TensorFlow, its exit hooks run and its output
# flushed: without the interpreter's teardown of TensorFlow and Keras (1-4 s of CPU a process on
# a loaded 2-core host), as `opt-train` itself ends (opt_train/cli/main.py `_exit_without_teardown`).
END_WITHOUT_TEARDOWN = (
    "from opt_train.cli.main import _exit_without_teardown as _end\n"
    "_end(0)\n"
)

# The check a fresh process ends with when a command must not load TensorFlow.
NO_TENSORFLOW = (
    "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    "assert 'keras' not in sys.modules, 'keras imported'\n"
)


def main_code(*invocations, on_exit="pass", then=NO_TENSORFLOW):
    """Source for `run_python`: `opt_train.cli.main.main(args)` for each invocation, then `then`.

    `on_exit` is the body of `except SystemExit as stop:` (`args` and `stop` in scope).
    """
    return (
        "import sys\n"
        "from opt_train.cli.main import main\n"
        f"for args in {[list(map(str, args)) for args in invocations]!r}:\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as stop:\n"
        f"        {on_exit}\n"
        f"{then}"
    )


def one_error_line(result):
    """The one `Error: ` line of a CLI result, which must show no traceback."""
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def fill_disk(folder):
    """Writes zeros into `folder/filler` until the file system is full."""
    with open(pathlib.Path(folder) / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass


def rank_pid(rank, marker):
    """The pid of the Horovod rank `rank` whose command line contains `marker` (None: not running)."""
    for entry in pathlib.Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if marker.encode() in cmdline and f"HOROVOD_RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def ended_pid():
    """The id of a process that has ended and been reaped (one whose temporary folders are orphans)."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    return ended.pid
