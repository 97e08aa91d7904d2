"""`opt-train configs`: list the example configs shipped in the package and copy one out to start from."""

from __future__ import annotations

import click

from opt_train.cli.common import ConfigUsageError


@click.group("configs")
def configs():
    """The example configs that ship with opt-train (no checkout needed)."""


@configs.command("list")
def list_configs():
    """Every shipped example config, with what it shows."""
    from opt_train.config import shipped

    for name in shipped.names():
        first, modules = shipped.summary(name)
        needs = f" (needs the repository's examples/{', examples/'.join(m + '.py' for m in modules)})" if modules else ""
        click.echo(f"{name:<22} {first}{needs}")


@configs.command("copy")
@click.argument("name")
@click.argument("dest", required=False, default=".", type=click.Path(file_okay=False))
def copy_config(name, dest):
    """Copy the example config NAME (and the base: files it builds on) into the folder DEST (default: here)."""
    from opt_train.config import shipped
    from opt_train.suggest import UnknownNameError

    try:
        written = shipped.copy(name, dest)
    except UnknownNameError as error:
        raise ConfigUsageError(f"{error}; `opt-train configs list` shows them") from None
    except FileExistsError as error:
        raise ConfigUsageError(f"{error}: already exists; nothing copied (remove it or choose another DEST)") from None
    except OSError as error:
        raise ConfigUsageError(f"cannot write to {dest}: {error.strerror or error}") from None
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"check it: opt-train validate --config {written[0]}")
