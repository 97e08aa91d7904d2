"""Built-in models, one `ModelRow` each in `MODELS`, TF-free, for the config layer and `opt-train list`.

`MODELS` is the one source of truth: a row names the builder (`code`, imported when the
model is built), the parameters it receives with their defaults, the task kinds it serves
and the function that sizes its weights from those parameters (`variables`, TF-free). Adding
a model is its module plus one row. A model spec in YAML is one of `MODEL_NAMES`,
`{factory: "package.module:function"}` (the user's own Keras model; its params are passed
through unchecked), `{keras_application: ResNet50}` (a `keras.applications` constructor;
`model_params.weights` is what Keras takes: `imagenet`, a weights file, or none) or
`{path: models/my_model.keras}` (a model saved with Keras).
"""

from __future__ import annotations

from dataclasses import dataclass

from opt_train import params as p
from opt_train.models.layers import image_shape
from opt_train.registry import Row, Table
from opt_train.suggest import Registry, UnknownNameError
from opt_train.usercode import split_spec

# Keras 3 activation names (keras.activations.get accepts each; tests check that).
ACTIVATIONS = (
    "celu", "elu", "exponential", "gelu", "hard_sigmoid", "hard_silu", "hard_swish",
    "leaky_relu", "linear", "log_sigmoid", "mish", "relu", "relu6", "selu", "sigmoid",
    "silu", "softplus", "softsign", "swish", "tanh",
)


@dataclass(frozen=True, kw_only=True)
class ModelRow(Row):
    """A built-in model. `code`: its builder, `build(task, *, regularizer=None, **params) -> keras.Model`.

    `tasks`: the task kinds it serves (see `opt_train.data.registry.task_kind`). `variables`:
    "module:function" (TF-free), `variables(task, **params) -> [(Keras variable.path, shape)]` of
    the weights the builder makes, in its order (the memory check and the mesh plan read it).
    """

    tasks: tuple
    variables: str

    def locations(self):
        return [self.code, self.variables]


_ACTIVATION = p.Param("relu", p.one_of(*ACTIVATIONS, kind="activation"), "hidden-layer activation")
_DROPOUT = p.Param(0.0, p.FRACTION, "dropout rate after each hidden layer")


def _heads_divide_width(filled):
    if filled["d_model"] % filled["num_heads"]:
        raise p.ParamError(
            "num_heads", "out_of_range", f"must divide `d_model` ({filled['d_model']})", filled["num_heads"],
            text=f"`num_heads` must divide `d_model`. Received: num_heads={filled['num_heads']}, "
            f"d_model={filled['d_model']}",
        )


MODELS = Table("model", [
    ModelRow(
        name="mlp",
        summary="multi-layer perceptron (flattens its input); classification or regression",
        code="opt_train.models.mlp:build_mlp",
        variables="opt_train.models.size:mlp_variables",
        tasks=("classification", "regression"),
        params={
            "hidden_units": p.Param([256, 128], p.positive_int_list, "widths of the hidden Dense layers"),
            "activation": _ACTIVATION,
            "dropout": _DROPOUT,
        },
    ),
    ModelRow(
        name="cnn",
        summary="small conv net for image-like inputs (a flat input is reshaped to the dataset's image shape)",
        code="opt_train.models.cnn:build_cnn",
        variables="opt_train.models.size:cnn_variables",
        tasks=("classification", "regression"),
        params={
            "filters": p.Param([16, 32], p.positive_int_list, "channels of each conv block (conv + 2x2 max-pool)"),
            "kernel_size": p.Param(3, p.positive_int, "square kernel size of every conv"),
            "dense_units": p.Param(64, p.positive_int, "width of the Dense layer before the output"),
            "activation": _ACTIVATION,
            "dropout": _DROPOUT,
        },
    ),
    ModelRow(
        name="transformer",
        summary="small Transformer encoder labelling every position of a token sequence (reversal task)",
        code="opt_train.models.transformer:build_transformer",
        variables="opt_train.models.size:transformer_variables",
        tasks=("sequence",),
        params={
            "d_model": p.Param(64, p.positive_int, "width of embeddings and attention"),
            "num_heads": p.Param(4, p.positive_int, "attention heads (must divide d_model)"),
            "num_layers": p.Param(2, p.positive_int, "encoder blocks"),
            "ff_dim": p.Param(128, p.positive_int, "inner width of each feed-forward block"),
            "dropout": _DROPOUT,
            "activation": p.Param("relu", p.one_of(*ACTIVATIONS, kind="activation"), "feed-forward activation"),
        },
        cross=_heads_divide_width,
    ),
], owner="{name}", required_by="for {name}", as_given=True, columns=("summary", "tasks", "parameters"))

