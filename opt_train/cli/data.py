"""`opt-train data`: commands that prepare data for a run (`to-tfrecord`)."""

from __future__ import annotations

import click

from opt_train.cli.common import ConfigUsageError, import_tensorflow


@click.group()
def data():
    """Prepare data files for a run."""


@data.command("to-tfrecord")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Directory to write the files to.")
@click.option("--shards", default=1, show_default=True, type=click.IntRange(min=1), help="Train files to write.")
@click.option("--compression", default="none", show_default=True,
              type=click.Choice(["none", "GZIP", "ZLIB"], case_sensitive=False))
@click.option("--eval-fraction", default=0.0, show_default=True, type=click.FloatRange(0, 1, max_open=True),
              help="Share of the examples written as eval-* files (a seeded split).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the train/eval split.")
@click.option("--task", default="classification", show_default=True,
              type=click.Choice(["classification", "regression"]))
@click.option("--x-key", default="x", show_default=True, help=".npz: the array of inputs.")
@click.option("--y-key", default="y", show_default=True, help=".npz: the array of targets.")
@click.option("--label-column", default="-1", show_default=True, help=".csv: name or index of the target column.")
@click.option("--no-header", is_flag=True, help=".csv: the first row is data, not column names.")
@click.option("--delimiter", default=",", show_default=True, help=".csv: field separator.")
def to_tfrecord(source, out, shards, compression, eval_fraction, seed, task, x_key, y_key,
                label_column, no_header, delimiter):
    """Write SOURCE (.npz or .csv) as TFRecord files of tf.train.Examples, and print the config block that reads them."""
    import yaml

    import_tensorflow()
    from opt_train.data.convert import to_tfrecord as convert

    column = int(label_column) if label_column.lstrip("-").isdigit() else label_column
    try:
        result = convert(
            source, out, shards=shards, compression=compression, eval_fraction=eval_fraction, seed=seed,
            task=task, x_key=x_key, y_key=y_key, label_column=column, header=not no_header, delimiter=delimiter,
        )
    except ValueError as error:
        raise ConfigUsageError(str(error)) from None
    examples = result["examples"]
    click.echo(f"# wrote {examples['train']} train and {examples['eval']} eval examples to {out}")
    click.echo(yaml.safe_dump({"data": "tfrecord", "data_params": result["data_params"]}, sort_keys=False), nl=False)
