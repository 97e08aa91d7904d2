"""What every command shares: the config options and the mapping of errors to exit codes."""

from __future__ import annotations

import contextlib
import os
import functools
import signal

import click

from opt_train.config import ConfigError, ConfigIssue, load_config
from opt_train.distributed.base import HorovodUnavailableError
from opt_train.distributed.cluster import ClusterError
from opt_train.distributed.launcher import LAUNCHED_VARIABLE
from opt_train.errors import FAILED_EXIT_CODE, USAGE_EXIT_CODE, ParamError, signal_exit_code
from opt_train.training.errors import Interrupted, RunRefused, TrainingFailed


class ConfigUsageError(click.UsageError):
    """A bad config or bad usage: exit 2, the problems one per line, no usage banner."""

    exit_code = USAGE_EXIT_CODE

    def show(self, file=None):
        click.echo(f"Error: {self.format_message()}", file=file, err=True)


class TrainingFailedError(click.ClickException):
    """The run started and failed: exit 1, no traceback."""

    exit_code = FAILED_EXIT_CODE


# eval, export and predict from a checkpoint: with use_ema they take the averaged weights, as
# the run's own evaluations and export do (Keras's fit() ends with finalize_variable_values);
# the raw ones stay reachable, as Keras evaluates them when no SwapEMAWeights is given.
raw_weights_option = click.option(
    "--raw-weights",
    is_flag=True,
    default=False,
    help="With optimizer_params.use_ema: the trained weights themselves, not their moving average (the default).",
)


def config_options(function=None, *, required=True):
    """`--config` (repeatable, later files win) and `--set key=value` (repeatable).

    `required=False` (`sweep`, whose --status reads the folder alone): the command checks it.
    """
    if function is None:
        return functools.partial(config_options, required=required)

    @click.option(
        "--config",
        "-c",
        "configs",
        multiple=True,
        required=required,
        # A folder or a FIFO is refused by the config reader, in one line naming the file.
        type=click.Path(),
        help="YAML config; give it twice to layer a second file over the first.",
    )
    @click.option(
        "--set",
        "-s",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one key, e.g. --set optimizer_params.learning_rate=0.01 (repeatable).",
    )
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


def load(configs, overrides):
    """The validated config, or exit 2 with every problem listed; notes on foreign keys go to stderr,
    and the config's user modules become importable."""
    from opt_train import usercode

    with user_errors():
        config = load_config(list(configs), list(overrides))
    if not os.environ.get(LAUNCHED_VARIABLE):  # a worker of `--np N`: the launcher showed them
        for note in config.notes:
            click.echo(f"note: {note}", err=True)
    usercode.add_search_path(config.code_folders())
    return config


def check_distribution(config, ranks=None):
    """What train would refuse about how the job is started (`--np`, horovodrun, TF_CONFIG, SLURM): exit 2.

    `ranks`: the `--np N` given; returns a warning line or None (TF-free: `validate` calls it too).
    """
    from opt_train.training.launch import check_launch

    with user_errors():
        return check_launch(config, ranks=ranks)


def launch_config(config, ranks):
    """The config as `--np N` workers run it: `distributed: none` becomes tf (`names.launch_backend`)."""
    import dataclasses

    from opt_train.distributed.names import launch_backend

    if not ranks or config.distributed != "none":
        return config
    return dataclasses.replace(config, distributed=launch_backend(config.distributed))


@contextlib.contextmanager
def user_errors(on_failure=None):
    """Turns the library's expected failures into click errors with the right exit code.

    `on_failure(error, exit_code, message)`, when given, hears of every failure first
    (exit 1 or 2, and a bug's exception, which keeps its traceback); not of a stop.
    """
    def failed(error, exit_code, message=None):
        if on_failure is not None:
            on_failure(error, exit_code, str(error) if message is None else message)
        return message

    try:
        yield
    except ConfigError as error:
        failed(error, ConfigUsageError.exit_code)
        if error.details:
            click.echo(error.details.rstrip("\n"), err=True)
        raise ConfigUsageError(str(error)) from None
    except ClusterError as error:
        failed(error, ConfigUsageError.exit_code)
        raise ConfigUsageError(str(error)) from None
    except HorovodUnavailableError as error:
        raise ConfigUsageError(failed(error, ConfigUsageError.exit_code, f"use_horovod: {error}")) from None
    except RunRefused as error:
        failed(error, ConfigUsageError.exit_code)
        raise ConfigUsageError(str(error)) from None
    except ParamError as error:
        if error.key is None:  # an argument of a library call, not a config key: a bug, its traceback kept
            failed(error, TrainingFailedError.exit_code, f"{type(error).__name__}: {error}")
            raise
        # A config key found wrong only once the run reported something (a check `validate` could not make).
        issue = ConfigIssue(None, None, error.key, error.code, error.message, error.value)
        failed(error, ConfigUsageError.exit_code, issue.format())
        raise ConfigUsageError(issue.format()) from None
    except TrainingFailed as error:
        failed(error, TrainingFailedError.exit_code)
        raise TrainingFailedError(str(error)) from None
    except Interrupted as error:
        click.echo(str(error), err=True)
        raise click.exceptions.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        # Ctrl-C outside the training loop (importing TensorFlow, building the run): the
        # loop's own stops say where they saved; this one has nothing to save.
        click.echo("interrupted by SIGINT before training started (or after it ended): nothing saved by this stop; "
                   "run the same command to start again", err=True)
        raise click.exceptions.Exit(signal_exit_code(signal.SIGINT)) from None
    except click.exceptions.Exit:
        raise
    except click.ClickException as error:
        failed(error, error.exit_code, error.format_message())
        raise
    except Exception as error:
        # A bug: Python prints its traceback and exits 1.
        failed(error, TrainingFailedError.exit_code, f"{type(error).__name__}: {error}")
        raise


def trial_failure_recorder(logdir):
    """`on_failure` for `user_errors` in a sweep trial's process: writes the trial's failure record in `logdir`
    (`opt_train/trial.py`), the key and code of its first config problem included; None outside a sweep."""
    from opt_train import trial

    if trial.description() is None:
        return None

    def record(error, exit_code, message):
        first = error.issues[0] if isinstance(error, ConfigError) and error.issues else error
        located = isinstance(first, (ConfigIssue, ParamError))
        try:
            trial.write_failure(logdir, exit_code, type(error).__name__, message,
                                key=first.key if located else None, code=first.code if located else None)
        except OSError:
            pass  # a logdir that cannot be written: the sweep falls back to the log; the error itself still shows

    return record


def import_tensorflow():
    """TensorFlow, imported with its start-up lines silenced (see `opt_train.quiet`)."""
    from opt_train import quiet

    return quiet.import_tensorflow()


class Count(click.ParamType):
    """A whole number >= `minimum` whose bad value is one line at its flag, exit 2 (click's own types add the usage)."""

    name = "integer"

    def __init__(self, minimum=0):
        self.minimum = minimum

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            number = int(text) if text.lstrip("-").isdigit() else None
        if number is None or number < self.minimum:
            flag = param.opts[0] if param is not None else "value"
            raise ConfigUsageError(f"{flag}: {value!r} is not a whole number >= {self.minimum}")
        return number
