"""`opt-train validate`: resolve and check a config, print it with derived figures; no TensorFlow."""

import click
import yaml

from opt_train.cli.common import check_distribution, config_options, launch_config, load, user_errors
from opt_train.config import derived
from opt_train.config.memory import memory_lines
from opt_train.config.validate import check_placement


@click.command()
@config_options
@click.option(
    "--np",
    "world_size",
    type=click.IntRange(min=1),
    default=None,
    help="Workers `opt-train train --np N` would start (default: the TF_CONFIG / SLURM / horovodrun job's, else 1).",
)
def validate(configs, overrides, world_size):
    """Check a config and print the effective config, the memory per device and derived figures."""
    config = load(configs, overrides)
    warning = check_distribution(config, world_size)
    if warning:
        click.echo(warning, err=True)
    from opt_train.training.launch import launched_workers

    with user_errors():  # the batch size against the examples, counted as train counts them
        launched = launch_config(config, world_size)
        workers = world_size or launched_workers(config)
        check_placement(launched, workers)  # a mesh must split its batch axis between the workers
        figures = derived(launched, world_size=workers)
        memory = memory_lines(config)  # a layout that does not fit a shape: exit 2 at `layouts`
    click.echo(yaml.safe_dump(config.to_dict(), sort_keys=False).rstrip())
    # Before the figures, which stay the output's last block (scripts read what follows `# derived`).
    click.echo("# memory")
    for line in memory:
        click.echo(line)
    click.echo("# derived")
    click.echo(yaml.safe_dump(figures, sort_keys=False).rstrip())

