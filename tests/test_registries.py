"""Every registry of `opt_train.registry.TABLES`, row by row: a forgotten site of a new entry fails here.

Each row's code imports, its summary says something, its defaults pass its own rules, and
each TF-side table keyed by the kind's names (`Table.sites`) holds exactly the table's names.
"""

from __future__ import annotations

import pytest

from opt_train import registry
from opt_train.params import REQUIRED
from opt_train.registry import Row, Table

TABLES = registry.tables()
ROWS = [(kind, name) for kind, table in TABLES.items() for name in table.rows]
SITES = [(kind, site) for kind, table in TABLES.items() for site in table.sites]


def _row(kind, name) -> Row:
    return TABLES[kind].rows[name]


def test_every_table_is_a_table_of_rows():
    for kind, table in TABLES.items():
        assert isinstance(table, Table), kind
        assert table.rows, kind
        assert all(isinstance(row, Row) for row in table.rows.values()), kind


@pytest.mark.parametrize(("kind", "name"), ROWS)
def test_the_code_a_row_names_imports(kind, name):
    row = _row(kind, name)
    assert row.locations(), f"{kind} {name} names no code"
    for location in row.locations():
        assert callable(registry.load(location)), location


@pytest.mark.parametrize(("kind", "name"), ROWS)
def test_a_row_says_what_it_is(kind, name):
    row = _row(kind, name)
    assert row.summary.strip(), f"{kind} {name}: empty summary"
    assert "\n" not in row.summary


@pytest.mark.parametrize(("kind", "name"), ROWS)
def test_a_rows_defaults_pass_its_own_rules(kind, name):
    for param, spec in _row(kind, name).params.items():
        if spec.default is not REQUIRED:
            spec.rule(param, spec.default)


@pytest.mark.parametrize(("kind", "name"), ROWS)
def test_a_row_is_found_by_its_name_and_its_aliases(kind, name):
    table = TABLES[kind]
    row = _row(kind, name)
    assert table.resolve(name) == name
    assert table.resolve(name.upper()) == name
    for alias in row.aliases:
        assert table.resolve(alias) == name


@pytest.mark.parametrize(("kind", "site"), SITES)
def test_each_tf_side_table_holds_exactly_the_registrys_names(kind, site):
    assert sorted(registry.load(site)) == sorted(TABLES[kind].rows), site


def test_an_unknown_name_suggests_the_closest():
    from opt_train.suggest import UnknownNameError

    with pytest.raises(UnknownNameError) as caught:
        TABLES["models"].resolve("mpl")
    assert caught.value.suggestion == "mlp"


def test_param_errors_collects_every_problem_and_fills_defaults():
    models = TABLES["models"]
    filled, errors = models.param_errors("mlp", {"dropout": 1.5, "activation": "rleu"})
    assert [(error.param, error.code) for error in errors] == [("activation", "unknown_name"),
                                                                ("dropout", "out_of_range")]
    filled, errors = models.param_errors("transformer", {"d_model": 10, "num_heads": 4})
    assert [(error.param, error.code) for error in errors] == [("num_heads", "out_of_range")]
    assert models.check("mlp", {}) == {"hidden_units": [256, 128], "activation": "relu", "dropout": 0.0}


@pytest.mark.parametrize("name", sorted(TABLES["pruners"].rows))
def test_a_pruners_defaults_are_optunas(name):
    import inspect

    signature = inspect.signature(TABLES["pruners"].load(name))
    for param, spec in TABLES["pruners"].rows[name].params.items():
        assert signature.parameters[param].default == spec.default, (name, param)


@pytest.mark.parametrize("name", sorted(TABLES["lr_controls"].rows))
def test_an_lr_controls_code_is_one_of_the_controls_rules(name):
    # LearningRateControl calls the row's code (tests/training/test_controls.py), so it is one of its methods.
    from opt_train.training.controls import LearningRateControl

    rule = TABLES["lr_controls"].load(name)
    assert rule.__qualname__.startswith("LearningRateControl.") and getattr(LearningRateControl, rule.__name__) is rule


def test_list_shows_every_registrys_rows_without_tensorflow():
    from tests.support import NO_TENSORFLOW, main_code, run_python

    done = run_python(main_code(["list"], then=NO_TENSORFLOW + "assert 'optuna' not in sys.modules\n"))
    assert done.returncode == 0, done.stderr
    topics = done.stdout.split("\n# ")
    shown = {topic.split("\n", 1)[0].lstrip("# "): topic for topic in topics}
    for kind, table in TABLES.items():
        lines = shown[kind].splitlines()
        for name, row in table.rows.items():
            assert any(line.startswith(f"{name} ") and row.summary in line for line in lines), (kind, name)



@pytest.mark.parametrize("kind", list(TABLES))
def test_opt_train_list_shows_every_row_with_its_summary(cli, kind):
    result = cli("list", kind)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name, row in TABLES[kind].rows.items():
        assert any(line.startswith(f"{name} ") and row.summary in line for line in lines), (kind, name)
