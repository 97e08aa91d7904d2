"""`opt-train eval`: evaluate a checkpoint on the config's eval split."""

import json

import click

from opt_train.cli.common import config_options, import_tensorflow, load, raw_weights_option, user_errors


@click.command("eval")
@config_options
@click.option(
    "--checkpoint",
    type=click.Path(),
    default=None,
    help="Checkpoint prefix, its .index or .data-* file, or a folder (its newest); default: the newest in logdir.",
)
@raw_weights_option
def eval_command(configs, overrides, checkpoint, raw_weights):
    """Evaluate a checkpoint and print the metrics as JSON."""
    config = load(configs, overrides)
    with user_errors():
        import_tensorflow()
        from opt_train.training import evaluate

        results = evaluate(config, checkpoint=checkpoint, report=lambda line: click.echo(line, err=True),
                           raw_weights=raw_weights)
    click.echo(json.dumps(results, indent=2, sort_keys=True))
