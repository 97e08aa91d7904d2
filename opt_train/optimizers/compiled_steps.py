"""`CompiledSteps`: the compiled kinds of step a train op runs, each traced once around one shared trace of the update.

On a mesh each kind is checked once before its first call (`backend.check_step`).
"""

from __future__ import annotations

import tensorflow as tf


def whole_step_xla(jit_compile, backend):
    """Each kind of step one XLA cluster: XLA asked for, and no all-reduce for it to stop at."""
    return jit_compile and backend.size == 1 and backend.strategy is None


class CompiledSteps:
    """The `tf.function`s of a train op: its update `core`, each kind of `step`, and `run`'s loop.

    `update_core(batch)` is one micro-batch's counted update; `step(batch, summarize,
    statistics, shared)` a kind of step around it, which asks `core(shared)` for the
    update while it is traced.
    """

    def __init__(self, backend, jit_compile, update_core, step):
        self._backend = backend
        self.whole_step_xla = whole_step_xla(jit_compile, backend)
        self._update_core = update_core
        self._step = step
        self._compiled = {}
        self._checked = set()

    def core(self, shared):
        """`update_core` as a kind of step calls it: `shared`, one trace of the model's update for every kind.

        Each kind of step (several updates in one call, with statistics, with summaries)
        calls one function, inlined into it when its graph is built (a step costs what it
        did: `run` ~240 us an update on a tiny model either way). The model's forward and
        backward pass is traced once instead of once per kind: for ResNet-50 on CPU ~25 s of
        start-up each. A train op's first kind, unless `run` drives it, traces the update
        into itself: one used a single way (a call per batch) pays for no second function
        (~0.07 s at its first call).

        Under whole-step XLA each kind stays one XLA cluster, its core traced into it: an
        XLA-compiled core would return the gradients to every kind.
        """
        if self.whole_step_xla or not shared:
            return self._update_core
        if "core" not in self._compiled:
            self._compiled["core"] = tf.function(self._update_core, autograph=False)
        return self._compiled["core"]

    def step(self, summarize, statistics):
        """The compiled step of this kind, `function(batch) -> figures`."""
        key = (summarize, statistics)
        if key not in self._compiled:
            # The first kind compiled shares nothing (under `run`, "run" is compiled already).
            shared = bool(self._compiled)
            # Traced without AutoGraph, as Keras 3's fit traces its step: nothing in it branches
            # on a tensor in Python (`run`'s loops are tf.while_loops), and converting its
            # ~100 functions cost ~3 s of CPU in every process that trains.
            self._compiled[key] = tf.function(lambda batch: self._step(batch, summarize, statistics, shared),
                                              jit_compile=self.whole_step_xla, autograph=False)
        return self._compiled[key]

    def run(self, run_many):
        """`run_many(iterator, updates)` compiled once: several updates in one call."""
        if "run" not in self._compiled:
            self._compiled["run"] = tf.function(run_many, autograph=False)
        return self._compiled["run"]

    def call(self, key, function, *args):
        """`function(*args)`; on a mesh, first checked once per kind of step (`backend.check_step`)."""
        if self._backend.mesh is not None and key not in self._checked:
            self._backend.check_step(function, *args)
            self._checked.add(key)
        return function(*args)
