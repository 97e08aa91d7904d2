"""`opt-train list`: the config keys, and the optimizers, lr policies, models, datasets and summaries a config may name."""

import click

TOPICS = ("keys", "optimizers", "lr_policies", "models", "datasets", "summaries", "loss_scalers")


@click.command("list")
@click.argument("topic", type=click.Choice(TOPICS), required=False)
@click.option("--markdown", is_flag=True, help="keys: the key table of docs/config.md.")
def list_command(topic, markdown):
    """List names with their parameters and defaults (all topics when none is given)."""
    if markdown:
        if topic != "keys":
            raise click.UsageError("--markdown goes with `opt-train list keys`")
        from opt_train.config import keys

        click.echo(keys.markdown())
        return
    for name in [topic] if topic else TOPICS:
        click.echo(f"# {name}")
        for line in _LISTERS[name]():
            click.echo(line)
        click.echo("")


def _keys():
    from opt_train.config import keys

    yield from keys.lines()


def _optimizers():
    from opt_train.optimizers import table

    for name, family, params in table.describe():
        yield f"{name:<26} [{family}] {_params(params)}"


def _lr_policies():
    from opt_train.lr_policies.registry import POLICY_PARAMS, WARMUP_PARAMS
    from opt_train.lr_policies.registry import FUNCTION_NAMES

    for name, specs in POLICY_PARAMS.items():
        known_as = f" ({FUNCTION_NAMES[name]})" if name in FUNCTION_NAMES else ""
        yield f"{name:<12}{known_as} {_params(_defaults(specs))}"
    yield f"{'warmup':<12} (wraps any policy) {_params(_defaults(WARMUP_PARAMS))}"


def _models():
    from opt_train.models.registry import KERAS_APPLICATIONS, MODEL_SPECS, MODEL_SUMMARIES

    for name, specs in MODEL_SPECS.items():
        yield f"{name:<12} {MODEL_SUMMARIES.get(name, '')}\n{'':<12} {_params(_defaults(specs))}"
    yield f"{'{factory: package.module:function}':<12} your own Keras model"
    yield "{keras_application: Name}   a keras.applications architecture (model_params.weights: null, " \
        "imagenet or a file): " + ", ".join(
        KERAS_APPLICATIONS)
    yield "{path: my_model.keras}      a model saved with Keras (model_params: safe_mode: true)"


def _datasets():
    from opt_train.data.registry import DATASET_SPECS

    for name, specs in DATASET_SPECS.items():
        yield f"{name:<26} {_params(_defaults(specs))}"


def _summaries():
    from opt_train.optimizers.names import OPTIMIZER_SUMMARIES

    yield "summaries: [" + ", ".join(OPTIMIZER_SUMMARIES) + "]"


def _loss_scalers():
    from opt_train.optimizers.names import LOSS_SCALER_PARAMS

    yield "loss_scaling: <number>   (a static scale)"
    for name, specs in LOSS_SCALER_PARAMS.items():
        yield f"loss_scaling: {name:<10} {_params(_defaults(specs))}"


def _defaults(specs):
    """{param: default} from a `Param` table, "required" where the default is `REQUIRED`."""
    return {key: "required" if spec.required else spec.default for key, spec in specs.items()}


def _params(params):
    if not params:
        return "(no parameters)"
    return ", ".join(f"{key}={value!r}" if value != "required" else f"{key} (required)" for key, value in params.items())


_LISTERS = {
    "keys": _keys,
    "optimizers": _optimizers,
    "lr_policies": _lr_policies,
    "models": _models,
    "datasets": _datasets,
    "summaries": _summaries,
    "loss_scalers": _loss_scalers,
}
