"""`opt-train export`: write model.keras and a serving SavedModel from a checkpoint."""

import json

import click

from opt_train.cli.common import (
    ConfigUsageError, config_options, import_tensorflow, load, raw_weights_option, user_errors,
)


@click.command()
@config_options
@click.option(
    "--checkpoint",
    type=click.Path(),
    default=None,
    help="Checkpoint prefix or directory (default: the latest in logdir).",
)
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Directory to write (default: logdir/export).")
@raw_weights_option
def export(configs, overrides, checkpoint, out, raw_weights):
    """Export a checkpoint's model: DIR/model.keras and DIR/saved_model/ (for TF Serving)."""
    config = load(configs, overrides)
    import_tensorflow()
    from opt_train.training.export import CheckpointNotFound, export_checkpoint

    with user_errors():
        try:
            written = export_checkpoint(config, checkpoint=checkpoint, out=out, raw_weights=raw_weights,
                                        report=lambda line: click.echo(line, err=True))
        except CheckpointNotFound as error:
            raise ConfigUsageError(str(error)) from None
    click.echo(json.dumps(written, indent=2, sort_keys=True))
