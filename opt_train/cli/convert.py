"""`opt-train convert openseq2seq|returnn CONFIG`: a Python config as opt-train YAML, without running it."""

import click

from opt_train.cli.common import ConfigUsageError


@click.command()
@click.argument("kind", type=click.Choice(["openseq2seq", "returnn"], case_sensitive=False))
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None, help="Write the YAML here (default: stdout).")
def convert(kind, config, out):
    """Convert an OpenSeq2Seq or RETURNN Python CONFIG to opt-train YAML.

    The file is read from its syntax tree; nothing in it runs. What has no
    opt-train key (model and data classes, RETURNN's network) is listed at the
    end as comments to fill in.
    """
    from opt_train.convert import PyConfigError
    from opt_train.convert import convert as run_convert

    try:
        text = run_convert(kind.lower(), config).to_yaml()
    except PyConfigError as error:
        raise ConfigUsageError(str(error)) from None
    if out is None:
        click.echo(text, nl=False)
        return
    from opt_train.atomic import write_text

    write_text(out, text)
    click.echo(f"wrote {out}", err=True)
