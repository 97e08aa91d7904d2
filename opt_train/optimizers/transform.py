"""Gradient transforms: an `init`/`update` pair on TF variables, and `chain` to compose them.

A transform is two functions (optax's shape, on `tf.Variable`s):

- `init(variables) -> State`: creates the transform's variables (a NamedTuple
  of `tf.Variable`s declared right above its factory; `EmptyState()` when it
  keeps none). Called once, eagerly, before the first step.
- `update(grads, state, variables=None, **extra) -> (grads, state)`: runs
  inside the train step's `tf.function`, changes state only through
  `assign*`, and returns the transformed gradients with the same state.

`grads` is a list aligned with `variables`; entries may be dense tensors or
`tf.IndexedSlices`. Extra inputs (e.g. `learning_rate=`) are keyword-only and
reach every child of a chain.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf

from opt_train.errors import ParamError


class EmptyState(NamedTuple):
    """The state of a transform that keeps none."""


class GradientTransform(NamedTuple):
    """A pair of functions: `init(variables) -> State`, `update(grads, state, variables=None, **extra)`."""

    init: Callable
    update: Callable


def init_empty(variables):
    """`init` of a stateless transform."""
    del variables
    return EmptyState()


def stateless(fn):
    """A transform from `fn(grads, variables, **extra) -> grads` that keeps no state."""

    def update(grads, state, variables=None, **extra):
        return fn(grads, variables, **extra), state

    return GradientTransform(init_empty, update)


def identity():
    """Passes gradients through unchanged (the degenerate stage)."""
    return GradientTransform(init_empty, lambda grads, state, variables=None, **extra: (grads, state))


def chain(*transforms):
    """Applies `transforms` in order; the state is the tuple of their states.

    Example:
        chain(unscale(scaler), accumulate(4, inner=chain(allreduce(backend), clip_by_global_norm(1.0))))
    """

    def init(variables):
        return tuple(t.init(variables) for t in transforms)

    def update(grads, state, variables=None, **extra):
        for transform, child_state in zip(transforms, state):
            grads, _ = transform.update(grads, child_state, variables, **extra)
        return grads, state

    return GradientTransform(init, update)


def named_chain(*named_transforms):
    """`chain` whose state is a dict keyed by each stage's name.

    `named_transforms` are `(name, transform)` pairs; names let the caller read
    one stage's statistics (`state["finite"].skipped_steps`) without indexing.
    """
    names = [name for name, _ in named_transforms]
    if len(set(names)) != len(names):
        raise ParamError.said("names", "conflict", f"Stage names must be unique. Received: names={names}", names)

    def init(variables):
        return {name: t.init(variables) for name, t in named_transforms}

    def update(grads, state, variables=None, **extra):
        for name, transform in named_transforms:
            grads, _ = transform.update(grads, state[name], variables, **extra)
        return grads, state

    return GradientTransform(init, update)


def state_variables(state):
    """Every `tf.Variable` in a (nested) state, in a stable order, for checkpoints and broadcast."""
    found = []
    seen = set()
    for leaf in tf.nest.flatten(state, expand_composites=False):
        if isinstance(leaf, tf.Variable) and id(leaf) not in seen:
            seen.add(id(leaf))
            found.append(leaf)
    return found


def values_of(gradient):
    """The tensor holding a gradient's numbers: `.values` of an IndexedSlices, else itself."""
    if isinstance(gradient, tf.IndexedSlices):
        return gradient.values
    return gradient


def map_values(fn, gradient):
    """Applies `fn` to a gradient's numbers, keeping IndexedSlices sparse."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(fn(gradient.values), gradient.indices, gradient.dense_shape)
    return fn(gradient)


def report(state):
    """What the stages of a (nested) pipeline state report, merged into one dict of tensors.

    A stage reports through its own state (as Optax's `MultiSteps` and
    `apply_if_finite` do): a state with a `report()` method returns
    `{name: tensor}` read after its update. Two names have a meaning the
    caller acts on: `update` (this call ended an update) and `apply` (this
    stage lets the update reach the weights); several `apply` verdicts are
    combined with AND. Any other name is a statistic (first stage wins).
    """
    found = {}
    for stage_state in _states(state):
        for name, value in stage_state.report().items():
            if name == "apply" and name in found:
                found[name] = tf.logical_and(found[name], value)
            else:
                found.setdefault(name, value)
    return found


def find(state, kind):
    """Every stage state of class `kind` in a (nested) pipeline state, in pipeline order."""
    return [s for s in _all_states(state) if isinstance(s, kind)]


def _states(state):
    return [s for s in _all_states(state) if callable(getattr(s, "report", None))]


def _all_states(state):
    """The state and every state nested in it (dicts in insertion order, tuples in field order)."""
    found = [state] if isinstance(state, tuple) else []
    children = state.values() if isinstance(state, dict) else state if isinstance(state, (tuple, list)) else ()
    for child in children:
        found.extend(_all_states(child))
    return found
