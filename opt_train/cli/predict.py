"""`opt-train predict`: run a checkpoint's model over the raw examples of a .npz or .csv file (OpenSeq2Seq's infer mode)."""

import click

from opt_train.cli.common import (
    ConfigUsageError, config_options, import_tensorflow, load, raw_weights_option, user_errors,
)


@click.command()
@config_options
@click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False),
              help="A .npz file with the examples in array `x` (or data_params.x_key), or a .csv of raw rows "
                   "(its label column, if any, is left out).")
@click.option("--output", "output_path", required=True, type=click.Path(dir_okay=False),
              help="The .npz to write: `outputs` (logits or values) and, when classifying, `classes` "
                   "and `labels` (your own label values); a .csv gets one `class,label` row per example.")
@click.option("--checkpoint", type=click.Path(), default=None,
              help="Checkpoint prefix or directory (default: the latest in logdir).")
@raw_weights_option
def predict(configs, overrides, input_path, output_path, checkpoint, raw_weights):
    """Predict with a trained model and write the predictions as .npz."""
    config = load(configs, overrides)
    import_tensorflow()
    from opt_train.training.export import CheckpointNotFound
    from opt_train.training.predict import PredictInputError
    from opt_train.training.predict import predict as run_predict

    with user_errors():
        try:
            written = run_predict(config, input_path, output_path, checkpoint=checkpoint, raw_weights=raw_weights,
                                  report=lambda line: click.echo(line, err=True))
        except (CheckpointNotFound, PredictInputError) as error:
            raise ConfigUsageError(str(error)) from None
    click.echo(f"wrote {written['output']}: {written['holds']} (checkpoint {written['checkpoint']})")
