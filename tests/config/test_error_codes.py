"""Every check raises a `ParamError` that carries its parameter, a stable code and the value (TF-free).

Walks every parameter table (datasets, models, lr policies, warm-up, loss scalers,
LARC, the pipeline keys, every optimizer) and every registry with bad values; an
error without a code, or any other exception, fails. A scan of every module of the
package fails on a bare `raise ValueError` (a short, commented allow-list aside), so a new
check cannot skip the code.
"""

import ast
import pathlib

import pytest

from opt_train import params as p
from opt_train.data import registry as data_registry
from opt_train.errors import PARAM_CODES, ParamError
from opt_train.lr_policies import registry as lr_registry
from opt_train.lr_policies.registry import POLICY_PARAMS, WARMUP_PARAMS
from opt_train.models import registry as model_registry
from opt_train.optimizers import names, specs
from opt_train.optimizers import table as optimizer_table
from opt_train.suggest import UnknownNameError

BAD_VALUES = ["x", "", True, -1, -2.5, 0, 10**9, float("nan"), float("inf"), [], [0], ["a"], {}, {"a": 1}]

TABLES = {
    **{f"dataset {name}": spec for name, spec in data_registry.DATASET_SPECS.items()},
    **{f"model {name}": spec for name, spec in model_registry.MODEL_SPECS.items()},
    **{f"lr_policy {name}": spec for name, spec in POLICY_PARAMS.items()},
    "warmup": WARMUP_PARAMS,
    **{f"loss scaler {name}": spec for name, spec in names.LOSS_SCALER_PARAMS.items()},
    "larc_params": names.LARC_SPEC,
    "optimizer base": optimizer_table.BASE_PARAMS,
    **{f"optimizer {name}": spec for name, spec in optimizer_table.OPTIMIZER_PARAMS.items()},
}


def assert_coded(error, param=None):
    assert isinstance(error, ParamError), f"{type(error).__name__} without a code: {error}"
    assert error.code in PARAM_CODES, error.code
    assert error.message, error
    if param is not None:
        assert error.param == param, (error.param, param)


@pytest.mark.parametrize("table", list(TABLES))
def test_every_rule_fails_with_a_code_naming_its_parameter(table):
    failures = 0
    for name, param in TABLES[table].items():
        for value in BAD_VALUES:
            try:
                param.rule(name, value)
            except ParamError as error:  # anything else (TypeError, a bare ValueError) fails the test
                failures += 1
                assert_coded(error, name)
                assert str(error)  # the Keras wording for Python callers
    assert failures or not TABLES[table], f"no bad value was refused in {table}"


@pytest.mark.parametrize("table", list(TABLES))
def test_defaults_pass_their_own_rules(table):
    for name, param in TABLES[table].items():
        if not param.required:
            param.rule(name, param.default)


@pytest.mark.parametrize(
    "resolve",
    [
        data_registry.resolve,
        model_registry.resolve,
        lr_registry.resolve,
        optimizer_table.resolve,
        names.resolve_loss_scaler,
        names.check_dtype,
        names.check_on_nonfinite,
        specs.spec,
    ],
)
@pytest.mark.parametrize("bad", ["Adamm", "", 3, None, "syncreplicas"])
def test_every_registry_refuses_a_bad_name_with_a_code(resolve, bad):
    try:
        resolve(bad)
    except ParamError as error:
        assert_coded(error)
        assert error.code in ("unknown_name", "wrong_type")
    else:
        pytest.fail(f"{resolve.__qualname__} accepted {bad!r}")


