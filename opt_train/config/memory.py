"""The memory plan `validate` prints: weights and optimizer state per device, with and without the config's mesh (TF-free).

A built-in model's variables are known from its parameters and the data's shapes
(`models.size.variable_shapes`), so the plan, and a layout that does not fit a shape, are
known before TensorFlow starts. A model built by code (a factory, a Keras application, a
saved model) or data whose shapes are only known when read as a stream (TFRecord files, a
pipeline factory) gives no plan here; `train` prints the line once the model is built.
"""

from __future__ import annotations

from opt_train.config.issues import ConfigError
from opt_train.distributed.mesh_layout import plan_memory, variable_dtype
from opt_train.errors import ParamError
from opt_train.optimizers import grouping

UNKNOWN = "memory per device: unknown until built ({why}); `train` prints it once the model is built"
WITHOUT_MESH = "memory per device without the mesh:"
# models.registry.spec_kind -> how the unknown line names the model
BUILT_BY_CODE = {"factory": "a factory model", "keras_application": "a Keras application", "path": "a saved model"}


def model_variables(config):
    """`([(path, shape, dtype)], None)` of the config's built-in model, or `(None, why)` when only building it tells.

    The data's shapes come from its source as `train` reads it (NumPy: a file dataset is read). A Keras
    application's images are judged against what the architecture takes (a `ConfigError` at `model`).
    """
    from opt_train.data import check_params as data_params
    from opt_train.data import resolve as resolve_data
    from opt_train.data.registry import DATASETS, is_factory
    from opt_train.data.sources import load_source
    from opt_train.models import registry as models
    from opt_train.models.size import variable_shapes

    kind = models.spec_kind(config.model)
    if kind not in ("name", "keras_application"):
        return None, BUILT_BY_CODE[kind]
    if is_factory(config.data):
        return None, BUILT_BY_CODE.get(kind, "a data factory")
    data = resolve_data(config.data)
    if DATASETS[data].streamed:
        return None, BUILT_BY_CODE.get(kind, f"{data} data is read as a stream")
    try:
        task = load_source(data, data_params(data, dict(config.data_params))).task
    except ParamError as error:  # a file that cannot be read as the data: train says the same
        raise ConfigError([config.issue_for("data_params", error)]) from None
    if kind == "keras_application":
        # Built by Keras's code, but what it takes of the data is known: train would refuse the same.
        try:
            models.application_image(config.model["keras_application"], task)
        except ParamError as error:
            raise ConfigError([config.issue_for("model", error)]) from None
        return None, BUILT_BY_CODE[kind]
    name = models.resolve(config.model)
    shapes = variable_shapes(name, models.check_params(name, dict(config.model_params)), task)
    if shapes is None:
        return None, f"the {name} model does not fit this data"
    dtype = variable_dtype(config.dtype)
    return [(path, shape, dtype) for path, shape in shapes], None


def plan(config, variables, *, mesh=True):
    """The `MemoryPlan` of `variables` as `config` trains them (on its mesh, or with `mesh=False` on one device)."""
    return plan_memory(
        variables,
        optimizer=config.optimizer,
        optimizer_params=dict(config.optimizer_params),
        dtype=config.dtype,
        iter_size=config.iter_size,
        ema=bool(config.optimizer_params.get("use_ema")),
        mesh=config.mesh if mesh else None,
        layouts=config.layouts if mesh else None,
        # As training.builder.learning_rate_schedule decides: a constant rate stays a float, a variable.
        rate_variable=config.lr_policy in (None, "fixed") and not config.warmup and config.lr_control is None,
        freeze_variables_regex=config.freeze_variables_regex,
        optimizer_groups=grouping.check_groups(config.optimizer_groups)[0],
    )


def memory_lines(config):
    """What `validate` prints: `plan_lines` of the config's built-in model, else one "unknown until built" line.

    The model's variables known, what `train` would refuse once it has built them is refused here
    (`check_variables`)."""
    variables, why = model_variables(config)
    if variables is None:
        return [UNKNOWN.format(why=why)]
    check_variables(config, [path for path, *_ in variables])
    return plan_lines(config, variables)


def check_variables(config, paths):
    """A `ConfigError` where `freeze_variables_regex` leaves no variable to train or freezes none, or an optimizer
    group takes no variable of the model's `paths`, by the rules `train` applies to the built model (`freezing`,
    `grouping`)."""
    from opt_train.optimizers import grouping
    from opt_train.optimizers.freezing import check_left_to_train, split_frozen

    trainable, frozen = split_frozen(paths, config.freeze_variables_regex, path=str)
    try:
        check_left_to_train(trainable, frozen, config.freeze_variables_regex, path=str)
        if config.optimizer_groups:
            grouping.assign(trainable, list(config.optimizer_groups), frozen)
    except ParamError as error:
        raise ConfigError([config.issue_for(error.key, error)]) from None


def plan_lines(config, variables):
    """`memory per device: weights X, optimizer state Y, total Z` for `variables` trained as `config` says, and
    with a mesh a second line, `memory per device without the mesh: ...`, for the same run on one device.

    `variables`: `(path, shape, dtype[, trainable])` (a built model's `model.weights`, or `model_variables`).
    A layout that does not fit a variable's shape, or a `layouts` key that is the first match of no variable,
    is a `ConfigError` at `layouts` (the line where it was set).
    """
    try:
        laid_out = plan(config, variables)
    except ParamError as error:
        raise ConfigError([config.issue_for("layouts", error)]) from None
    if not config.mesh:
        return [laid_out.line()]
    taken = {_first(config, item.path) for item in laid_out.variables}
    unmatched = [pattern for pattern in config.layouts if pattern not in taken]
    if unmatched:
        # A misspelt regex would leave every variable replicated without a word.
        error = ParamError.at(
            "layouts", "conflict",
            f"layouts[{unmatched[0]!r}] is the first match of no variable of the {config.named('model')} model "
            f"(its paths: {', '.join(item.path for item in laid_out.variables)})", unmatched[0])
        raise ConfigError([config.issue_for("layouts", error)])
    alone = plan(config, variables, mesh=False)
    return [laid_out.line(), alone.line().replace("memory per device:", WITHOUT_MESH, 1)]


def _first(config, path):
    from opt_train.distributed.mesh_layout import matching_key

    return matching_key(path, config.layouts)
