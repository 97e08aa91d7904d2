"""The TF-free optimizer table against the classes themselves: same names and defaults as each
constructor's signature (Keras' own for the Keras family), and each `__init__` refuses a bad value with
the table's `ParamError`, so `opt-train validate` and the class judge alike."""

import inspect

import pytest

from opt_train.errors import ParamError
from opt_train.optimizers import classes, registry, specs, table

pytest.importorskip("tensorflow")


def signature_defaults(cls):
    """{parameter: default} of the constructor, through **kwargs up to Keras' base."""
    found = classes.signature_params(cls)
    return {
        name: ("required" if default is inspect.Parameter.empty else default)
        for name, default in found.items()
        if name not in table.PYTHON_ONLY_PARAMETERS
    }


@pytest.mark.parametrize("name", table.OPTIMIZER_NAMES)
def test_table_names_and_defaults_are_the_constructors(name):
    cls = classes.OPTIMIZER_CLS_NAMES[name]
    table = specs.spec(name)
    expected = signature_defaults(cls)
    if name == "Momentum":
        expected["momentum"] = "required"  # TF1 had no default: the signature's None means "must be given"
    stated = {key: "required" if param.required else param.default for key, param in table.items()}
    stated.pop("exclude_from_weight_decay")  # set by method in Keras, accepted as a parameter
    expected.pop("name")  # each class names itself
    stated.pop("name")
    assert stated == expected


def _bad_value(param):
    """A value the rule refuses, or None when the rule takes anything."""
    for value in ("x", -1.0, 2.0, -0.5, 0.0):
        try:
            param.rule("p", value)
        except ParamError:
            return value
    return None


@pytest.mark.parametrize("name", table.OPTIMIZER_NAMES)
def test_each_constructor_refuses_what_the_table_refuses(name):
    cls = classes.OPTIMIZER_CLS_NAMES[name]
    row = table.OPTIMIZER_PARAMS[name]
    base = {key: 0.1 for key, param in row.items() if param.required}
    if name == "Momentum":
        base["momentum"] = 0.9
    checked = 0
    for key, param in row.items():
        bad = _bad_value(param)
        if bad is None:
            continue
        with pytest.raises(ParamError) as caught:
            cls(**{**base, key: bad})
        assert (caught.value.param, caught.value.code) == (key, _code(param, key, bad))
        checked += 1
    assert checked


def _code(param, key, value):
    try:
        param.rule(key, value)
    except ParamError as error:
        return error.code


def test_required_momentum_given_as_none_is_missing():
    with pytest.raises(ParamError, match=r"`momentum` is required.*Received: momentum=None") as caught:
        classes.OPTIMIZER_CLS_NAMES["Momentum"](learning_rate=0.1)
    assert caught.value.code == "missing"


def test_keras_base_arguments_are_checked_before_keras():
    with pytest.raises(ParamError) as caught:
        registry.get("SGD", clipnorm=1.0, clipvalue=1.0)
    assert (caught.value.param, caught.value.code) == ("clipvalue", "conflict")


def test_larc_and_loss_scaler_signatures_keep_the_tables_defaults():
    from opt_train.optimizers import loss_scaling, names
    from opt_train.optimizers.larc import larc

    def defaults(function):
        # Keyword-only arguments are what the pipeline passes (larc's `rate_multipliers`), not config values.
        return {
            key: "required" if p.default is inspect.Parameter.empty else p.default
            for key, p in inspect.signature(function).parameters.items() if p.kind is not p.KEYWORD_ONLY
        }

    assert defaults(larc) == {k: "required" if v.required else v.default for k, v in names.LARC_SPEC.items()}
    classes = {"Backoff": loss_scaling.BackoffScaler, "LogMax": loss_scaling.LogMaxScaler,
               "Dynamic": loss_scaling.DynamicScaler}
    for algorithm, cls in classes.items():
        assert defaults(cls) == names.LOSS_SCALERS[algorithm], algorithm
