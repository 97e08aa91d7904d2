"""The all-reduce stage: averages gradients across ranks through a distributed backend.

It sits inside `accumulate`, so it runs once per update on the accumulated
gradient, not once per micro-batch. With the single-process backend it is the
identity and costs nothing.
"""

from __future__ import annotations

from opt_train.errors import ParamError
from opt_train.optimizers.transform import GradientTransform, init_empty


def allreduce(backend, op="mean"):
    """Reduces the gradients with `backend.allreduce(grads, op=op)`; `None` entries stay `None`.

    Args:
        backend: an `opt_train.process_group.Backend`.
        op: `"mean"` (the update of one batch `size` times larger) or `"sum"`. Defaults to `"mean"`.
    """
    if op not in ("mean", "sum"):
        raise ParamError.said("op", "unknown_name", f"`op` must be one of 'mean', 'sum'. Received: op={op!r}", op)

    def update(grads, state, variables=None, **extra):
        del variables, extra
        positions = [i for i, g in enumerate(grads) if g is not None]
        reduced = backend.allreduce([grads[i] for i in positions], op=op)
        out = list(grads)
        for i, g in zip(positions, reduced):
            out[i] = g
        return out, state

    return GradientTransform(init_empty, update)
