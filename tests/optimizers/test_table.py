"""The optimizer table is the one source: each Python constructor refuses what YAML refuses, and
`opt-train list optimizers`, `opt-train validate` and the registry read the same rows."""

import re

import pytest

from opt_train.errors import ParamError
from opt_train.optimizers import classes, keras_family, specs, table
from opt_train.params import REQUIRED

pytest.importorskip("tensorflow")

# Values a rule may refuse, tried one by one; None is left out (Python reads None as
# "not given" for a required argument, YAML as a wrong type: a different code by design).
CANDIDATES = (-1.0, 0.0, 1.5, 2.0, "x", True, [1.0])
# A valid value for each required parameter, so one bad value is the only problem.
GIVEN = {"learning_rate": 0.1, "momentum": 0.9}
# Base arguments Python-only or anything-goes: nothing to refuse.
UNJUDGED_BASE = ("name", "exclude_from_weight_decay")


def _yaml_refusal(name, key, value):
    """(param, code) `opt-train validate` gives `optimizer_params: {key: value}`, or None when it accepts."""
    required = {k: GIVEN[k] for k, p in table.OPTIMIZER_PARAMS[name].items() if p.required and k != key}
    _, errors = specs.param_errors(name, {**required, key: value})
    return (errors[0].param, errors[0].code) if errors else None


def _python_refusal(name, key, value):
    required = {k: GIVEN[k] for k, p in table.OPTIMIZER_PARAMS[name].items() if p.required and k != key}
    try:
        classes.OPTIMIZER_CLS_NAMES[name](**{**required, key: value})
    except ParamError as error:
        return error.param, error.code
    return None


def _cases():
    for row in table.ROWS:
        for key in row.params:
            yield pytest.param(row.name, key, id=f"{row.name}.{key}")
    # Keras' base arguments, once per family (every class forwards them to the same check).
    for family in table.FAMILY_NAMES:
        name = next(row.name for row in table.ROWS if row.family == family)
        for key in table.BASE_PARAMS:
            if key not in UNJUDGED_BASE and key not in table.OPTIMIZER_PARAMS[name]:
                yield pytest.param(name, key, id=f"{name}.{key}(base)")


@pytest.mark.parametrize("name, key", list(_cases()))
def test_the_python_constructor_refuses_what_yaml_refuses(name, key):
    refused = 0
    for value in CANDIDATES:
        expected = _yaml_refusal(name, key, value)
        if expected is None:
            continue
        assert _python_refusal(name, key, value) == expected, (name, key, value)
        refused += 1
    assert refused, f"no candidate value is refused for {name}.{key}: the test would check nothing"


def test_a_negative_learning_rate_is_refused_in_python_as_in_yaml():
    from opt_train.optimizers.adam import Adam

    with pytest.raises(ParamError, match=r"`learning_rate` must be > 0\. Received: learning_rate=-1\.0") as caught:
        Adam(learning_rate=-1.0)
    assert (caught.value.param, caught.value.code) == ("learning_rate", "out_of_range")
    assert _yaml_refusal("Adam", "learning_rate", -1.0) == ("learning_rate", "out_of_range")


def test_a_user_subclass_is_not_judged_by_its_parents_row():
    from opt_train.optimizers.custom import CustomGradientDescent

    class Zero(CustomGradientDescent):
        pass

    assert table.row_of_class(Zero) is None
    assert table.row_of_class(CustomGradientDescent).name == "CustomGradientDescent"


def test_every_row_names_a_class_of_that_name_in_its_family():
    for row in table.ROWS:
        cls = classes.OPTIMIZER_CLS_NAMES[row.name]
        assert table.row_of_class(cls) is row, row.name
        if row.family == "keras":
            keras_class, slots = keras_family.KERAS_CLASSES[row.name]
            assert keras_class.__name__ == row.keras_class and issubclass(cls, keras_class)
            assert slots == row.slots
        else:
            assert row.keras_class is None and not row.slots
    assert set(keras_family.WRAPPERS) == {row.name for row in table.ROWS if row.family == "keras"}


# The classes a user subclasses, not optimizers a config names.
BASES = {"base:Optimizer", "custom:BaseCustomOptimizer"}


def test_every_optimizer_class_of_the_package_has_its_row():
    """An optimizer module without its row in `table.ROWS` was reachable from no config and failed no test."""
    import importlib
    import inspect
    import pkgutil

    import keras

    import opt_train.optimizers as package

    defined = set()
    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"{package.__name__}.{module.name}")
        defined |= {f"{module.name}:{name}" for name, value in vars(loaded).items()
                    if inspect.isclass(value) and issubclass(value, keras.optimizers.Optimizer)
                    and value.__module__ == loaded.__name__}
    assert defined - BASES == {row.location for row in table.ROWS}


def _listed(output):
    """{name: (family, {parameter: shown default})} from `opt-train list optimizers` (parameters on the next line)."""
    rows = {}
    lines = output.splitlines()
    for line, after in zip(lines, lines[1:]):
        found = re.match(r"^(\w+)\s+\[(\w+)\] ", line)
        if found:
            shown = dict(re.findall(r"(\w+)(?:=(\S+?)|\s\(required\))(?:,|$)", after.strip()))
            rows[found.group(1)] = (found.group(2), shown)
    return rows


def test_list_validate_and_the_table_agree(cli, write_config):
    listed = cli("list", "optimizers")
    assert listed.exit_code == 0, listed.output
    rows = _listed(listed.output)
    assert list(rows) == list(table.OPTIMIZER_NAMES)
    for row in table.ROWS:
        family, shown = rows[row.name]
        assert family == row.family, row.name
        own = {key: param for key, param in row.params.items() if key not in table.COMMON_PARAMETERS}
        assert set(shown) == set(own), row.name
        for key, param in own.items():
            assert shown[key] == ("" if param.required else str(param.default)), (row.name, key)
        # validate takes the row's defaults written out, and refuses a parameter the row lacks.
        params = {key: GIVEN[key] if param.required else param.default for key, param in own.items()}
        config = write_config({"model": "mlp", "max_steps": 10, "optimizer": row.name.lower(),
                               "optimizer_params": params})
        checked = cli("validate", "--config", config)
        assert checked.exit_code == 0, (row.name, checked.output)
        config = write_config({"model": "mlp", "max_steps": 10, "optimizer": row.name,
                               "optimizer_params": {**params, "not_a_parameter": 1}})
        refused = cli("validate", "--config", config)
        assert refused.exit_code == 2 and "optimizer_params.not_a_parameter" in refused.output, row.name
    # A required parameter left out: validate names it, from the row.
    config = write_config({"model": "mlp", "max_steps": 10, "optimizer": "Momentum"})
    refused = cli("validate", "--config", config)
    assert refused.exit_code == 2 and "optimizer_params.momentum" in refused.output
    assert [k for k, p in table.OPTIMIZER_PARAMS["Momentum"].items() if p.default is REQUIRED] == ["momentum"]