CHECKS = [
    # (check, args, kwargs, param, code)
    (lr_registry.check_params, ("exp", {"decay_steps": 5}), {}, "decay_rate", "missing"),
    (lr_registry.check_params, ("poly", {"decay_stepz": 5}), {}, "decay_stepz", "unknown_key"),
    (lr_registry.check_params, ("poly", {"learning_rate": 0.1}), {}, "learning_rate", "unknown_key"),
    (lr_registry.check_params, ("poly", {"power": 0}), {"max_steps": 10}, "power", "out_of_range"),
    (lr_registry.check_params, ("poly", {}), {"max_steps": 0}, "max_steps", "out_of_range"),
    (lr_registry.check_params, ("poly", {"begin_decay_at": 20}), {"max_steps": 10}, "decay_steps", "out_of_range"),
    (lr_registry.check_params, ("piecewise", {"boundaries": [1, 2], "decay_rates": [1]}), {}, "decay_rates",
     "out_of_range"),
    (lr_registry.check_params, ("piecewise", {"boundaries": [2, 1], "decay_rates": [1, 1]}), {}, "boundaries",
     "out_of_range"),
    (lr_registry.check_warmup, ({"steps": -1},), {}, "steps", "out_of_range"),
    (lr_registry.check_warmup, ({},), {}, "steps", "missing"),
    (lr_registry.check_warmup, (3,), {}, "warmup", "wrong_type"),
    (data_registry.check_params, ("npz", {}), {}, "path", "missing"),
    (data_registry.check_params, ("csv", {"path": "a", "delimiter": ";;"}), {}, "delimiter", "wrong_type"),
    (model_registry.check_params, ("transformer", {"d_model": 10, "num_heads": 4}), {}, "num_heads",
     "out_of_range"),
    (model_registry.check_params, ({"factory": "nocolon"}, {}), {}, "factory", "wrong_type"),
    (model_registry.check_task, ("transformer", "classification"), {}, None, "out_of_range"),
    (names.check_larc_params, ({"larc_mode": "clip"},), {}, "larc_eta", "missing"),
    (names.check_larc_params, ({"larc_eta": 0.1, "larc_mode": "clamp"},), {}, "larc_mode", "unknown_name"),
    (names.check_loss_scaling, (128, {"step_window": 3}), {}, "loss_scaling_params", "conflict"),
    (names.check_loss_scaling, ("Backoff", {"scale_min": 4, "scale_max": 2}), {}, "scale_max", "out_of_range"),
    (names.check_loss_scaling, ("-1",), {}, "loss_scaling", "out_of_range"),
    (names.LOSS_SCALER_NAMES.check, ("Dynamic", {"step_window": 3}), {}, "step_window", "unknown_key"),
    (names.check_iter_size, (0,), {}, "iter_size", "out_of_range"),
    (names.check_iter_size, (1.5,), {}, "iter_size", "wrong_type"),
    (names.check_max_grad_norm, (-1,), {}, "max_grad_norm", "out_of_range"),
    (names.check_max_consecutive_overflows, (0,), {}, "max_consecutive_overflows", "out_of_range"),
    (names.check_summaries, (["gradient_norms"],), {}, "summary", "unknown_name"),
    (names.check_summaries, (3,), {}, "summaries", "wrong_type"),
    (specs.check_params, ("Adam", {"bta1": 0.9}), {}, "bta1", "unknown_key"),
    (specs.check_params, ("Adam", {"beta1": 0.9, "beta_1": 0.8}), {}, "beta1", "conflict"),
    (specs.check_params, ("Adam", {"gradient_accumulation_steps": 4}), {}, "gradient_accumulation_steps",
     "conflict"),
    (specs.check_params, ("Adam", {"clipnorm": 1.0, "clipvalue": 1.0}), {}, "clipvalue", "conflict"),
    (specs.check_params, ("Momentum", {}), {}, "momentum", "missing"),
    (specs.check_params, ("CustomGradientDescent", {}), {}, "learning_rate", "missing"),
    (specs.check_params, ("AdamOptimizer", {"beta1": 1.5}), {}, "beta_1", "out_of_range"),
    (specs.check_args, ("Momentum",), {"momentum": None}, "momentum", "missing"),
    (p.check_params, ({"a": p.Param(1, p.integer(1))}, [1], "thing"), {}, None, "wrong_type"),
]