# Views of the table.
MODEL_NAMES = tuple(MODELS.rows)
MODEL_SPECS = MODELS.column("params")
MODEL_TASKS = MODELS.column("tasks")


# The `keras.applications` constructors of Keras 3 (a test checks this against Keras), so a
# misspelt architecture is caught by `opt-train validate` without importing TensorFlow.
KERAS_APPLICATIONS = (
    "ConvNeXtBase", "ConvNeXtLarge", "ConvNeXtSmall", "ConvNeXtTiny", "ConvNeXtXLarge",
    "DenseNet121", "DenseNet169", "DenseNet201",
    "EfficientNetB0", "EfficientNetB1", "EfficientNetB2", "EfficientNetB3", "EfficientNetB4",
    "EfficientNetB5", "EfficientNetB6", "EfficientNetB7",
    "EfficientNetV2B0", "EfficientNetV2B1", "EfficientNetV2B2", "EfficientNetV2B3",
    "EfficientNetV2L", "EfficientNetV2M", "EfficientNetV2S",
    "InceptionResNetV2", "InceptionV3",
    "MobileNet", "MobileNetV2", "MobileNetV3Large", "MobileNetV3Small",
    "NASNetLarge", "NASNetMobile",
    "ResNet101", "ResNet101V2", "ResNet152", "ResNet152V2", "ResNet50", "ResNet50V2",
    "VGG16", "VGG19", "Xception",
)
APPLICATIONS = Registry("keras application", KERAS_APPLICATIONS)
# The smallest image side each architecture takes, as Keras checks it when it is built (a test
# holds this to Keras's refusals): 75 and 71 for the Inception family and Xception, 32 for the others.
APPLICATION_MIN_SIDE = {name: 32 for name in KERAS_APPLICATIONS} | {"InceptionResNetV2": 75, "InceptionV3": 75,
                                                                   "Xception": 71}

# Set by opt-train from the data, so not the user's to give.
APPLICATION_FIXED_PARAMS = ("input_shape", "input_tensor", "classes", "classifier_activation")
# Keras's one name for downloaded application weights (keras.applications: `weights="imagenet"`).
IMAGENET = "imagenet"
APPLICATION_WEIGHTS_TEXT = "null, imagenet, or a .weights.h5 / .h5 weights file"


def application_weights(name, value):
    """`weights` of a Keras application, as Keras takes it: None (fresh), `imagenet`, or an existing .h5 file."""
    if value is None or value == IMAGENET:
        return value
    if not isinstance(value, str) or not value.endswith(".h5"):
        p.fail(name, "wrong_type", f"must be {APPLICATION_WEIGHTS_TEXT}", value, APPLICATION_WEIGHTS_TEXT)
    return p.existing_file(name, value)

# A model saved with Keras: the one parameter is whether its file may run code.
PATH_SPEC = {
    "safe_mode": p.Param(True, p.boolean, "refuse code stored in the file (Lambda layers); false allows it"),
}

# The keys of a model spec mapping; exactly one of them.
SPEC_KEYS = ("factory", "keras_application", "path")


def spec_kind(spec):
    """"name", "factory", "keras_application" or "path"."""
    if isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) in SPEC_KEYS:
        return next(iter(spec))
    return "factory" if isinstance(spec, dict) else "name"


def is_factory(spec):
    """True when `spec` names the user's own model: `{"factory": "package.module:function"}`."""
    return spec_kind(spec) == "factory"


def application_image(name, task):
    """(height, width, channels) application `name` sees for `task`; a ParamError at `model` when the inputs
    are not images, or are smaller than the architecture takes (in Keras's words), TF-free so that
    `validate` says it too."""
    shape = tuple(task.input_shape)
    image = image_shape(task)
    # A flat input becomes an image only when it holds features, not token ids.
    if image is None or (len(shape) not in (2, 3) and task.input_dtype != "float32"):
        raise p.ParamError.at(
            "model", "out_of_range",
            f"`model` {name} needs image inputs (height, width, channels) per example. Received: input_shape={shape}",
        )
    side = APPLICATION_MIN_SIDE[name]
    if min(image[:2]) < side:
        raise p.ParamError.at(
            "model", "out_of_range", f"`model` {name} cannot take this data's images {image}: Input size must be "
            f"at least {side}x{side}; Received: input_shape={image}")
    return image


