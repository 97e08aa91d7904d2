"""Smoke test of benchmarks/distributed.py: the harness runs every contender and reports each ratio; no timing is asserted."""

import pytest

from benchmarks import distributed


def test_ratios_pair_each_round_with_its_own_baseline():
    figures = {"baseline": [100.0, 50.0, 80.0], "replicas_2": [90.0, 50.0, 40.0]}
    assert distributed.ratios(figures) == {"replicas_2": pytest.approx(0.9)}


@pytest.mark.slow
def test_quick_run_measures_the_baseline_replicas_and_workers(tmp_path):
    results = distributed.main(["--quick", "--out", str(tmp_path / "distributed.json")])
    assert set(results["figures"]) == {"baseline", "replicas_2", "workers_2"}
    assert all(len(values) == 1 and values[0] > 0 for values in results["figures"].values())
    assert set(results["ratios"]) == {"replicas_2", "workers_2"}
    # The floors time the run's own variables: the default MLP's 64*128 + 128 + 128*10 + 10 parameters.
    assert {name: floor["parameters"] for name, floor in results["floors"].items()} == {
        "replicas_2": 9610, "workers_2": 9610}
    assert all(floor["added_ms"] > 0 for floor in results["floors"].values())
    assert set(results["ceilings"]) == {"replicas_2", "workers_2"}
    assert all(0 < ceiling < 1 for ceiling in results["ceilings"].values())
    assert (tmp_path / "distributed.json").exists()
