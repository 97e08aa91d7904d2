"""`opt-train train`: train the model a config describes."""

import click

from opt_train.cli.common import (
    ConfigUsageError, check_num_gpus, config_options, import_tensorflow, load, user_errors,
)


@click.command()
@config_options
@click.option(
    "--resume",
    "resume_changed",
    is_flag=True,
    help="Continue the run in logdir even though run-defining keys changed (where its checkpoint still fits).",
)
@click.option(
    "--no-resume",
    is_flag=True,
    help="Start afresh; a logdir holding a run is left as it is and the run goes to <logdir>-N.",
)
@click.option(
    "--benchmark",
    is_flag=True,
    help="Report time per step and samples/s after the warm-up steps (summed over ranks); "
    "starts afresh like --no-resume.",
)
def train(configs, overrides, resume_changed, no_resume, benchmark):
    """Train the model a config describes; continues the run in logdir if it is the same run."""
    if resume_changed and (no_resume or benchmark):
        raise ConfigUsageError("--resume cannot be combined with --no-resume or --benchmark")
    config = load(configs, overrides)
    check_num_gpus(config)
    with user_errors():
        # Inside: Ctrl-C during the (slow) TensorFlow import exits 130 like any other.
        import_tensorflow()
        from opt_train.training import train as run_training

        run_training(config, resume=not no_resume, benchmark=benchmark, resume_changed=resume_changed)
