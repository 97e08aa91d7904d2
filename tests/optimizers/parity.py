"""Shared parity-test helper: runs one of our optimizers beside its reference on the same problem.

How the two sides are driven
----------------------------
`run_parity(make_ours, make_reference, ...)` builds a small random problem
(a dense kernel and bias; with ``sparse=True`` also an embedding table read
through `tf.gather`, so its gradient is a `tf.IndexedSlices` with a repeated
index) and applies ``steps`` updates to two copies of the same initial weights.

* The gradients are computed once per step, from the loss at the REFERENCE's
  weights, and the very same gradient tensors are handed to both sides.  Any
  difference is therefore the update rule's, not an amplification of rounding
  through the loss.
* The learning rate changes every step: ``lr_schedule(step)`` (step = updates
  applied so far, 0-based) is tabulated once in ``dtype``, and both sides read
  the same table entry for the same update:

  - ``make_ours(learning_rate)`` receives a `keras.optimizers.schedules.
    LearningRateSchedule` (Keras evaluates it at `optimizer.iterations`, i.e.
    before the update counter is incremented) and returns our optimizer;
    ours is applied through the TF1 API, ``apply_gradients(grads_and_vars)``.
  - ``make_reference(learning_rate)`` -- or ``make_reference(learning_rate,
    global_step)`` when it names a second parameter -- receives a zero-argument
    callable returning the current rate as a tensor, which also converts to
    that tensor (`ReferenceLearningRate`).  TF1 optimizers accept it in eager
    mode, whether they call a callable rate (``tf.compat.v1.train.
    MomentumOptimizer(learning_rate, momentum=0.9)``) or convert it
    (ProximalAdagrad); so does a Keras 3 optimizer.  It returns:

    - a `tf.compat.v1.train.Optimizer`: applied with
      ``apply_gradients(grads_and_vars, global_step=global_step)``;
    - a `keras.optimizers.Optimizer` (the Keras family's reference): ``apply``;
    - any other callable ``apply(grads_and_vars)``: e.g. one applying
      ``tf.raw_ops.ResourceApply*`` kernels to the `tf.Variable`s it is given,
      keeping its own slots, reading ``learning_rate()`` and ``global_step``.

  ``global_step`` is an int64 `tf.Variable` counting the updates applied so
  far; the helper increments it after every reference update (a TF1
  optimizer's ``apply_gradients`` does so itself).

The difference is measured after every step, element-wise, as
``|ours - ref| / max(|ref|, floor)`` (``floor`` keeps weights that pass near
zero from dividing by nothing), and the maximum over steps and variables is
returned.  `assert_parity` asserts it is <= 1e-6.

`assert_defaults(cls, expected)` checks constructor defaults against a dict
(use `REQUIRED` for an argument without a default); `signature_defaults(fn)`
reads them from any callable, `tf1_defaults(tf1_class)` from a TF1 optimizer
class without `use_locking`, `name`, `learning_rate` and `global_step`.
"""

from __future__ import annotations

import inspect

import keras
import numpy as np
import tensorflow as tf

REQUIRED = inspect.Parameter.empty
TOLERANCE = 1e-6
FLOOR = 1e-3
# Updates per parity run: the rate table's oscillation (period ~19 updates) turns more than
# twice and every rule's slots leave their initial values well before; a rule that parts
# from its reference does so within a few updates (as the Keras family's 30 show). 100 took
# twice the time of the fast suite's largest share.
PARITY_STEPS = 50


def default_lr_schedule(step):
    """A learning rate that changes at every step (decays and oscillates)."""
    return 0.05 * (0.99**step) * (1.0 + 0.5 * np.sin(step / 3.0))


class TabulatedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A Keras schedule reading a precomputed table at the optimizer's step."""

    def __init__(self, table):
        self.table = tf.constant(table)

    def __call__(self, step):
        last = tf.shape(self.table, out_type=tf.int64)[0] - 1
        return tf.gather(self.table, tf.minimum(tf.cast(step, tf.int64), last))

    def get_config(self):
        return {"table": self.table.numpy().tolist()}


class ReferenceLearningRate:
    """The reference's learning rate: a zero-argument callable that also converts to a tensor.

    TF1 optimizers that take a callable rate call it; those that do not
    (ProximalAdagrad, ProximalGradientDescent, ...) convert it with
    `tf.convert_to_tensor`, which reads the current entry too.
    """

    def __init__(self, table):
        self.table = table
        self.step = 0

    def __call__(self):
        return tf.constant(self.table[min(self.step, len(self.table) - 1)])


tf.register_tensor_conversion_function(
    ReferenceLearningRate, lambda value, dtype=None, name=None, as_ref=False: value()
)


class Problem:
    """A tiny regression problem with fixed random data for every step."""

    def __init__(self, *, steps, sparse, seed, dtype):
        rng = np.random.default_rng(seed)
        self.sparse = sparse
        self.dtype = dtype
        self.initial = {
            "kernel": rng.normal(0.0, 0.5, (5, 3)).astype(dtype),
            "bias": rng.normal(0.0, 0.1, (3,)).astype(dtype),
        }
        if sparse:
            self.initial["embedding"] = rng.normal(0.0, 0.5, (12, 5)).astype(dtype)
        self.inputs = rng.normal(0.0, 1.0, (steps, 6, 5)).astype(dtype)
        self.targets = rng.normal(0.0, 1.0, (steps, 6, 3)).astype(dtype)
        ids = rng.integers(0, 12, (steps, 6))
        ids[:, -1] = ids[:, 0]  # every batch looks one row up twice
        self.ids = ids.astype(np.int64)

    def loss(self, variables, step):
        """The loss at `variables` (a dict like `initial`) for the batch of `step`."""
        x = tf.constant(self.inputs[step])
        if self.sparse:
            x = x + tf.gather(variables["embedding"], tf.constant(self.ids[step]))
        hidden = tf.tanh(tf.matmul(x, variables["kernel"]) + variables["bias"])
        return tf.reduce_mean(tf.square(hidden - tf.constant(self.targets[step])))

    def gradients(self, variables, step):
        """The gradients at `variables`, in the order of `initial`."""
        names = list(self.initial)
        with tf.GradientTape() as tape:
            loss = self.loss(variables, step)
        return tape.gradient(loss, [variables[n] for n in names])


