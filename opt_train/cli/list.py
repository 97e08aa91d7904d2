"""`opt-train list`: the config keys, the optimizers, the summaries, and every registry's names a config may use."""

import click

from opt_train.params import REQUIRED
from opt_train.registry import TABLES, describe_params, tables

TOPICS = ("keys", *TABLES)
# The topics whose docs table `--markdown` prints: the keys and every registry (every topic).
MARKDOWN_TOPICS = TOPICS


@click.command("list")
@click.argument("topic", type=click.Choice(TOPICS), required=False)
@click.option("--markdown", is_flag=True,
              help=f"The docs' reference table of a topic ({', '.join(MARKDOWN_TOPICS)}), as docs/*.md hold it.")
def list_command(topic, markdown):
    """List names with their parameters and defaults (all topics when none is given)."""
    if markdown:
        if topic not in MARKDOWN_TOPICS:
            raise click.UsageError(f"--markdown goes with `opt-train list TOPIC`, TOPIC one of {', '.join(MARKDOWN_TOPICS)}")
        click.echo(markdown_table(topic))
        return
    for name in [topic] if topic else TOPICS:
        click.echo(f"# {name}")
        for line in _lines(name):
            click.echo(line)
        click.echo("")


def markdown_table(topic):
    """The Markdown reference table of `topic` (docs/*.md paste it; tests/docs hold them equal)."""
    if topic == "keys":
        from opt_train.config import keys

        return keys.markdown()
    return tables()[topic].markdown()


def _lines(topic):
    if topic == "keys":
        from opt_train.config import keys

        yield from keys.lines()
    elif topic == "optimizers":
        from opt_train.optimizers import table

        for name, family, params in table.describe():
            yield f"{name:<26} [{family}] {table.TABLE[name].summary}"
            yield f"{'':<26} {describe_params(params)}"
    elif topic == "summaries":
        from opt_train.optimizers.names import SUMMARIES

        width = max(len(name) + 1 for name in SUMMARIES.rows)
        for name, row in SUMMARIES.rows.items():
            yield f"{name:<{width}} {row.summary}"
            default = " (OpenSeq2Seq's default)" if row.default else ""
            yield f"{'':<{width}} tags: {', '.join(row.tags)}{default}"
    else:
        yield from _table_lines(topic)


def _table_lines(topic):
    """Each row of a registry: its name (and aliases), summary, and its parameters with defaults; then the
    forms a config may give beside the rows."""
    table = tables()[topic]
    width = max(12, *(len(name) + 1 for name in table.rows))
    for name, row in table.rows.items():
        known_as = f" ({', '.join(row.aliases)})" if row.aliases else ""
        yield f"{name:<{width}}{known_as} {row.summary}"
        yield f"{'':<{width}} {describe_params(row.defaults())}"
    yield from _BESIDE.get(topic, lambda: ())()


def _beside_lr_policies():
    from opt_train.lr_policies.registry import WARMUP_PARAMS
    from opt_train.params import defaults

    warmup = {key: "required" if value is REQUIRED else value for key, value in defaults(WARMUP_PARAMS).items()}
    yield f"{'warmup':<12} (wraps any policy) {describe_params(warmup)}"


def _beside_models():
    from opt_train.models.registry import KERAS_APPLICATIONS

    yield f"{'{factory: package.module:function}':<12} your own Keras model"
    yield "{keras_application: Name}   a keras.applications architecture (model_params.weights: null, " \
        "imagenet or a file): " + ", ".join(KERAS_APPLICATIONS)
    yield "{path: my_model.keras}      a model saved with Keras (model_params: safe_mode: true)"


def _beside_datasets():
    yield "{factory: package.module:function}   your own tf.data pipeline (data_params: task, num_classes, ...)"


def _beside_transforms():
    yield "{factory: package.module:function, params: {...}, after: STAGE}   your own transform"


def _beside_loss_scalers():
    yield "loss_scaling: <number>   (a static scale)"


_BESIDE = {
    "lr_policies": _beside_lr_policies,
    "models": _beside_models,
    "datasets": _beside_datasets,
    "gradient_transforms": _beside_transforms,
    "loss_scalers": _beside_loss_scalers,
}