@pytest.mark.parametrize("check, args, kwargs, param, code", CHECKS,
                         ids=[f"{c[0].__qualname__}-{c[3]}-{c[4]}-{i}" for i, c in enumerate(CHECKS)])
def test_every_check_raises_its_parameter_and_code(check, args, kwargs, param, code):
    with pytest.raises(ValueError) as caught:
        check(*args, **kwargs)
    assert_coded(caught.value, param)
    assert caught.value.code == code


def test_an_unknown_key_names_itself_and_suggests():
    error = UnknownNameError("parameter of Adam", "bta1", ["beta_1", "beta_2"], code="unknown_key")
    assert (error.param, error.code, error.suggestion) == ("bta1", "unknown_key", "beta_1")
    assert error.message == "unknown key; did you mean 'beta_1'?"
    assert str(error) == "unknown parameter of Adam 'bta1'; did you mean 'beta_1'?"


def test_param_error_refuses_a_code_outside_the_list():
    with pytest.raises(AssertionError):
        ParamError("x", "bad", "must be fine")


def test_an_error_at_a_full_key_is_one_constructor():
    error = ParamError.at("model", "out_of_range", "`model` x.keras cannot be loaded", value=3)
    assert (error.key, error.param, error.code, error.value) == ("model", None, "out_of_range", 3)
    assert str(error) == error.message == "`model` x.keras cannot be loaded"
    with pytest.raises(AssertionError):
        ParamError.at("model", "bad", "must be fine")
    # The gradient_transforms checks raise it as it is, at the entry's full key.
    from opt_train.optimizers.user_transforms import check_entry

    with pytest.raises(ParamError) as caught:
        check_entry(0, {"after": "clip"})
    assert type(caught.value) is ParamError
    assert (caught.value.key, caught.value.code, str(caught.value)) == ("gradient_transforms[0].factory", "missing", "is required")


# No module of the package raises a bare ValueError or TypeError: a user's mistake must carry its key and code
# (`ParamError`, `ConfigError`, ...), and a library call's argument error its parameter and code. The allowed
# exceptions, each a programming error no config or command line reaches:
BARE_ALLOWED = {
    # A caller passed a plain tf.Variable where a Keras variable is needed: Python's own TypeError.
    ("optimizers/mesh_state.py", "TypeError"),
}
PACKAGE = pathlib.Path(__file__).parents[2] / "opt_train"


def bare_raises(path):
    """`[(line, class name)]` of every `raise ValueError(...)` / `raise TypeError` in the file at `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = getattr(raised, "id", None) or getattr(raised, "attr", None)
            if name in ("ValueError", "TypeError"):
                found.append((node.lineno, name))
    return sorted(found)


@pytest.mark.parametrize("module", sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")))
def test_no_module_raises_an_error_without_a_code(module):
    bare = [(line, name) for line, name in bare_raises(PACKAGE / module) if (module, name) not in BARE_ALLOWED]
    assert not bare, f"opt_train/{module}: a ValueError or TypeError without a code at (line, class) {bare}"


def test_the_scan_finds_a_bare_raise(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f(x):\n    if x:\n        raise ValueError('no')\n    raise TypeError\n")
    assert bare_raises(module) == [(3, "ValueError"), (4, "TypeError")]


def test_every_allowed_bare_raise_is_still_there():
    for module, name in BARE_ALLOWED:
        assert any(found == name for _, found in bare_raises(PACKAGE / module)), (module, name)


def test_the_optimizer_table_lists_exactly_the_registered_optimizers():
    assert list(optimizer_table.OPTIMIZER_PARAMS) == list(optimizer_table.OPTIMIZER_NAMES) or set(
        optimizer_table.OPTIMIZER_PARAMS
    ) == set(optimizer_table.OPTIMIZER_NAMES)
