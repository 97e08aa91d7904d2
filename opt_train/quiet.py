"""TensorFlow's and absl's log lines: silenced for every command unless `--verbose` (TF-free; call before TF loads).

TensorFlow writes C++ lines (oneDNN notices, CUDA probing, `E0000 ... cuInit`) below
`TF_CPP_MIN_LOG_LEVEL`, and Python lines through the `tensorflow` and `absl` loggers
(restore warnings of a checkpoint that does not fit, deprecation notes). opt-train says
what matters in its own lines; these bury them. The setting is read when TensorFlow
loads, and child processes (sweep trials, Horovod ranks) inherit it through the
environment.
"""

from __future__ import annotations

import logging
import os

# Set (to "1") by --verbose, so child processes show TensorFlow's lines too.
VERBOSE_VARIABLE = "OPT_TRAIN_VERBOSE"


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


def import_tensorflow():
    """Imports TensorFlow with its C++ start-up lines (oneDNN, CUDA probing) silenced.

    TF 2.21 prints them before absl logging is initialised, so TF_CPP_MIN_LOG_LEVEL
    does not reach them; file descriptor 2 is pointed at /dev/null for the import
    and device discovery only. `--verbose` (TF_CPP_MIN_LOG_LEVEL=0) shows them.
    Keras comes in without its optional bridges (`opt_train.keras_bridges`).
    """
    from opt_train.keras_bridges import left_out

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
