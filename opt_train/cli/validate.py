"""`opt-train validate`: resolve and check a config, print it with derived figures; no TensorFlow."""

import click
import yaml

from opt_train.cli.common import check_num_gpus, config_options, load
from opt_train.config import derived


@click.command()
@config_options
@click.option(
    "--np",
    "world_size",
    type=click.IntRange(min=1),
    default=None,
    help="Processes the job will run on (default: horovodrun's, else 1).",
)
def validate(configs, overrides, world_size):
    """Check a config and print the effective config and derived figures."""
    config = load(configs, overrides)
    check_num_gpus(config, world_size)
    from opt_train.training.logdir import launched_ranks

    figures = derived(config, world_size=world_size or launched_ranks())
    click.echo(yaml.safe_dump(config.to_dict(), sort_keys=False).rstrip())
    click.echo("# derived")
    click.echo(yaml.safe_dump(figures, sort_keys=False).rstrip())

