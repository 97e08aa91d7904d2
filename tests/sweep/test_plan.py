"""Sweep planning (TF-free): the sweep block and options, the queue of grid points / repeats / sampled slots,
trial names from the resolved config, trial commands."""

import itertools
import os

import pytest

from opt_train.config import ConfigError, load_config, parse_override
from opt_train.sweep.plan import SweepPlan, Trial, check_points, config_digest, plan_queue, render
from opt_train.sweep.spec import SweepOptions, build_spec, parse_grid_option, split_values
from tests.support import CONFIGS


def spec_from(block=None, **options):
    return build_spec(block, SweepOptions(**options))


def codes(error):
    return [issue.code for issue in error.value.issues]


# -- --grid parsing -------------------------------------------------------------


def test_grid_option_values_are_yaml_scalars_and_bracketed_lists():
    key, values = parse_grid_option("model_params.hidden_units=[64, 32],[128], 1e-3 ,Adam,true,null,'a,b'")
    assert key == "model_params.hidden_units"
    assert values == [[64, 32], [128], 0.001, "Adam", True, None, "a,b"]


def test_split_values_keeps_commas_inside_brackets_braces_and_quotes():
    assert split_values("[1, 2],{a: 1, b: 2},\"x,y\",3") == ["[1, 2]", "{a: 1, b: 2}", '"x,y"', "3"]


@pytest.mark.parametrize("text", ["optimizer", "=Adam", "optimizer=", "optimizer=Adam,,SGD", "a..b=1", "lr=[1,"])
def test_bad_grid_option_is_a_bad_override_issue(text):
    with pytest.raises(ConfigError) as error:
        spec_from(grids=(text,))
    assert codes(error) == ["bad_override"]
    assert error.value.issues[0].file == "--grid"


def test_grid_key_given_twice_is_a_conflict():
    with pytest.raises(ConfigError) as error:
        spec_from(grids=("optimizer=Adam", "optimizer=SGD"))
    assert codes(error) == ["conflict"]


def test_logdir_cannot_be_swept():
    with pytest.raises(ConfigError) as error:
        spec_from(grids=("logdir=a,b",))
    assert codes(error) == ["conflict"]
    assert error.value.issues[0].key == "logdir"


def test_nothing_to_sweep_is_an_error():
    with pytest.raises(ConfigError) as error:
        spec_from()
    assert codes(error) == ["missing"]


# -- the sweep: block -----------------------------------------------------------


def test_block_problems_are_reported_together_at_their_yaml_lines():
    block = {"grd": {}, "random": {"x": {"log_uniform": [0, 1]}, "y": {"uniform": [0, 1]}}, "repeats": 0, "mode": "biggest"}
    lines = {"sweep.grd": 3, "sweep.random.x": 5, "sweep.repeats": 7, "sweep.mode": 8}
    with pytest.raises(ConfigError) as error:
        build_spec(block, SweepOptions(), locate=lambda key: ("s.yaml", lines.get(key)))
    found = {issue.key: (issue.code, issue.line) for issue in error.value.issues}
    assert found["sweep.grd"] == ("unknown_key", 3)
    assert "did you mean 'grid'" in next(i.message for i in error.value.issues if i.key == "sweep.grd")
    assert found["sweep.random.x"] == ("out_of_range", 5)
    assert found["sweep.repeats"] == ("out_of_range", 7)
    assert found["sweep.mode"] == ("out_of_range", 8)
    assert found["sweep.random"][0] == "missing"  # ranges but no number of draws


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"log_uniform": [0.0, 1.0]}, "> 0"),
        ({"log_uniform": [0.1, 0.01]}, "low <= high"),
        ({"uniform": [1, "a"]}, "two finite numbers"),
        ({"int_uniform": [1.5, 4]}, "integers"),
        ({"choice": []}, "at least one"),
        ({"loguniform": [1, 2]}, "did you mean 'log_uniform'"),
        ([1, 2], "must be one of"),
    ],
)
def test_bad_random_range_names_the_problem(spec, words):
    with pytest.raises(ConfigError) as error:
        spec_from({"random": {"optimizer_params.learning_rate": spec}, "trials": 2})
    assert words in str(error.value)


