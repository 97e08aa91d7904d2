"""`opt-train train`: train the model a config describes."""

import click

from opt_train.cli.common import check_num_gpus, config_options, import_tensorflow, load, user_errors


@click.command()
@config_options
@click.option("--no-resume", is_flag=True, help="Start afresh even if logdir has checkpoints.")
@click.option(
    "--benchmark",
    is_flag=True,
    help="Report time per step and samples/s after the warm-up steps (summed over ranks).",
)
def train(configs, overrides, no_resume, benchmark):
    """Train the model a config describes; resumes from logdir's latest checkpoint."""
    config = load(configs, overrides)
    check_num_gpus(config)
    import_tensorflow()
    with user_errors():
        from opt_train.training import train as run_training

        run_training(config, resume=not no_resume, benchmark=benchmark)
