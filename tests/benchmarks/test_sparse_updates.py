"""Smoke test of the sparse-update benchmark at `--quick` sizes: every figure is there; no timing is asserted."""

import json

import pytest

from benchmarks import sparse_updates


@pytest.mark.slow  # 17 s measured on 2 loaded cores; the other benchmark smoke runs are slow too
def test_quick_run_reports_every_optimizer_and_ratio(tmp_path, capsys):
    out = tmp_path / "sparse.json"
    results = sparse_updates.main(["--quick", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    assert set(results["optimizers"]) == {"Adam", "LazyAdam", "Adagrad", "Momentum", "RMSProp", "Ftrl"}
    for name, figures in results["optimizers"].items():
        assert set(figures) == set(sparse_updates.FIGURES)
        assert all(value > 0 for value in figures.values() if value is not None)
        assert figures["opt_train"] and figures["dense"] and figures["dense/opt_train"]
        # TF1 has no lazy Adam, and no sparse kernel for Adam.
        assert (figures["tf1"] is None) == (name == "LazyAdam")
        assert (figures["kernel"] is None) == (name in ("Adam", "LazyAdam"))
    printed = capsys.readouterr().out
    assert "opt_train/tf1" in printed and "Ftrl" in printed


def test_the_three_sparse_updates_leave_the_same_table():
    # The harness times what it claims: opt-train's sparse update, TF1's optimizer and its
    # kernel alone leave the same table after one update (the reference is TF1's optimizer).
    import numpy as np
    import tensorflow as tf

    sizes = dict(sparse_updates.QUICK)
    for name in ("Adagrad", "Momentum", "RMSProp", "Ftrl"):
        make_ours, make_tf1, spec = sparse_updates._cases()[name]
        gradient = sparse_updates._sparse_gradient(tf, sizes, seed=1)
        initial = tf.random.normal((sizes["table_rows"], sizes["width"]), seed=2)
        ours, tf1, kernel = (tf.Variable(initial) for _ in range(3))
        sparse_updates._apply_step(tf, make_ours(), ours, gradient)()
        sparse_updates._tf1_optimizer_update(tf, make_tf1(), tf1, gradient)()
        sparse_updates._kernel_update(tf, spec, kernel, gradient)()
        np.testing.assert_allclose(ours.numpy(), tf1.numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(kernel.numpy(), tf1.numpy(), rtol=1e-6, err_msg=name)


def test_the_sparse_contenders_are_timed_in_alternating_rounds():
    # A load change must fall on every contender alike: warm-up first, then round after round.
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in ("opt_train", "tf1", "kernel")}
    figures = sparse_updates._interleaved_median_ms(steps, repeats=2, warmup=1, rounds=2)
    assert set(figures) == set(steps) and all(value >= 0 for value in figures.values())
    one_round = ["opt_train"] * 2 + ["tf1"] * 2 + ["kernel"] * 2
    assert calls == ["opt_train", "tf1", "kernel"] + one_round * 2
