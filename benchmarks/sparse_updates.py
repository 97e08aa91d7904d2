"""Sparse embedding updates: opt-train's optimizers against TF1's sparse kernels and a dense update.

    python -m benchmarks.sparse_updates                 # 1,000,000 x 64 table, 1,000 rows
    python -m benchmarks.sparse_updates --quick         # tiny sizes: checks the harness only
    python -m benchmarks.sparse_updates --out r.json    # the JSON here (default: results/<date>-sparse_updates.json)

For each optimizer, updates of same-sized tables in one process, each compiled
once with `tf.function` (median ms per update). The three sparse updates are
timed in `rounds` alternating rounds of `repeats` calls each, so a change of the
machine's load falls on all three alike; the dense update, far slower, is timed
over `repeats` calls after them:

* `opt_train`: the opt-train optimizer's `apply` with a `tf.IndexedSlices`
  gradient of `rows` distinct random rows (what an embedding lookup gives);
* `tf1`: TF1's own optimizer (`tf.compat.v1.train.*Optimizer.apply_gradients`)
  on the same gradient: its de-duplication, then its `ResourceSparseApply*` kernel;
* `kernel`: that `tf.raw_ops.ResourceSparseApply*` kernel called alone;
* `dense`: the opt-train optimizer's `apply` with the same gradient as a dense
  tensor of the table's shape.

It prints the ratios `opt_train/tf1` (target <= 1.2), `opt_train/kernel` and
`dense/opt_train` (target >= 10). TF1's Adam has no sparse kernel: it decays
every row of `m` and `v` at every sparse update, and opt-train's `Adam` keeps
that meaning, so its sparse update costs about a dense one; `LazyAdam` (touched
rows only; no TF1 counterpart) is measured beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks import results_path

FULL = {"table_rows": 1_000_000, "width": 64, "rows": 1_000, "repeats": 10, "warmup": 2, "rounds": 10}
QUICK = {"table_rows": 2_000, "width": 8, "rows": 16, "repeats": 2, "warmup": 1, "rounds": 1}

FIGURES = ("opt_train", "tf1", "kernel", "dense", "opt_train/tf1", "opt_train/kernel", "dense/opt_train")
TARGET_TF1_RATIO = 1.2
TARGET_DENSE_RATIO = 10.0
LEARNING_RATE = 0.01


def _cases():
    """name -> (make the opt-train optimizer, make TF1's optimizer, TF1's sparse kernel spec).

    A kernel spec is (op name, slot arguments, hyperparameters, slot fill; None: RMSProp's).
    """
    import tensorflow as tf

    from opt_train.optimizers import get

    v1 = tf.compat.v1.train
    return {
        # TF1's Adam has no sparse kernel: its sparse path decays all of m and v.
        "Adam": (
            lambda: get("Adam", learning_rate=LEARNING_RATE),
            lambda: v1.AdamOptimizer(LEARNING_RATE),
            None,
        ),
        # TF1 has no lazy Adam to compare with.
        "LazyAdam": (lambda: get("LazyAdam", learning_rate=LEARNING_RATE), None, None),
        "Adagrad": (
            lambda: get("Adagrad", learning_rate=LEARNING_RATE),
            lambda: v1.AdagradOptimizer(LEARNING_RATE),
            ("ResourceSparseApplyAdagrad", ["accum"], {"update_slots": True}, 0.1),
        ),
        "Momentum": (
            lambda: get("Momentum", learning_rate=LEARNING_RATE, momentum=0.9),
            lambda: v1.MomentumOptimizer(LEARNING_RATE, 0.9),
            ("ResourceSparseApplyMomentum", ["accum"], {"momentum": 0.9}, 0.0),
        ),
        "RMSProp": (
            lambda: get("RMSProp", learning_rate=LEARNING_RATE, momentum=0.9),
            lambda: v1.RMSPropOptimizer(LEARNING_RATE, momentum=0.9),
            (
                "ResourceSparseApplyRMSProp",
                ["ms", "mom"],
                {"rho": 0.9, "momentum": 0.9, "epsilon": 1e-10},
                None,
            ),
        ),
        "Ftrl": (
            lambda: get("Ftrl", learning_rate=LEARNING_RATE),
            lambda: v1.FtrlOptimizer(LEARNING_RATE),
            (
                "ResourceSparseApplyFtrl",
                ["accum", "linear"],
                {"l1": 0.0, "l2": 0.0, "lr_power": -0.5},
                0.1,
            ),
        ),
    }


def _median_ms(step, repeats, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def _interleaved_median_ms(steps, repeats, warmup, rounds):
    """{name: median ms per call} of `steps`, timed in `rounds` alternating rounds of `repeats` calls each."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(repeats):
                start = time.perf_counter()
                step()
                times[name].append((time.perf_counter() - start) * 1000.0)
    return {name: statistics.median(values) for name, values in times.items()}


def _sparse_gradient(tf, sizes, seed):
    rng = tf.random.Generator.from_seed(seed)
    indices = tf.random.shuffle(tf.range(sizes["table_rows"], dtype=tf.int64), seed=seed)[: sizes["rows"]]
    values = rng.normal((sizes["rows"], sizes["width"]))
    return tf.IndexedSlices(values, indices, tf.constant([sizes["table_rows"], sizes["width"]], tf.int64))


def _tf1_optimizer_update(tf, optimizer, table, gradient):
    """A compiled `apply_gradients` of TF1's own optimizer (it de-duplicates, then its kernel)."""

    @tf.function
    def step():
        optimizer.apply_gradients([(gradient, table)])

    return step


def _kernel_update(tf, spec, table, gradient):
    """A compiled call of TF1's sparse kernel alone on `table` and slots of its own."""
    op_name, slot_names, hyper, fill = spec
    slots = {}
    for name in slot_names:
        initial = (1.0 if name == "ms" else 0.0) if fill is None or name == "linear" else fill
        slots[name] = tf.Variable(tf.fill(table.shape, initial))
    op = getattr(tf.raw_ops, op_name)
    constants = {
        key: value if isinstance(value, bool) else tf.constant(value, tf.float32)
        for key, value in hyper.items()
    }

    @tf.function
    def step():
        op(
            var=table.handle,
            **{name: slot.handle for name, slot in slots.items()},
            lr=tf.constant(LEARNING_RATE),
            grad=gradient.values,
            indices=gradient.indices,
            **constants,
        )

    return step


def _apply_step(tf, optimizer, table, gradient):
    """A compiled `optimizer.apply` of `gradient` to `table` (slots built first, eagerly)."""
    if not optimizer.built:
        optimizer.build([table])

    @tf.function
    def step():
        optimizer.apply([gradient], [table])

    return step


def measure(name, sizes):
    """Median ms per update of optimizer `name` (opt_train, tf1, kernel, dense) and the ratios."""
    import tensorflow as tf

    make_ours, make_tf1, kernel_spec = _cases()[name]
    shape = (sizes["table_rows"], sizes["width"])
    gradient = _sparse_gradient(tf, sizes, seed=1)
    repeats, warmup = sizes["repeats"], sizes["warmup"]
    # TF1's dense-cost Adam takes seconds an update: one round, as many calls as the others.
    rounds = sizes["rounds"] if kernel_spec is not None else 1
    figures = dict.fromkeys(FIGURES)
    # Each contender on a table of its own, all alive at once so their rounds can alternate.
    table = tf.Variable(tf.random.normal(shape, seed=2))
    optimizer = make_ours()
    steps = {"opt_train": _apply_step(tf, optimizer, table, gradient)}
    if make_tf1 is not None:
        steps["tf1"] = _tf1_optimizer_update(tf, make_tf1(), tf.Variable(tf.random.normal(shape, seed=2)), gradient)
    if kernel_spec is not None:
        steps["kernel"] = _kernel_update(tf, kernel_spec, tf.Variable(tf.random.normal(shape, seed=2)), gradient)
    figures.update(_interleaved_median_ms(steps, repeats, warmup, rounds))
    del steps
    dense_gradient = tf.convert_to_tensor(gradient)
    figures["dense"] = _median_ms(_apply_step(tf, optimizer, table, dense_gradient), repeats, warmup)
    del optimizer, dense_gradient, table
    if figures["tf1"] is not None:
        figures["opt_train/tf1"] = figures["opt_train"] / figures["tf1"]
    if figures["kernel"] is not None:
        figures["opt_train/kernel"] = figures["opt_train"] / figures["kernel"]
    figures["dense/opt_train"] = figures["dense"] / figures["opt_train"]
    return figures


def _cell(value, digits):
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the harness only")
    parser.add_argument("--only", nargs="*", help="optimizer names (default: all)")
    parser.add_argument("--out", help="write the figures as JSON here (default: benchmarks/results/<date>-sparse_updates.json)")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    names = args.only or list(_cases())
    results = {"sizes": sizes, "optimizers": {}}
    print(
        f"table {sizes['table_rows']:,} x {sizes['width']}, {sizes['rows']:,} rows per update, "
        f"median ms of {sizes['rounds']} alternating rounds x {sizes['repeats']} sparse updates "
        f"({sizes['repeats']} dense; Adam's TF1 form: one round)"
    )
    columns = ("opt_train", "tf1", "kernel", "dense", "opt_train/tf1", "opt_train/kernel", "dense/opt_train")
    print(f"{'optimizer':<10}" + "".join(f"{column:>17}" for column in columns))
    for name in names:
        figures = measure(name, sizes)
        results["optimizers"][name] = figures
        cells = [_cell(figures[c], 3 if "/" not in c else 2) for c in columns]
        print(f"{name:<10}" + "".join(f"{cell:>17}" for cell in cells))
    print(f"targets: opt_train/tf1 <= {TARGET_TF1_RATIO}, dense/opt_train >= {TARGET_DENSE_RATIO}")
    out = args.out or results_path.dated("sparse_updates", quick=args.quick)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    return results


if __name__ == "__main__":
    main()
