"""The one optimizer table: each optimizer's name, family, class location and parameters, TF-free.

One `Row` per optimizer. The registry (`classes`, `registry`), the Keras wrappers
(`keras_family`), `opt-train validate` (`specs.param_errors`), `opt-train list`
(`describe`), serialisation and every constructor's own checks (`specs.check_args`)
read it; adding an optimizer is its module and one row here. A class is named as a
"module:Class" string (module relative to `opt_train.optimizers`) and imported only
when used, so importing this module does not import TensorFlow.

Keras' base arguments (`weight_decay`, `clipnorm`, ...) are in `BASE_PARAMS`; the
Keras-family rules follow Keras' own checks where it has them (`SGD.momentum` in
[0, 1], `Lion.beta_1` in (0, 1], Ftrl's signs), and refuse in Keras 3's own sentences
(`keras_says`), so `opt-train validate` words them as the Keras class does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opt_train import params as p
from opt_train.errors import ParamError
from opt_train.params import REQUIRED, Param
from opt_train import registry
from opt_train.suggest import normalize

PACKAGE = "opt_train.optimizers"


@dataclass(frozen=True)
class Slot:
    """One piece of state an optimizer keeps per variable, for the memory plan and the mesh.

    `shape` says which shape it takes from its variable: "variable" (the same shape, laid out
    as the variable), "scalar" (shape (), replicated), or Adafactor's factored pair "rows"
    (the shape without its last dimension) and "columns" (without its second-to-last); a
    factored slot of a variable of rank < 2 is a scalar placeholder (`slot_dimensions`). Under a
    mesh a slot is sharded as the dimensions of its variable it keeps; a scalar is replicated.
    `when` names what the slot needs to exist: a constructor parameter that must be true / non-zero
    ("amsgrad", "momentum"), or "adam_variable" (Muon: the variables it trains with AdamW).
    `dtype` is the slot's own dtype when it is not its variable's ("float32", "int32").
    """

    name: str
    shape: str = "variable"
    when: str | None = None
    dtype: str | None = None


SLOT_SHAPES = ("variable", "scalar", "rows", "columns")


def slot_dimensions(kind, dimensions):
    """The entries of a variable's `dimensions` (its shape, or its layout's spec) a slot of `kind` keeps.

    "variable": all; "scalar": none; Adafactor's "rows" all but the last and "columns" all but the
    second-to-last (a variable of rank < 2 is not factored: its slot is a scalar placeholder). One rule
    for a slot's shape and its layout: a factored slot is sharded as the dimensions it keeps.
    """
    dimensions = tuple(dimensions)
    if kind == "variable":
        return dimensions
    if kind == "scalar" or len(dimensions) < 2:
        return ()
    return dimensions[:-1] if kind == "rows" else dimensions[:-2] + dimensions[-1:]


@dataclass(frozen=True, kw_only=True)
class Row(registry.Row):
    """One optimizer: its display name, family, class location and own constructor parameters (a `registry.Row`).

    `location` is "module:Class" relative to `opt_train.optimizers`. A Keras built-in
    (family "keras") also names the Keras class it wraps (`keras_class`, an attribute of
    `keras.optimizers`) and its slots for `get_slot` (TF1 slot name -> attribute holding
    the Keras slot list).

    `state` lists the per-variable state the class creates (`Slot`s, in creation order)
    and `scalars` how many float32 scalars it keeps beside Keras' `iterations` (TF1 Adam's
    beta powers, Nadam's `u_product`): the memory plan and the mesh layouts read them.
    `mesh` says why the class cannot update variables laid out on a DTensor mesh (None: it
    can), unless its parameter `mesh_unless` is true (`mesh_refusal` reads both). `code` is
    `location` made absolute; `summary` says where the rule comes from and what it computes.
    """

    family: str
    location: str
    keras_class: str | None = None
    slots: dict = field(default_factory=dict)
    state: tuple = ()
    scalars: int = 0
    mesh: str | None = None
    mesh_unless: str | None = None

    def __post_init__(self):
        assert all(slot.shape in SLOT_SHAPES for slot in self.state), self.name
        object.__setattr__(self, "code", f"{PACKAGE}.{self.location}")

    def defaults(self):
        """{param: default} for listings, without the arguments every own class takes (`COMMON_PARAMETERS`)."""
        return {key: value for key, value in super().defaults().items() if key not in COMMON_PARAMETERS}

    @property
    def on_mesh(self):
        """Whether it updates variables laid out on a DTensor mesh, in a word or a condition (the docs' column)."""
        if self.mesh is None:
            return "yes"
        return f"with `{self.mesh_unless}: true`" if self.mesh_unless else "no"


# ----- the columns' shared parts -----

# Spellings of one parameter (TF1 / Keras); `get` renames to the one the class takes.
PARAMETER_ALIASES = (
    ("beta1", "beta_1"),
    ("beta2", "beta_2"),
    ("decay", "rho"),
    ("use_nesterov", "nesterov"),
)
# Always renamed, whatever the class: the short TF / OpenSeq2Seq spelling.
PARAMETER_RENAMES = {"lr": "learning_rate"}
# Keras base arguments that duplicate the gradient pipeline -> the config key to use instead.
PIPELINE_ARGUMENTS = {
    "gradient_accumulation_steps": "iter_size",
    "loss_scale_factor": "loss_scaling",
}
# Accepted in `optimizer_params` though Keras sets it by method, not constructor.
POST_INIT_PARAMETERS = ("exclude_from_weight_decay",)
# Constructor arguments that take Python objects (variables), never a YAML value.
PYTHON_ONLY_PARAMETERS = ("var_list", "global_step")

# `learning_rate` in YAML: a number > 0 ("1e-3" too); from Python also a schedule.
LEARNING_RATE = p.number(0, low_open=True, strings=True, schedules=True)
# RETURNN's custom optimizers accept a rate of 0, as RETURNN did.
RETURNN_LEARNING_RATE = p.number(0, interval=True, strings=True, schedules=True)

_BOOL = p.boolean


def _lr(default, rule=LEARNING_RATE):
    return Param(default, rule)


def _pipeline_argument(replacement):
    def rule(name, value):
        if value is not None:
            raise ParamError(
                name, "conflict",
                f"is not offered: opt-train's gradient pipeline does this; set `{replacement}` instead",
                value,
                text=f"`{name}` is not offered: opt-train's gradient pipeline does this; set "
                f"`{replacement}` in the config instead. Received: {name}={value!r}",
            )
        return value

    return rule


def keras_says(rule, text, codes=("out_of_range",)):
    """`rule`, refusing in the Keras class's own sentence `text` (`{value}` filled in as Keras's f-string does).

    Only a refusal with one of `codes` is Keras's: one Keras cannot word (it fails comparing
    a string) keeps opt-train's. `tests/optimizers/test_keras_words.py` holds each sentence
    to the installed Keras class's.
    """

    def worded(name, value):
        try:
            return rule(name, value)
        except ParamError as error:
            if error.code not in codes:
                raise
            raise ParamError.said(name, error.code, text.format(value=value), value) from None

    return worded


# Keras 3's base `Optimizer` arguments, which every optimizer here forwards.
BASE_PARAMS = {
    "weight_decay": Param(None, p.optional(p.NON_NEGATIVE_FLOAT)),
    "clipnorm": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "clipvalue": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "global_clipnorm": Param(None, p.optional(p.POSITIVE_FLOAT)),
    "use_ema": Param(False, _BOOL),
    "ema_momentum": Param(0.99, p.UNIT),
    "ema_overwrite_frequency": Param(None, p.optional(p.integer(1))),
    "name": Param(None, p.optional(p.string)),
    # Set by method in Keras (`exclude_from_weight_decay(var_names=...)`); accepted here.
    "exclude_from_weight_decay": Param(None, p.anything),
    **{name: Param(None, _pipeline_argument(key)) for name, key in PIPELINE_ARGUMENTS.items()},
}
assert set(POST_INIT_PARAMETERS) <= set(BASE_PARAMS)

# opt-train's own classes (on `base.Optimizer`) take TF1's `use_locking`, passed to the
# fused kernels; the Keras family's constructors do not.
USE_LOCKING = Param(False, _BOOL)
# Accepted by every own class, so `opt-train list` does not repeat them per optimizer.
COMMON_PARAMETERS = ("use_locking",)

_L1_L2 = {
    "l1_regularization_strength": Param(0.0, p.NON_NEGATIVE_FLOAT),
    "l2_regularization_strength": Param(0.0, p.NON_NEGATIVE_FLOAT),
}
_ADAM = {"beta_1": Param(0.9, p.FRACTION), "beta_2": Param(0.999, p.FRACTION)}
_TF1_ADAM = {"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-8, p.NON_NEGATIVE)}
_KERAS_ADAM = {"learning_rate": _lr(0.001), **_ADAM, "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT)}
_FTRL = {
    "learning_rate_power": Param(-0.5, p.number(None, 0, interval=True)),
    "initial_accumulator_value": Param(0.1, p.NON_NEGATIVE),
    "l1_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "l2_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "l2_shrinkage_regularization_strength": Param(0.0, p.NON_NEGATIVE),
    "beta": Param(0.0, p.optional(p.NON_NEGATIVE)),
}
# Keras 3.15's Ftrl: the same rules as TF1's, refused in Keras's sentences (keras/src/optimizers/ftrl.py).
_KERAS_FTRL = {
    "learning_rate_power": Param(-0.5, keras_says(
        _FTRL["learning_rate_power"].rule,
        "`learning_rate_power` needs to be negative or zero. Received: learning_rate_power={value}.")),
    **{name: Param(_FTRL[name].default, keras_says(
        _FTRL[name].rule, f"`{name}` needs to be positive or zero. Received: {name}={{value}}."))
       for name in ("initial_accumulator_value", "l1_regularization_strength", "l2_regularization_strength",
                    "l2_shrinkage_regularization_strength")},
    "beta": _FTRL["beta"],
}
_RETURNN_ADAM = {
    "learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE),
    **_ADAM,
    "epsilon": Param(1e-8, p.NON_NEGATIVE),
}
_ADAM_SLOTS = {"m": "_momentums", "v": "_velocities", "vhat": "_velocity_hats"}
_ADAM_STATE = [Slot("m"), Slot("v"), Slot("vhat", when="amsgrad")]


def own(name, summary, family, location, params, state=(), scalars=0, mesh=None, mesh_unless=None):
    """The row of one of opt-train's own classes (on `base.Optimizer`): its arguments and `use_locking`.

    `state`: the names of its per-variable slots (or `Slot`s where one is not simply the variable's shape).
    """
    return Row(name=name, summary=summary, family=family, location=location,
               params={**params, "use_locking": USE_LOCKING},
               state=_slots(state), scalars=scalars, mesh=mesh, mesh_unless=mesh_unless)


def _fused_only(name, kernel, keras_twin, unless=""):
    """Why a class whose dense update is TF1's fused kernel alone cannot run on a mesh."""
    return (f"{name} cannot run on a mesh: its update is TF1's fused {kernel}, which DTensor cannot lay out "
            f"(no layout propagation); use {unless}{keras_twin}")


def keras_builtin(name, summary, keras_class, slots, params, state=None, scalars=0):
    """The row of a Keras 3 built-in, wrapped with the TF1 API in `keras_family.py` (Keras' defaults).

    `state` defaults to one variable-shaped slot per entry of `slots`.
    """
    return Row(name=name, summary=summary, family="keras", location=f"keras_family:{name}", params=dict(params),
               keras_class=keras_class, slots=dict(slots), state=_slots(slots if state is None else state),
               scalars=scalars)


def _slots(names):
    return tuple(name if isinstance(name, Slot) else Slot(name) for name in names)


# ----- the table -----

ROWS = (
    # TF1's tf.compat.v1.train optimizers, with TF1's defaults.
    own("GradientDescent",
        "TF1's GradientDescentOptimizer: `w -= lr * g`",
        "tf1", "gradient_descent:GradientDescent", {"learning_rate": _lr(0.01)}),
    own("ProximalGradientDescent",
        "TF1's ProximalGradientDescentOptimizer: a gradient step, then L1/L2 proximal shrinkage (FOBOS)",
        "tf1", "gradient_descent:ProximalGradientDescent",
        {"learning_rate": _lr(0.01), **_L1_L2}),
    own("Momentum",
        "TF1's MomentumOptimizer: the accumulator sums raw gradients and today's rate multiplies it; optional Nesterov",
        "tf1", "momentum:Momentum", {
        "learning_rate": _lr(0.01),
        # TF1's MomentumOptimizer has no default momentum.
        "momentum": Param(REQUIRED, p.NON_NEGATIVE_FLOAT),
        "use_nesterov": Param(False, _BOOL),
    }, state=["momentum"]),
    own("Adagrad",
        "TF1's AdagradOptimizer: the step divided by the root of the summed squared gradients",
        "tf1", "adagrad:Adagrad",
        {"learning_rate": _lr(0.01), "initial_accumulator_value": Param(0.1, p.POSITIVE_FLOAT)},
        state=["accumulator"]),
    own("ProximalAdagrad",
        "TF1's ProximalAdagradOptimizer: Adagrad steps with L1/L2 proximal shrinkage (FOBOS)",
        "tf1", "adagrad:ProximalAdagrad", {
        "learning_rate": _lr(0.01),
        "initial_accumulator_value": Param(0.1, p.POSITIVE_FLOAT),
        **_L1_L2,
    }, state=["accumulator"]),
    own("AdagradDA",
        "TF1's AdagradDAOptimizer: Adagrad dual averaging with L1/L2, counting its own steps",
        "tf1", "adagrad_da:AdagradDA", {
        "learning_rate": _lr(0.01),
        "initial_gradient_squared_accumulator_value": Param(0.1, p.POSITIVE_FLOAT),
        **_L1_L2,
    }, state=["gradient_accumulator", "gradient_squared_accumulator"]),
    own("Adadelta",
        "TF1's AdadeltaOptimizer (Zeiler, 2012), its step times `learning_rate`",
        "tf1", "adadelta:Adadelta", {
        "learning_rate": _lr(0.001),
        "rho": Param(0.95, p.UNIT),
        "epsilon": Param(1e-8, p.NON_NEGATIVE),
    }, state=["accum", "accum_update"],
        mesh=_fused_only("Adadelta", "ResourceApplyAdadelta", "KerasAdadelta (keras.optimizers.Adadelta)")),
    # TF1's Adam keeps beta_1^t and beta_2^t as two scalars.
    own("Adam",
        "TF1's AdamOptimizer: bias corrections folded into the step size, epsilon-hat form",
        "tf1", "adam:Adam", _TF1_ADAM, state=["m", "v"], scalars=2),
    own("LazyAdam",
        "TF1 Adam that, for a sparse gradient, updates only the rows looked up (and their moments)",
        "tf1", "adam:LazyAdam", _TF1_ADAM, state=["m", "v"], scalars=2),
    own("Ftrl",
        "TF1's FtrlOptimizer: FTRL-Proximal (McMahan et al., 2013) with L1, L2, L2 shrinkage and beta",
        "tf1", "ftrl:Ftrl", {"learning_rate": _lr(0.01), **_FTRL}, state=["accum", "linear"]),
    own("RMSProp",
        "TF1's RMSPropOptimizer: mean square starting at 1, epsilon inside the root, rate inside the momentum; "
        "optional centered",
        "tf1", "rmsprop:RMSProp", {
        "learning_rate": _lr(0.01),
        "rho": Param(0.9, p.UNIT),
        "momentum": Param(0.0, p.NON_NEGATIVE),
        "epsilon": Param(1e-10, p.NON_NEGATIVE),
        "centered": Param(False, _BOOL),
    }, state=["rms", "momentum", Slot("mg", when="centered")],
        mesh=_fused_only("RMSProp", "ResourceApplyRMSProp", "KerasRMSprop (keras.optimizers.RMSprop)",
                         unless="centered: true (its kernel has the rule), or "),
        mesh_unless="centered"),
    # Keras 3's classes, wrapped; TF1 names win a clash, so Keras's Adam & co. take a "Keras" prefix.
    keras_builtin("SGD",
        "Keras 3's SGD: gradient descent with optional (Nesterov) momentum on gradients times rates",
        "SGD", {"momentum": "momentums"},
          {"learning_rate": _lr(0.01),
           # Keras refuses a momentum that is no float, in its one sentence; YAML's `momentum: 1` passes as 1.0.
           "momentum": Param(0.0, keras_says(p.UNIT, "`momentum` must be a float between [0, 1].",
                                             codes=("out_of_range", "wrong_type"))),
           "nesterov": Param(False, _BOOL)},
          state=[Slot("momentum", when="momentum")]),
    keras_builtin("Adamax",
        "Keras 3's Adamax: Adam with the infinity norm in place of the second moment",
        "Adamax", {"m": "_m", "u": "_u"}, _KERAS_ADAM),
    keras_builtin("Nadam",
        "Keras 3's Nadam: Adam with Nesterov momentum",
        "Nadam", {"m": "_momentums", "v": "_velocities"}, _KERAS_ADAM, scalars=1),
    keras_builtin("AdamW",
        "Keras 3's AdamW: Adam with decoupled weight decay",
        "AdamW", _ADAM_SLOTS, {
        "learning_rate": _lr(0.001),
        "weight_decay": Param(0.004, keras_says(
            p.NON_NEGATIVE_FLOAT, "Argument `weight_decay` must be a float. Received: weight_decay={value}",
            codes=("wrong_type",))),
        **_ADAM,
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "amsgrad": Param(False, _BOOL),
    }, state=_ADAM_STATE),
    keras_builtin("Adafactor",
        "Keras 3's Adafactor: second moment factored into row and column averages",
        "Adafactor", {"r": "_r", "c": "_c", "v": "_v"}, {
        "learning_rate": _lr(0.001),
        "beta_2_decay": Param(-0.8, p.ANY_NUMBER),
        "epsilon_1": Param(1e-30, p.NON_NEGATIVE_FLOAT),
        "epsilon_2": Param(0.001, p.NON_NEGATIVE_FLOAT),
        "clip_threshold": Param(1.0, p.NON_NEGATIVE_FLOAT),
        "relative_step": Param(True, _BOOL),
    }, state=[Slot("r", "rows"), Slot("c", "columns"), Slot("v")]),
    keras_builtin("Lion",
        "Keras 3's Lion: the sign of an interpolated momentum as the step",
        "Lion", {"m": "_momentums"}, {
        "learning_rate": _lr(0.001),
        "beta_1": Param(0.9, keras_says(
            p.number(0, 1, low_open=True, interval=True),
            "Argument `beta_1` must be in the [0, 1] range. Otherwise, the optimizer degenerates to SignSGD. "
            "Received: beta_1={value}.")),
        "beta_2": Param(0.99, p.FRACTION),
    }),
    keras_builtin("Lamb",
        "Keras 3's Lamb: Adam steps scaled per layer by the trust ratio",
        "Lamb", {"m": "_momentums", "v": "_velocities"}, _KERAS_ADAM),
    keras_builtin("Muon",
        "Keras 3's Muon: momentum orthogonalised by Newton-Schulz for matrices, AdamW for the rest",
        "Muon", {"momentum": "momentums", "v": "adam_velocities"}, {
        "learning_rate": _lr(0.001),
        "adam_beta_1": Param(0.9, p.FRACTION),
        "adam_beta_2": Param(0.999, p.FRACTION),
        "adam_weight_decay": Param(0.004, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "weight_decay": Param(0.004, p.NON_NEGATIVE_FLOAT),
        "exclude_layers": Param(None, p.optional(p.list_of(p.string, text="a list of layer names"))),
        "exclude_embeddings": Param(True, _BOOL),
        "muon_a": Param(3.4445, p.ANY_NUMBER),
        "muon_b": Param(-4.775, p.ANY_NUMBER),
        "muon_c": Param(2.0315, p.ANY_NUMBER),
        "adam_lr_ratio": Param(1, p.POSITIVE_FLOAT),
        "momentum": Param(0.95, p.FRACTION),
        "ns_steps": Param(5, p.integer(1)),
        "nesterov": Param(True, _BOOL),
        "rms_rate": Param(0.2, p.optional(p.NON_NEGATIVE_FLOAT)),
    }, state=[Slot("momentum"), Slot("v", when="adam_variable")]),
    keras_builtin("ScheduleFreeAdamW",
        "Keras 3's ScheduleFreeAdamW: schedule-free AdamW, interpolating and averaging iterates",
        "ScheduleFreeAdamW", {"z": "_momentums", "v": "_velocities"}, {
        "learning_rate": _lr(0.0025),
        **_ADAM,
        "epsilon": Param(1e-8, p.NON_NEGATIVE_FLOAT),
        "warmup_steps": Param(0, p.integer(0)),
    }),
    keras_builtin("KerasAdam",
        "Keras 3's Adam (keras.optimizers.Adam): bias-corrected moments, epsilon outside the root",
        "Adam", _ADAM_SLOTS, {**_KERAS_ADAM, "amsgrad": Param(False, _BOOL)},
                  state=_ADAM_STATE),
    keras_builtin("KerasAdagrad",
        "Keras 3's Adagrad (keras.optimizers.Adagrad)",
        "Adagrad", {"accumulator": "_accumulators"}, {
        "learning_rate": _lr(0.001),
        "initial_accumulator_value": Param(0.1, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
    }),
    keras_builtin("KerasAdadelta",
        "Keras 3's Adadelta (keras.optimizers.Adadelta)",
        "Adadelta",
                  {"accum": "_accumulated_grads", "accum_update": "_accumulated_delta_vars"}, {
        "learning_rate": _lr(0.001),
        "rho": Param(0.95, p.UNIT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
    }),
    keras_builtin("KerasFtrl",
        "Keras 3's Ftrl (keras.optimizers.Ftrl): FTRL-Proximal",
        "Ftrl", {"accum": "_accumulators", "linear": "_linears"},
                  {"learning_rate": _lr(0.001), **_KERAS_FTRL}),
    keras_builtin("KerasRMSprop",
        "Keras 3's RMSprop (keras.optimizers.RMSprop): plain or centered, with momentum",
        "RMSprop",
                  {"rms": "_velocities", "momentum": "_momentums", "mg": "_average_gradients"}, {
        "learning_rate": _lr(0.001),
        "rho": Param(0.9, p.UNIT),
        "momentum": Param(0.0, p.NON_NEGATIVE_FLOAT),
        "epsilon": Param(1e-7, p.NON_NEGATIVE_FLOAT),
        "centered": Param(False, _BOOL),
    }, state=[Slot("rms"), Slot("momentum", when="momentum"), Slot("mg", when="centered")]),
    # OpenSeq2Seq's.
    own("NovoGrad",
        "OpenSeq2Seq's NovoGrad (Ginsburg et al., 2019): momentum SGD on gradients divided by a layer-wise "
        "second moment",
        "openseq2seq", "novograd:NovoGrad", {
        "learning_rate": _lr(1.0),
        "beta_1": Param(0.95, p.UNIT),
        "beta_2": Param(0.98, p.UNIT),
        "epsilon": Param(1e-8, p.NON_NEGATIVE),
        "coupled_weight_decay": Param(0.0, p.NON_NEGATIVE),
        "grad_averaging": Param(False, _BOOL),
    }, state=["momentum", Slot("grads_ema", "scalar", dtype="float32")]),
    # RETURNN's.
    own("AMSGrad",
        "RETURNN's AMSGradOptimizer: Adam without bias correction, denominator `sqrt(max(v_hat, v))`; "
        "`decay` divides lr by `sqrt(t)`",
        "returnn", "amsgrad:AMSGrad", {
        "learning_rate": _lr(0.001, RETURNN_LEARNING_RATE),
        "decay": Param(False, _BOOL),
        "beta_1": Param(0.9, p.FRACTION),
        "beta_2": Param(0.99, p.FRACTION),
        "epsilon": Param(0.0, p.NON_NEGATIVE),
    }, state=["m", "v", "v_hat"]),
    own("CustomGradientDescent",
        "RETURNN's example on BaseCustomOptimizer: `w -= lr * g`",
        "returnn", "custom:CustomGradientDescent",
        {"learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE)}),
    own("CustomAdam",
        "RETURNN's CustomAdamOptimizer: TF1 Adam on BaseCustomOptimizer; a sparse gradient updates only its rows",
        "returnn", "custom:CustomAdam", _RETURNN_ADAM, state=["m", "v"]),
    own("GradVarianceScaled",
        "RETURNN's: `w -= lr * g * min(v / ((g - m)^2 + epsilon), 1)`, `v` the running variance of `g`",
        "returnn", "grad_variance_scaled:GradVarianceScaled", _RETURNN_ADAM,
        state=["m", "v"]),
    own("NeuralOptimizer1",
        "RETURNN's (neural optimizer search): `w -= lr * g`, times `decrease_factor` where `sign(g) != sign(m)`",
        "returnn", "neural_optimizer1:NeuralOptimizer1", {
        "learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE),
        "beta_1": Param(0.9, p.FRACTION),
        "decrease_factor": Param(0.1, p.NON_NEGATIVE),
    }, state=["m"]),
    own("NormalizedSGD",
        "RETURNN's: `w -= lr * g / ||g||` per variable",
        "returnn", "normalized_sgd:NormalizedSGD",
        {"learning_rate": _lr(REQUIRED, RETURNN_LEARNING_RATE)}),
    # RETURNN's NadamOptimizer: TF1 Adam's arguments and defaults.
    own("ReturnnNadam",
        "RETURNN's NadamOptimizer (TF1 contrib's): TF1 Adam whose step uses `beta_1 * m + (1 - beta_1) * g`; "
        "not Keras's Nadam",
        "returnn", "returnn_nadam:ReturnnNadam", _TF1_ADAM, state=["m", "v"], scalars=2),
)

# ----- views of the table -----

TABLE = {row.name: row for row in ROWS}
assert len(TABLE) == len(ROWS), "two rows share a name"
FAMILY_NAMES = ("tf1", "keras", "openseq2seq", "returnn")
assert {row.family for row in ROWS} <= set(FAMILY_NAMES)
# Display names, family by family (the order `opt-train list` shows).
OPTIMIZER_NAMES = tuple(row.name for family in FAMILY_NAMES for row in ROWS if row.family == family)
# display name -> {parameter: Param}: the class's own constructor arguments.
OPTIMIZER_PARAMS = {name: TABLE[name].params for name in OPTIMIZER_NAMES}
OPTIMIZERS = registry.Table("optimizer", [TABLE[name] for name in OPTIMIZER_NAMES],
                            columns=("family", "summary", "parameters", "on_mesh"))

# Names TF1 / RETURNN users know that are not optimizers here, and what replaces them.
REPLACED = {
    "syncreplicas": (
        "`SyncReplicas` is not an optimizer in opt-train: synchronous data-parallel "
        "training is a backend. Set `num_gpus: N` (replicas in one process) or launch "
        "`opt-train train --np N --config x.yaml` (workers; `distributed: tf`, or "
        "`distributed: horovod`), and name the inner optimizer in `optimizer`."
    ),
}


def is_path(name):
    """True for a dotted path `package.module.Class` or `package.module:Class` (the user's class)."""
    return isinstance(name, str) and (":" in name or "." in name)


def resolve(name):
    """The display name for any accepted spelling (`adam`, `AdamOptimizer`, `ADAM`).

    Raises `UnknownNameError` with the closest name, or a `ParamError` for a TF1
    name that opt-train replaces (`SyncReplicas`). A dotted path is returned
    unchanged; `classes.get_class` imports it.
    """
    if not isinstance(name, str):
        raise ParamError(None, "wrong_type", "an optimizer name must be a string", name,
                         text=f"An optimizer name must be a string. Received: {name!r}")
    if is_path(name):
        return name
    key = normalize(name)
    if key in REPLACED:
        raise ParamError(None, "unknown_name", REPLACED[key], text=REPLACED[key])
    return OPTIMIZERS.resolve(name)


def mesh_refusal(name, params=None):
    """Why optimizer `name` with constructor `params` cannot update variables laid out on a DTensor mesh, or None.

    A user's class (a dotted path) is not refused here: the backend's own check of the built step decides.
    """
    if is_path(name):
        return None
    row = TABLE[resolve(name)]
    if row.mesh is None:
        return None
    unless = row.mesh_unless
    if unless is not None and (params or {}).get(unless, row.params[unless].default):
        return None
    return row.mesh


def family_of(name):
    """The family ("tf1", "keras", "openseq2seq", "returnn") of a registered name."""
    return TABLE[resolve(name)].family


def row_of_class(cls):
    """The row whose location is `cls` itself (by module and name, nothing imported), else None."""
    name = vars(cls).get("_registry_name") or cls.__name__
    row = TABLE.get(name)
    if row is None:
        return None
    module, _, attribute = row.location.partition(":")
    return row if (cls.__module__, cls.__name__) == (f"{PACKAGE}.{module}", attribute) else None


def describe():
    """[(name, family, {parameter: default})] for every registered optimizer, TF-free.

    A required parameter's default is the string "required". The Keras base
    arguments common to all (weight_decay, clipnorm, ...) and `use_locking` are
    left out, unless the class has its own default.
    """
    return [(name, TABLE[name].family, TABLE[name].defaults()) for name in OPTIMIZER_NAMES]