def resolve_application(name):
    """The `keras.applications` constructor name (case and `_`/`-` ignored); raises UnknownNameError."""
    return APPLICATIONS.resolve(name)


def check_spec(spec):
    """A model spec mapping checked and normalized (application name resolved); ValueError naming its key."""
    if not isinstance(spec, dict) or len(spec) != 1:
        keys = sorted(spec) if isinstance(spec, dict) else spec
        raise p.ParamError(
            None, "wrong_type",
            "must be a name or one of {factory: 'package.module:function'}, "
            "{keras_application: ResNet50}, {path: my_model.keras}", keys,
        )
    key, value = next(iter(spec.items()))
    if key not in SPEC_KEYS:
        raise UnknownNameError("model spec key", key, SPEC_KEYS, code="unknown_key")
    if key == "factory":
        split_spec(spec)
        return dict(spec)
    if key == "keras_application":
        return {key: resolve_application(value)}
    if not isinstance(value, str) or not value.endswith(".keras"):
        code = "wrong_type" if not isinstance(value, str) else "out_of_range"
        raise p.ParamError("path", code, "must name a .keras file saved by Keras", value)
    return dict(spec)


def resolve(name):
    """The canonical model name (case and `_`/`-` ignored); raises UnknownNameError."""
    return MODELS.resolve(name)


def _application_param_errors(params):
    if params is not None and not isinstance(params, dict):
        return [p.ParamError(None, "wrong_type", "model params must be a mapping", params)]
    errors = [
        p.ParamError(name, "conflict", "is set by opt-train from the data", value)
        for name, value in (params or {}).items() if name in APPLICATION_FIXED_PARAMS
    ]
    if "weights" in (params or {}):
        try:
            application_weights("weights", params["weights"])
        except p.ParamError as error:
            errors.append(error)
    return errors


def weights_note(spec, params):
    """The line saying where `imagenet` weights come from (Keras's download cache), or None."""
    if spec_kind(spec) != "keras_application" or (params or {}).get("weights") != IMAGENET:
        return None
    return (f"model_params.weights: imagenet: {spec['keras_application']}'s ImageNet weights, downloaded by Keras "
            "into its cache (KERAS_HOME, ~/.keras by default) the first time, read from there after")


def param_errors(spec, params):
    """`(filled, errors)` for model `spec`, as `Table.param_errors`: a built-in's by its row, the other spec forms
    (factory, keras_application, path) by their own rules (a factory's and an application's pass through)."""
    kind = spec_kind(spec)
    if kind == "name":
        return MODELS.param_errors(spec, params)
    if kind == "path":
        filled, errors = p.param_errors(PATH_SPEC, params, "saved model", required_by="for saved model")
        if not errors:  # a missing file last, as for the datasets' files
            try:
                p.existing_file("path", spec["path"])
            except p.ParamError as error:
                error.key = "model.path"
                errors.append(error)
        return filled, errors
    if kind == "keras_application":
        return dict(params or {}), _application_param_errors(params)
    try:
        split_spec(spec)
    except ValueError as error:
        return {}, [error]
    return dict(params or {}), [] if params is None or isinstance(params, dict) else [
        p.ParamError(None, "wrong_type", "model params must be a mapping", params)
    ]


def check_params(spec, params):
    """`params` for model `spec` with defaults filled (a factory's pass through); raises the first problem."""
    return p.filled_or_first_error(param_errors(spec, params))


def check_task(spec, kind):
    """Raises ValueError when built-in model `spec` cannot serve a task of `kind`."""
    if spec_kind(spec) in ("factory", "path"):
        return
    if spec_kind(spec) == "keras_application":
        if kind == "sequence":
            raise p.ParamError(
                None, "out_of_range", f"takes images; it cannot be trained on a {kind} task",
                spec["keras_application"],
                text=f"Model `{spec['keras_application']}` (keras.applications) takes images; "
                f"it cannot be trained on a {kind} task. Received: task={kind}",
            )
        return
    name = resolve(spec)
    if kind not in MODEL_TASKS[name]:
        raise p.ParamError(
            None, "out_of_range", f"cannot be trained on a {kind} task; it serves "
            f"{' or '.join(MODEL_TASKS[name])}", name,
            text=f"Model `{name}` cannot be trained on a {kind} task; it serves "
            f"{' or '.join(MODEL_TASKS[name])}. Received: task={kind}",
        )
