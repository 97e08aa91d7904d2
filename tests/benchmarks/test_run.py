"""Smoke test of the benchmark harness at tiny sizes: the JSON has every field; no timing is asserted."""

import json
import os
import sys

import pytest

from benchmarks import run, timing
from benchmarks.flops import mlp_step_flops


def test_mlp_step_flops_counts_three_matmuls_per_layer():
    # Independent count: per layer, forward x@W, weight grad x^T@dy, input grad dy@W^T, 2*m*n*k each.
    batch, sizes = 8, (5, 7, 3)
    per_layer = [2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:])]
    assert mlp_step_flops(sizes, batch) == 3 * sum(per_layer)
    assert mlp_step_flops(sizes, batch, exact=True) == 3 * sum(per_layer) - per_layer[0]


def test_mlp_step_probe_runs_the_step_matmuls_at_their_shapes():
    from benchmarks.flops import MatmulProbe

    sizes, batch = (5, 7, 3), 8
    probe = MatmulProbe.mlp_step(sizes, batch, calls=1)
    assert probe.flops_per_call == mlp_step_flops(sizes, batch, exact=True)
    outputs = [tuple(product.shape) for product in probe._multiply()]
    # forward x@W1, x^T@dy1; forward h@W2, h^T@dy2, dy2@W2^T (no input gradient for layer 1)
    assert outputs == [(8, 7), (5, 7), (8, 3), (7, 3), (8, 7)]
    assert probe.measure() > 0


def test_summarize_takes_the_median_repeat():
    figures = timing.summarize([1.0, 3.0, 2.0], steps=10, samples_per_update=4)
    assert figures["ms_per_step"] == pytest.approx(200.0)
    assert figures["steps_per_sec"] == pytest.approx(5.0)
    assert figures["samples_per_sec"] == pytest.approx(20.0)
    assert figures["spread"] == pytest.approx(1.0)


def test_interleave_alternates_the_measures_in_rotating_order():
    order = []
    seconds = timing.interleave({"a": lambda: order.append("a") or 1.0, "b": lambda: order.append("b") or 2.0}, 3)
    assert order == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]  # an untimed round, then the repeats
    assert seconds == {"a": [1.0] * 3, "b": [2.0] * 3}


def _pipeline_fields(figures):
    for value in figures.values():
        assert set(value) >= {"steps_per_sec", "samples_per_sec", "ms_per_step", "ms_per_step_repeats", "spread"}
        assert value["steps_per_sec"] > 0


@pytest.mark.slow  # ~15 s on 2 cores: every section's pipelines are traced and timed, if briefly
def test_quick_run_writes_every_section(tmp_path):
    out = tmp_path / "results.json"
    run.main(["--quick", "--out", str(out), "--only", "baselines", "features", "matmul_bound"])
    results = json.loads(out.read_text())

    assert results["meta"]["quick"] is True
    assert len(results["meta"]["loadavg_start"]) == 3
    baselines = results["baselines"]
    assert set(baselines) == {"large_mlp", "default_live_input"}  # default's pre-fetched only in a full run
    assert set(baselines["large_mlp"]["pipelines"]) == {
        "opt_train", "tape_loop", "keras_fit", "opt_train_xla", "tape_loop_xla"
    }
    assert set(baselines["large_mlp"]["ratios"]) >= {
        "opt_train/tape_loop", "opt_train/keras_fit", "opt_train_xla/tape_loop"
    }
    assert set(baselines["default_live_input"]["pipelines"]) == {"opt_train", "tape_loop", "keras_fit"}  # no XLA
    for section in baselines.values():
        _pipeline_fields(section["pipelines"])
    large = baselines["large_mlp"]
    assert set(large["flops"]["fraction_of_matmul"]) == set(large["pipelines"])
    # The ceiling: fit's time per step over the time of that step's matmuls alone.
    assert large["ceiling"]["opt_train/keras_fit"] == pytest.approx(
        large["pipelines"]["keras_fit"]["ms_per_step"] / large["step_matmuls"]["ms_per_step"], rel=1e-3
    )
    ceiling_rows = [row for row in results["targets"] if "ceiling" in row]
    assert [row["figure"] for row in ceiling_rows] == ["large_mlp.opt_train/keras_fit"]
    assert ceiling_rows[0]["reachable"] == (ceiling_rows[0]["ceiling"] >= 1.5)

    features = results["features"]
    assert set(features["default"]["ratio_vs_plain"]) == set(run.QUICK_FEATURES)
    assert set(features) == {"default"}  # large_mlp's features only in a full run
    for section in features.values():
        _pipeline_fields(section["pipelines"])

    matmul = results["matmul_bound"]
    assert matmul["flops_per_step"] == mlp_step_flops(matmul["layer_sizes"], matmul["batch_size"])
    assert matmul["matmul"]["median_flops_per_sec"] > 0
    assert set(matmul["fraction_of_matmul"]) == {"opt_train", "tape_loop"}

    figures = {row["figure"] for row in results["targets"]}
    assert "matmul_mlp.fraction_of_matmul" in figures
    assert "large_mlp.opt_train_xla/tape_loop" in figures
    assert "features.default.summaries_every_step" in figures
    assert all(isinstance(row["met"], bool) for row in results["targets"])


@pytest.mark.parametrize("feature", sorted(run.setups.FEATURES))
def test_every_feature_is_a_valid_config_on_every_scenario(feature, tmp_path):
    """The quick run measures one feature; a full run's others are configs opt-train accepts."""
    for quick in (True, False):
        for scenario in run.setups.scenarios(quick).values():
            config = run.setups.load(scenario, str(tmp_path), run.setups.FEATURES[feature])
            assert config.logdir == str(tmp_path)


@pytest.mark.slow  # ~15 s on 2 cores: four fresh processes, three of them import TensorFlow
def test_quick_startup_section_runs_the_cli(tmp_path):
    results = run.run_all(quick=True, workdir=str(tmp_path), sections=("startup",))
    startup = results["startup"]
    assert startup["help"]["median_seconds"] > 0
    imports = startup["tensorflow_import"]
    assert imports["cpu_ratio"] == pytest.approx(
        imports["plain"]["median_cpu_seconds"] / imports["opt_train"]["median_cpu_seconds"], abs=1e-3)
    assert startup["first_step"].get("to_first_step_seconds"), startup["first_step"]
    assert startup["cli_benchmark"].get("time_per_step"), startup["cli_benchmark"]
    assert [row["figure"] for row in results["targets"]] == ["startup.help_seconds"]


def test_startup_times_this_pythons_script_not_a_shim_first_on_path(tmp_path, monkeypatch):
    from benchmarks import startup

    beside = os.path.join(os.path.dirname(sys.executable), "opt-train")
    if not os.access(beside, os.X_OK):
        pytest.skip("opt-train is not installed beside this Python")
    shim = tmp_path / "opt-train"
    shim.write_text("#!/bin/sh\nexec pyenv exec opt-train \"$@\"\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert startup._command() == [beside]