def test_command_line_wins_over_the_block_and_grid_keys_merge():
    block = {"grid": {"optimizer": ["Adam"], "iter_size": [1, 2]}, "seed": 1, "repeats": 3, "metric": "eval/accuracy"}
    spec = spec_from(block, grids=("optimizer=SGD,Momentum",), seed=5, repeats=2)
    assert spec.grid == {"optimizer": ["SGD", "Momentum"], "iter_size": [1, 2]}
    assert (spec.seed, spec.repeats, spec.metric, spec.mode) == (5, 2, "eval/accuracy", "max")


def test_mode_defaults_to_min_for_losses_and_max_otherwise():
    assert spec_from(grids=("iter_size=1,2",)).mode == "min"  # eval/loss
    assert spec_from(grids=("iter_size=1,2",), metric="eval/perplexity").mode == "min"
    assert spec_from(grids=("iter_size=1,2",), metric="eval/accuracy").mode == "max"


# -- sampler, pruner, storage ------------------------------------------------------


def test_sampler_defaults_to_grid_without_ranges_and_tpe_with_them():
    assert spec_from(grids=("iter_size=1,2",)).sampler == "grid"
    block = {"random": {"optimizer_params.learning_rate": {"log_uniform": [1e-4, 1e-1]}}, "trials": 3}
    assert spec_from(block).sampler == "tpe"
    assert spec_from(block, sampler="cmaes").sampler == "cmaes"


def test_sampler_and_pruner_problems_name_the_key():
    block = {"random": {"lr": {"uniform": [0, 1]}}, "trials": 2, "sampler": "tpee", "pruner": {"median": {"n_startup": 2}}}
    with pytest.raises(ConfigError) as error:
        build_spec(block, SweepOptions(), locate=lambda key: ("s.yaml", 4))
    found = {issue.key: issue for issue in error.value.issues}
    assert found["sweep.sampler"].code == "unknown_name" and "did you mean 'tpe'" in found["sweep.sampler"].message
    assert found["sweep.pruner.median.n_startup"].code == "unknown_key"
    assert "n_startup_trials" in found["sweep.pruner.median.n_startup"].message


def test_the_grid_sampler_cannot_draw_ranges_and_repeats_need_a_grid():
    block = {"random": {"lr": {"uniform": [0, 1]}}, "trials": 2}
    with pytest.raises(ConfigError) as error:
        spec_from(block, sampler="grid")
    assert codes(error) == ["conflict"]
    with pytest.raises(ConfigError) as error:
        spec_from(block, repeats=2)
    assert codes(error) == ["conflict"]


def test_pruner_by_name_or_with_arguments():
    spec = spec_from({"grid": {"iter_size": [1, 2]}, "pruner": {"median": {"n_startup_trials": 2}}})
    assert (spec.pruner, spec.pruner_params) == ("median", {"n_startup_trials": 2})
    assert spec_from(grids=("iter_size=1,2",), pruner="asha").pruner == "asha"
    assert spec_from(grids=("iter_size=1,2",)).pruner == "none"


# -- the queue ------------------------------------------------------------------


def test_grid_expands_to_the_cartesian_product_first_key_slowest():
    spec = spec_from(grids=("optimizer=Adam,SGD", "optimizer_params.learning_rate=0.1,0.01,0.001"))
    expected = [
        (("optimizer", name), ("optimizer_params.learning_rate", lr))
        for name in ["Adam", "SGD"]
        for lr in [0.1, 0.01, 0.001]
    ]
    assert [entry.fixed for entry in plan_queue(spec)] == expected


def test_repeats_run_each_point_with_consecutive_seeds_from_the_base_seed():
    queue = plan_queue(spec_from(grids=("optimizer=Adam,SGD",), repeats=3), base_seed=10)
    assert [(dict(e.fixed)["optimizer"], dict(e.fixed)["random_seed"], e.repeat) for e in queue] == [
        ("Adam", 10, 0), ("Adam", 11, 1), ("Adam", 12, 2), ("SGD", 10, 0), ("SGD", 11, 1), ("SGD", 12, 2),
    ]


def test_repeats_around_a_swept_random_seed():
    queue = plan_queue(spec_from(grids=("random_seed=100,200",), repeats=2), base_seed=0)
    assert [dict(e.fixed)["random_seed"] for e in queue] == [100, 101, 200, 201]


