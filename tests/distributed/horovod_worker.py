"""One rank of the Horovod backend tests: runs the collectives and saves what each rank saw.

Launched by tests/distributed/test_horovod_backend.py as
`horovodrun -np 2 -H localhost:2 --gloo python horovod_worker.py CASE OUTDIR [PARAMS_JSON FOLDER]...`
(CASE `records_collectives_then_killed_rank`: each TFRecord layout read as
tests/data/tfrecord_rank_worker.py reads it, the collectives, then a rank dies).
The inputs of each rank come from the NumPy functions below, so the test can compute
the expected result itself; TensorFlow and Horovod are imported only in the worker.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from opt_train import quiet

DENSE_SHAPES = [(3, 4), (5,)]
EMBEDDING_SHAPE = (6, 2)  # rows, columns of the table a sparse gradient refers to
BIG_TABLE_ROWS = 9  # more rows than 2 ranks x 4 lookups


def dense_inputs(rank):
    """The dense tensors rank `rank` contributes to the all-reduce."""
    rng = np.random.default_rng(100 + rank)
    return [rng.standard_normal(shape).astype(np.float32) for shape in DENSE_SHAPES]


def sparse_input(rank):
    """(indices, values) of the IndexedSlices rank `rank` contributes; indices repeat."""
    rng = np.random.default_rng(200 + rank)
    indices = np.array([rank, 4, 4, 1 + 2 * rank], dtype=np.int64)
    values = rng.standard_normal((len(indices), EMBEDDING_SHAPE[1])).astype(np.float32)
    return indices, values


def densify(indices, values):
    """The dense gradient an IndexedSlices stands for (repeated rows add up)."""
    dense = np.zeros(EMBEDDING_SHAPE, np.float32)
    np.add.at(dense, indices, values)
    return dense


def finite_flag(rank, bad_rank):
    """Every rank is finite except `bad_rank` (None: all finite)."""
    return rank != bad_rank


def _save(outdir, this_rank, name, **arrays):
    np.savez(os.path.join(outdir, f"{name}_rank{this_rank}.npz"), **arrays)


def run_collectives(outdir, shutdown=True):
    """Every collective of HorovodBackend, each checked by the test from the saved files."""
    import keras
    import tensorflow as tf

    from opt_train.distributed import get_backend
    from opt_train.distributed.horovod import HorovodBackend

    backend = get_backend("horovod")
    rank = backend.rank
    _save(outdir, rank, "identity", size=backend.size, rank=rank, local_rank=backend.local_rank,
          is_chief=backend.is_chief)

    dense = [tf.constant(x) for x in dense_inputs(rank)]

    @tf.function
    def reduce_dense(tensors, op):
        # A None (variable without gradient) rides along untouched.
        return backend.allreduce([tensors[0], None, tensors[1]], op=op)

    for op in ("mean", "sum", "max"):
        first, missing, second = reduce_dense(dense, op)
        assert missing is None
        _save(outdir, rank, f"dense_{op}", first=first.numpy(), second=second.numpy())

    indices, values = sparse_input(rank)

    def reduce_lookup_gradient(chosen_backend, table_rows):
        # A real embedding gradient (IndexedSlices of `values` at `indices`), made and
        # reduced in one tf.function, next to a dense gradient.
        table = tf.Variable(tf.zeros((table_rows, EMBEDDING_SHAPE[1])))

        @tf.function
        def step(other_gradient):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, indices) * values)
            gradient = tape.gradient(loss, table)
            assert isinstance(gradient, tf.IndexedSlices)
            return chosen_backend.allreduce([gradient, other_gradient])

        sparse, dense_reduced = step(dense[0])
        return {"sparse": tf.convert_to_tensor(sparse).numpy()[: EMBEDDING_SHAPE[0]],
                "dense": dense_reduced.numpy(),
                "was_slices": isinstance(sparse, tf.IndexedSlices)}

    # "auto" (the default): 6 table rows <= 2 ranks x 4 looked-up rows: densified;
    # a table with more rows than all ranks look up: all-gathered.
    _save(outdir, rank, "sparse_auto_small", **reduce_lookup_gradient(backend, EMBEDDING_SHAPE[0]))
    _save(outdir, rank, "sparse_auto_big", **reduce_lookup_gradient(backend, BIG_TABLE_ROWS))
    densifying = HorovodBackend(sparse_as_dense=True, configure_devices=False)
    _save(outdir, rank, "sparse_densified", **reduce_lookup_gradient(densifying, BIG_TABLE_ROWS))
    gathering = HorovodBackend(sparse_as_dense=False, configure_devices=False)
    _save(outdir, rank, "sparse_gathered", **reduce_lookup_gradient(gathering, EMBEDDING_SHAPE[0]))

    decide = tf.function(lambda flag: backend.all_finite(flag))
    for bad_rank in (None, 1):
        flag = tf.constant(finite_flag(rank, bad_rank))
        _save(outdir, rank, f"finite_bad{bad_rank}", result=decide(flag).numpy())

    # Keras 3 variables (two named `kernel`, two `bias`) that differ per rank until
    # the broadcast; the optimizer's slots and counters too.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    optimizer = keras.optimizers.Adam()
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(300 + rank)
    for variable in model.variables:
        variable.assign(rng.standard_normal(variable.shape).astype(np.float32))
    for slot in optimizer.variables:
        slot.assign(tf.fill(slot.shape, tf.cast(rank + 1, slot.dtype)))
    step = tf.Variable(10 * (rank + 1), dtype=tf.int64)
    variables = list(model.variables) + list(optimizer.variables) + [step]
    before = [np.array(v.numpy()) for v in variables]
    backend.broadcast_variables(variables, root_rank=0)
    after = [np.array(v.numpy()) for v in variables]
    _save(outdir, rank, "broadcast", **{f"before_{i}": b for i, b in enumerate(before)},
          **{f"after_{i}": a for i, a in enumerate(after)})

    scalars = {op: backend.allreduce_scalar(rank + 1, op=op) for op in ("sum", "mean", "max")}
    scalars["float_sum"] = backend.allreduce_scalar(0.25 * (rank + 1))
    backend.barrier()
    _save(outdir, rank, "scalars", **{k: np.array(v) for k, v in scalars.items()},
          sum_is_int=isinstance(scalars["sum"], int))
    if shutdown:
        backend.shutdown()


def run_killed_rank(outdir):
    """Rank 1 dies in the middle of the run; rank 0 keeps calling collectives."""
    import tensorflow as tf

    from opt_train.distributed import get_backend

    backend = get_backend("horovod")
    step = tf.function(lambda x: backend.allreduce([x])[0])
    for i in range(1000):
        step(tf.ones((4,)))
        if i == 3 and backend.rank == 1:
            os._exit(3)
    _save(outdir, backend.rank, "survived", steps=i)


def run_collectives_then_killed_rank(outdir):
    """Both in one job (one launch, one TensorFlow import per rank): every collective saved, then rank 1 dies."""
    run_collectives(outdir, shutdown=False)
    run_killed_rank(outdir)


def run_records_collectives_then_killed_rank(outdir, *layouts):
    """The TFRecord reading of each (params file, folder) pair in `layouts` first, then as
    `run_collectives_then_killed_rank`: one launch, one TensorFlow import per rank for all."""
    from tests.data.tfrecord_rank_worker import main as read_records

    for params_path, folder in zip(layouts[::2], layouts[1::2]):
        read_records(params_path, folder)
    run_collectives_then_killed_rank(outdir)


CASES = {"collectives": run_collectives, "killed_rank": run_killed_rank,
         "collectives_then_killed_rank": run_collectives_then_killed_rank,
         "records_collectives_then_killed_rank": run_records_collectives_then_killed_rank}

if __name__ == "__main__":
    quiet.import_tensorflow()  # as a command imports it: Keras without its optional bridges
    CASES[sys.argv[1]](*sys.argv[2:])