def _tf_variables(initial):
    return {name: tf.Variable(value, name=name) for name, value in initial.items()}


def _keras_variables(initial):
    return {name: keras.Variable(value, name=name) for name, value in initial.items()}


def _make_reference(make_reference, learning_rate, global_step):
    params = list(inspect.signature(make_reference).parameters)
    if len(params) >= 2:
        return make_reference(learning_rate, global_step)
    return make_reference(learning_rate)


def _reference_applier(reference, global_step):
    """A function `apply(grads, variables)` for any of the three reference kinds."""
    if isinstance(reference, tf.compat.v1.train.Optimizer):

        def apply(grads, variables):
            reference.apply_gradients(list(zip(grads, variables)), global_step=global_step)

        return apply
    if isinstance(reference, keras.optimizers.Optimizer):

        def apply(grads, variables):
            reference.apply(grads, variables)
            global_step.assign_add(1)

        return apply

    def apply(grads, variables):
        reference(list(zip(grads, variables)))
        global_step.assign_add(1)

    return apply


def relative_difference(ours, reference, floor=FLOOR):
    """max |ours - reference| / max(|reference|, floor), element-wise."""
    ours = np.asarray(ours, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if ours.shape != reference.shape:
        raise AssertionError(f"shapes differ: {ours.shape} vs {reference.shape}")
    if not np.all(np.isfinite(ours)):
        return float("inf")
    scale = np.maximum(np.abs(reference), floor)
    return float(np.max(np.abs(ours - reference) / scale)) if ours.size else 0.0


def run_parity(
    make_ours,
    make_reference,
    *,
    steps=PARITY_STEPS,
    sparse=False,
    lr_schedule=None,
    seed=0,
    dtype=np.float32,
    floor=FLOOR,
):
    """Max relative difference between our optimizer and its reference over `steps` updates."""
    lr_schedule = lr_schedule or default_lr_schedule
    table = np.array([lr_schedule(s) for s in range(steps)], dtype=dtype)
    problem = Problem(steps=steps, sparse=sparse, seed=seed, dtype=dtype)

    reference_lr = ReferenceLearningRate(table)
    global_step = tf.Variable(0, dtype=tf.int64, name="global_step")
    reference = _make_reference(make_reference, reference_lr, global_step)
    ours = make_ours(TabulatedSchedule(table))
    ref_vars = (
        _keras_variables(problem.initial)
        if isinstance(reference, keras.optimizers.Optimizer)
        else _tf_variables(problem.initial)
    )
    our_vars = _keras_variables(problem.initial)
    apply_reference = _reference_applier(reference, global_step)
    names = list(problem.initial)

    worst = 0.0
    for step in range(steps):
        reference_lr.step = step
        grads = problem.gradients(ref_vars, step)
        if sparse and not isinstance(grads[names.index("embedding")], tf.IndexedSlices):
            raise AssertionError("the embedding gradient is not sparse")
        ours.apply_gradients(list(zip(grads, [our_vars[n] for n in names])))
        apply_reference(grads, [ref_vars[n] for n in names])
        for name in names:
            diff = relative_difference(
                np.asarray(our_vars[name]), np.asarray(ref_vars[name]), floor
            )
            worst = max(worst, diff)
    return worst


def assert_parity(make_ours, make_reference, *, tolerance=TOLERANCE, **kwargs):
    """Runs `run_parity` and asserts the difference is within `tolerance` (1e-6)."""
    diff = run_parity(make_ours, make_reference, **kwargs)
    assert diff <= tolerance, f"max relative difference {diff:.3g} > {tolerance:g}"
    return diff


def signature_defaults(fn):
    """{parameter: default} of a callable's signature (`REQUIRED` when none); no *args/**kwargs/self."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    params = inspect.signature(target).parameters.values()
    return {
        p.name: p.default
        for p in params
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def tf1_defaults(tf1_class, skip=("learning_rate", "global_step")):
    """The defaults of a `tf.compat.v1.train` optimizer's own parameters (no use_locking/name)."""
    ignored = {"use_locking", "name", *skip}
    return {k: v for k, v in signature_defaults(tf1_class).items() if k not in ignored}


def assert_defaults(cls, expected):
    """Asserts each `expected` parameter exists in `cls`'s constructor with that default."""
    actual = signature_defaults(cls)
    missing = sorted(set(expected) - set(actual))
    assert not missing, f"{cls.__name__} lacks parameters {missing}"
    wrong = {
        name: (actual[name], value)
        for name, value in expected.items()
        if not _same_default(actual[name], value)
    }
    assert not wrong, f"{cls.__name__} defaults (actual, expected): {wrong}"


def _same_default(actual, expected):
    if actual is REQUIRED or expected is REQUIRED:
        return actual is expected
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        return np.isclose(actual, expected, rtol=1e-12, atol=0.0)
    return actual == expected