def test_repeats_alone_are_a_sweep_of_seeds():
    queue = plan_queue(spec_from(repeats=3), base_seed=4)
    assert [e.fixed for e in queue] == [(("random_seed", 4),), (("random_seed", 5),), (("random_seed", 6),)]


def test_sampled_slots_are_crossed_with_the_grid_and_configs_are_checked_at_the_range_ends():
    block = {"grid": {"optimizer": ["Adam", "SGD"]},
             "random": {"optimizer_params.learning_rate": {"log_uniform": [1e-4, 1e-1]}, "batch_size_per_gpu": {"choice": [32, 64]}}}
    spec = spec_from(block, random_trials=3)
    queue = plan_queue(spec)
    assert [e.fixed for e in queue] == [(("optimizer", "Adam"),)] * 3 + [(("optimizer", "SGD"),)] * 3
    checked = [dict(point) for point in check_points(spec, queue)]
    assert {"optimizer": "Adam", "optimizer_params.learning_rate": 1e-4, "batch_size_per_gpu": 32} in checked
    assert {"optimizer": "SGD", "optimizer_params.learning_rate": 1e-1, "batch_size_per_gpu": 64} in checked
    assert len(checked) == 2 * 3  # low ends, high ends, the other choice; each per grid point


# -- names and overrides ---------------------------------------------------------


def test_a_trials_name_is_its_number_and_the_digest_of_its_resolved_config():
    default = str(CONFIGS / "default.yaml")
    one = load_config([default], ["optimizer_params.learning_rate=0.10", "logdir=a"])
    two = load_config([default], ["optimizer_params.learning_rate=1.0e-1", "logdir=b"])
    other = load_config([default], ["optimizer_params.learning_rate=0.1", "max_steps=7"])
    assert config_digest(one) == config_digest(two)  # the logdir is not part of what a trial trains
    assert config_digest(one) != config_digest(other)
    trial = Trial(number=4, point=(("optimizer", "SGD"),), digest=config_digest(one))
    assert trial.name == f"trial-004-{config_digest(one)}"
    assert Trial(number=4, point=(), folder="trial-001-abcdef12").name == "trial-001-abcdef12"


@pytest.mark.parametrize("value", ["Adam", 0.1, 1e6, 3e-5, [64, 32], {"a": 1}, True, None, "null", "x: y", "/a b/c"])
def test_rendered_overrides_read_back_through_the_config_parser(value):
    keys, parsed = parse_override(f"some.key={render(value)}")
    assert keys == ["some", "key"] and parsed == value


def test_trial_commands_run_train_with_base_and_trial_overrides_and_logdir():
    trial = Trial(number=2, point=(("optimizer", "SGD"),), digest="0123abcd")
    plan = SweepPlan(spec=None, configs=("a.yaml", "b.yaml"), base_overrides=("max_steps=5",), out="out dir")
    argv = plan.command(trial, python="py")
    assert argv[:4] == ["py", "-m", "opt_train", "train"]
    assert argv[4:] == [
        "--config", "a.yaml", "--config", "b.yaml", "--set", "max_steps=5", "--set", "optimizer=SGD",
        "--set", f"logdir={os.path.join('out dir', trial.name)}",
    ]
    assert plan.shell_command(trial).endswith(f"'logdir=out dir/{trial.name}'")


def test_with_np_every_trial_runs_through_the_np_launcher():
    trial = Trial(number=0, point=(), digest="0123abcd")
    plan = SweepPlan(spec=None, configs=("a.yaml",), base_overrides=(), out="o", np=2)
    argv = plan.command(trial, python="py")
    assert argv[:8] == ["py", "-m", "opt_train", "train", "--np", "2", "--config", "a.yaml"]
    # The backend is the config's (`distributed`), picked by `train --np`: no use_horovod forced on it.
    assert argv[8:] == ["--set", f"logdir={os.path.join('o', trial.name)}"]


def test_grid_product_matches_itertools_for_three_keys():
    spec = spec_from(grids=("a=1,2", "b=x,y,z", "c=[1],[2]"))
    assert [tuple(dict(e.fixed).values()) for e in plan_queue(spec)] == list(
        itertools.product([1, 2], ["x", "y", "z"], [[1], [2]])
    )
