"""Gradient accumulation (`iter_size`): sums k micro-batches in float32 and emits their mean (or sum) once.

`accumulate(k, inner)` wraps the stages that must run once per *update* (the
all-reduce, the finite check, clipping / LARC): they see the mean of k
micro-batch gradients, which is exactly the gradient of one batch k times
larger when the loss is a per-example mean. Between updates the wrapper
returns zeros and `state.emit` is False, so the caller applies nothing.

With k == 1 there are no accumulators and no condition: the wrapper calls
`inner` directly, so `iter_size: 1` costs nothing.

`mode="sum"` emits the sum instead (RETURNN's `accum_grad_multiple_step`).

Under tf.distribute (replicas, `opt_train.distributed.tfdist`) the wrapper runs
in cross-replica context and receives per-replica gradients: each replica adds
its own into replica-local accumulators (`synchronization=ON_READ`, created
when `init` runs in the strategy's scope), and at the k-th call the per-replica
sums go to `inner` as per-replica values, where the all-reduce stage reduces
them, once per update.
A variable with Keras's `overwrite_with_gradient` (a float8 scale or amax
statistic, which the optimizer overwrites with its "gradient") accumulates
the elementwise maximum of its micro-batch values and zero, and is emitted
as is, exactly as Keras's own `gradient_accumulation_steps` does.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from opt_train.optimizers import names
from opt_train.optimizers.mesh_state import belongs_to
from opt_train.optimizers.transform import GradientTransform


class AccumulateState(NamedTuple):
    """`mini_step`: micro-batches summed into the current update; `emit`: the last call ended an update;
    `accumulators`: one float32 sum per variable (empty when k == 1); `inner`: the wrapped stages' state;
    `loss_finite`: every micro-batch of the current update had a finite loss (None when k == 1);
    `per_update`: k, the micro-batches an update takes (a number, not a variable)."""

    mini_step: tf.Variable
    emit: tf.Variable
    accumulators: tuple
    inner: Any
    loss_finite: Any = None
    per_update: int = 1

    def report(self):
        return {"update": self.emit.read_value()}

    def micro_batches_left(self):
        """The micro-batches until the current update ends, the next one included (a host read when k > 1)."""
        if self.per_update == 1:
            return 1
        return self.per_update - int(self.mini_step.numpy())


def _accumulator(i, variable):
    """The float32 sum of `variable`'s micro-batch gradients (on a mesh: laid out as the variable)."""
    with belongs_to(variable):
        # ON_READ: under a tf.distribute strategy each replica keeps its own sum (outside one, a plain variable).
        return tf.Variable(tf.zeros(variable.shape, tf.float32), trainable=False, name=f"accumulator_{i}",
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.SUM)


def _add_into(accumulator, gradient):
    """Adds one micro-batch gradient (dense or IndexedSlices) into its float32 accumulator."""
    if isinstance(gradient, tf.IndexedSlices):
        return accumulator.scatter_add(
            tf.IndexedSlices(tf.cast(gradient.values, tf.float32), gradient.indices, gradient.dense_shape)
        )
    return accumulator.assign_add(tf.cast(gradient, tf.float32))


def _overwritten(variable):
    return bool(getattr(variable, "overwrite_with_gradient", False))


def _on_each_replica(accumulators, fn, *args):
    """`fn(*args)` on every replica when the accumulators are replica-local (tf.distribute), else once.

    Per-replica arguments reach `fn` as this replica's own value; the result is per-replica.
    """
    if accumulators and isinstance(accumulators[0], tf.distribute.DistributedValues):
        return accumulators[0].distribute_strategy.run(fn, args=args)
    return fn(*args)


def accumulate(k, inner, mode="mean"):
    """Runs `inner` once every `k` calls on the mean of the k gradients seen since the last update.

    Args:
        k: micro-batches per update (`iter_size`), an integer >= 1.
        inner: the transform applied once per update to the averaged gradient.
        mode: `"mean"` or `"sum"` of the k gradients (`iter_size_mode`). Defaults to `"mean"`.

    Returns:
        A `GradientTransform` whose state is an `AccumulateState`.
    """
    k = names.check_iter_size(k)
    mode = names.check_iter_size_mode(mode)
    weight = 1.0 / k if mode == "mean" else 1.0

    def init(variables):
        accumulators = ()
        if k > 1:
            accumulators = tuple(_accumulator(i, v) for i, v in enumerate(variables))
        return AccumulateState(
            mini_step=tf.Variable(0, dtype=tf.int64, trainable=False, name="mini_step"),
            emit=tf.Variable(True, trainable=False, name="emit"),
            accumulators=accumulators,
            inner=inner.init(variables),
            loss_finite=tf.Variable(True, trainable=False, name="loss_finite") if k > 1 else None,
            per_update=k,
        )

    def update_every_call(grads, state, variables=None, **extra):
        return inner.update(grads, state.inner, variables, **extra)[0], state

    def update_every_kth_call(grads, state, variables=None, loss_is_finite=True, **extra):
        present = [i for i, g in enumerate(grads) if g is not None]
        # The inner stages judge the whole update: its loss is finite when every micro-batch's was.
        loss_finite = tf.logical_and(state.loss_finite.read_value(), loss_is_finite)
        state.loss_finite.assign(loss_finite)
        extra["loss_is_finite"] = loss_finite
        overwritten = [variables is not None and _overwritten(variables[i]) for i in range(len(grads))]
        accumulators = [state.accumulators[i] for i in present]

        def add(gradients):
            for i, accumulator, gradient in zip(present, accumulators, gradients):
                if overwritten[i]:
                    accumulator.assign(tf.maximum(accumulator, tf.cast(tf.convert_to_tensor(gradient), tf.float32)))
                else:
                    _add_into(accumulator, gradient)

        def read():
            return [a.read_value() if overwritten[i] else a.read_value() * weight
                    for i, a in zip(present, accumulators)]

        def reset():
            for accumulator in accumulators:
                accumulator.assign(tf.zeros(accumulator.shape, tf.float32))

        _on_each_replica(accumulators, add, [grads[i] for i in present])
        emit = tf.greater_equal(state.mini_step.assign_add(1), k)
        state.emit.assign(emit)

        def flush():
            averaged = [None] * len(grads)
            for i, value in zip(present, _on_each_replica(accumulators, read)):
                averaged[i] = value
            out, _ = inner.update(averaged, state.inner, variables, **extra)
            # Reads above are ordered before these resets by automatic control dependencies.
            _on_each_replica(accumulators, reset)
            state.mini_step.assign(0)
            state.loss_finite.assign(True)
            return [tf.convert_to_tensor(out[i]) for i in present]

        def hold():
            return [tf.zeros(state.accumulators[i].shape, tf.float32) for i in present]

        emitted = tf.cond(emit, flush, hold)
        out = [None] * len(grads)
        for i, g in zip(present, emitted):
            out[i] = g
        return out, state

    return GradientTransform(init, update_every_call if k == 1 else update_every_kth_call)
