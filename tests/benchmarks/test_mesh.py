"""Smoke test of benchmarks/mesh.py: the contenders it builds, the bytes per device it reports (against arithmetic on
the default MLP's shapes), and that a quick run measures every mesh; no timing is asserted."""

import argparse

import pytest

from benchmarks import mesh
from benchmarks.distributed import CONFIG

# configs/default.yaml: an MLP [128] on digits (64 features, 10 classes), Adam.
KERNELS = 64 * 128 + 128 * 10
BIASES = 128 + 10
# Adam: m and v per weight; iterations (int64), the learning rate and TF1's two beta powers (float32).
SCALARS = 8 + 3 * 4


def test_meshes_are_read_as_batch_by_model():
    assert mesh.parse_mesh("2x2") == (2, 2) and mesh.parse_mesh("4X1") == (4, 1)
    for bad in ("2", "0x2", "axb"):
        with pytest.raises(argparse.ArgumentTypeError):
            mesh.parse_mesh(bad)


def test_every_contender_trains_the_same_global_batch():
    races = mesh.contenders(64, [(2, 2), (4, 1)])
    assert races["baseline"] == ["batch_size_per_gpu=64"]
    assert "batch_size_per_gpu=32" in races["mesh_2x2"] and "layouts={'.*kernel': [null, model]}" in races["mesh_2x2"]
    assert "batch_size_per_gpu=16" in races["mesh_4x1"] and "layouts={'.*kernel': [batch, null]}" in races["mesh_4x1"]
    with pytest.raises(ValueError):
        mesh.contenders(64, [(3, 1)])


@pytest.mark.parametrize("name, kernel_share", [("baseline", 1), ("mesh_2x2", 2), ("mesh_4x1", 4)])
def test_bytes_per_device_are_the_kernels_share_and_whole_biases(name, kernel_share):
    races = mesh.contenders(64, [(2, 2), (4, 1)])
    found = mesh.memory(CONFIG, races[name])
    weights = 4 * (KERNELS // kernel_share + BIASES)
    assert found["weights"] == weights
    assert found["optimizer_state"] == 2 * weights + SCALARS
    assert found["total"] == 3 * weights + SCALARS


@pytest.mark.slow  # a fresh process that imports TensorFlow on 4 logical devices and trains both meshes
def test_quick_run_measures_the_baseline_and_every_mesh(tmp_path):
    results = mesh.main(["--quick", "--out", str(tmp_path / "mesh.json")])
    assert set(results["figures"]) == {"baseline", "mesh_2x2", "mesh_4x1"}
    assert all(len(values) == 1 and values[0] > 0 for values in results["figures"].values())
    assert set(results["ratios"]) == {"mesh_2x2", "mesh_4x1"}
    assert results["memory_per_device"]["mesh_4x1"]["total"] < results["memory_per_device"]["baseline"]["total"]
    assert (tmp_path / "mesh.json").exists()
