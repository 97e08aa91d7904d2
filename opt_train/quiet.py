"""TensorFlow's and absl's log lines: silenced for every command unless `--verbose` (TF-free; call before TF loads).

`import_tensorflow` is the one import of TensorFlow by a command: silenced, with a
Ctrl-C during it kept (see `_ctrl_c_kept`), and not walked by the garbage collector (see
`_collector_paused`).

TensorFlow writes C++ lines (oneDNN notices, CUDA probing, `E0000 ... cuInit`) below
`TF_CPP_MIN_LOG_LEVEL`, and Python lines through the `tensorflow` and `absl` loggers
(restore warnings of a checkpoint that does not fit, deprecation notes). opt-train says
what matters in its own lines; these bury them. The setting is read when TensorFlow
loads, and child processes (sweep trials, Horovod ranks) inherit it through the
environment.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import threading

# Set (to "1") by --verbose, so child processes show TensorFlow's lines too.
VERBOSE_VARIABLE = "OPT_TRAIN_VERBOSE"
# DTensor's all-reduce combine pass: off ("0") unless the user set it. With it on, TF 2.21 can
# make a read of a DVariable inside a step return its value from before an assign earlier in
# the same step (a mesh run's Momentum drifted by 5e-2 in 5 steps, no error). Read when
# TensorFlow starts, so it is set at its one import; it changes nothing outside a mesh.
DTENSOR_COMBINE_VARIABLE = "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION"


def configure(verbose=None):
    """Silences TensorFlow's and absl's logs, or with `verbose` (default: the environment's) shows them."""
    if verbose is None:
        verbose = os.environ.get(VERBOSE_VARIABLE) == "1" or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0"
    if verbose:
        os.environ[VERBOSE_VARIABLE] = "1"
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
        level = logging.INFO
    else:
        # A user's own TF_CPP_MIN_LOG_LEVEL is kept; 3 hides the C++ errors too (cuInit on a CPU machine).
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        level = logging.ERROR
    logging.getLogger("tensorflow").setLevel(level)
    try:
        from absl import logging as absl_logging
    except ImportError:
        return
    absl_logging.set_verbosity(absl_logging.INFO if verbose else absl_logging.ERROR)
    logging.getLogger("absl").setLevel(level)


def verbose():
    """True under `--verbose` (or `OPT_TRAIN_VERBOSE=1`), once `configure` ran: for lines only it shows."""
    return os.environ.get(VERBOSE_VARIABLE) == "1"


def import_tensorflow():
    """Imports TensorFlow with its C++ start-up lines (oneDNN, CUDA probing) silenced.

    TF 2.21 prints them before absl logging is initialised, so TF_CPP_MIN_LOG_LEVEL
    does not reach them; file descriptor 2 is pointed at /dev/null for the import
    and device discovery only. `--verbose` (TF_CPP_MIN_LOG_LEVEL=0) shows them.
    Keras comes in without its optional bridges (`opt_train.keras_bridges`).
    """
    with _ctrl_c_kept(), _collector_paused():
        return _import_tensorflow()


def _import_tensorflow():
    from opt_train.keras_bridges import left_out

    os.environ.setdefault(DTENSOR_COMBINE_VARIABLE, "0")

    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2") == "0":
        with left_out():
            import tensorflow

        return tensorflow
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        with left_out():
            import tensorflow

        tensorflow.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return tensorflow


@contextlib.contextmanager
def _collector_paused():
    """The garbage collector is off for TensorFlow's first import, and what it made is frozen afterwards.

    The import leaves about 450,000 objects tracked by the collector, nearly all of them live
    for the whole process (modules, classes, op definitions), and about 1,700 garbage. Python's
    thresholds ran five full collections during the import and, after it, young collections that
    walk the import's objects again: about 0.7 s of CPU out of 5 in a 40-update run (2026-11-29),
    paid by every command, worker, rank and sweep trial. `gc.freeze()` moves the import's objects
    to the permanent generation, which later collections skip (the few garbage among them
    stay). A caller that turned the collector off, or a process that has TensorFlow already,
    is left as it is.
    """
    if "tensorflow" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
    gc.freeze()


@contextlib.contextmanager
def _ctrl_c_kept():
    """A Ctrl-C during the import ends the command even if it landed in a finalizer.

    Python raises KeyboardInterrupt in whatever Python code runs when SIGINT arrives. In
    a `__del__` or a weakref callback (the garbage collector runs many during
    TensorFlow's import) it is printed as "Exception ignored" (to the silenced stderr)
    and dropped, and the command went on to train. The signal is recorded as well, and
    raised again once the import is done, or instead of what an import cut short raised.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # a caller's own handler (a launcher, a test) is left alone
        return
    received = []

    def interrupt(number, frame):
        received.append(number)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    except BaseException:
        if received:  # whatever the cut-short import raised instead (an ImportError of a half-made module)
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if received:
        raise KeyboardInterrupt
