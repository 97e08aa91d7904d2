"""Mixed precision: the Keras dtype policy for each `dtype`, and float32 master weights for pure low precision.

`dtype` in YAML takes five values (`names.DTYPES`):

| dtype | variables | compute | what opt-train does |
|---|---|---|---|
| float32 | float32 | float32 | nothing |
| mixed | float32 | float16 | Keras policy `mixed_float16` |
| mixed_bfloat16 | float32 | bfloat16 | Keras policy `mixed_bfloat16` |
| float16 | float16 | float16 | policy `float16` + `MixedPrecisionOptimizerWrapper` |
| bfloat16 | bfloat16 | bfloat16 | policy `bfloat16` + `MixedPrecisionOptimizerWrapper` |

The training loop sets the policy (`keras.mixed_precision.set_dtype_policy(
dtype_policy_name(dtype))`) before it builds the model; `optimize_loss` wraps
the optimizer when `needs_master_weights(dtype)`.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

import keras

from opt_train.errors import ParamError
from opt_train.optimizers import names
from opt_train.optimizers.freezing import variable_path
from opt_train.optimizers.mesh_state import belongs_to

_POLICY_NAMES = {
    "float32": "float32",
    "mixed": "mixed_float16",
    "mixed_bfloat16": "mixed_bfloat16",
    "float16": "float16",
    "bfloat16": "bfloat16",
}


def dtype_policy_name(dtype):
    """The Keras dtype policy name for an opt-train `dtype` ("mixed" -> "mixed_float16")."""
    return _POLICY_NAMES[names.check_dtype(dtype)]


def needs_master_weights(dtype):
    """True for the pure low-precision dtypes, whose variables need float32 master copies."""
    return names.check_dtype(dtype) in ("float16", "bfloat16")


def is_low_precision(variable):
    return variable.dtype in (tf.float16, tf.bfloat16)


def _master(variable):
    """`variable`'s float32 master: a Keras variable at the variable's own path + `_master`.

    Keras 3's optimizers read a variable's `path`: Muon gives a path naming an embedding,
    or matching its `exclude_layers`, its AdamW rule. The master must answer as the model's
    variable would.
    """
    *scopes, leaf = variable_path(variable).replace(":", "_").split("/")
    with contextlib.ExitStack() as stack:
        stack.enter_context(belongs_to(variable))  # on a mesh: the variable's layout
        for scope in scopes:
            stack.enter_context(keras.name_scope(scope))
        return keras.Variable(tf.cast(variable, tf.float32), trainable=False, name=f"{leaf}_master")


class MixedPrecisionOptimizerWrapper(tf.Module):
    """Keeps float32 master copies of low-precision variables; the inner optimizer updates the masters.

    After each update the model variable receives the master's value cast to
    its dtype, so small updates accumulate in float32 instead of rounding
    away in float16. float32 variables in the same list are updated directly.
    Loss scaling is not this class's concern: the gradient pipeline unscales
    before the gradients arrive here (they are float32). A low-precision
    variable's regularizer is applied here, in float32 on its master (see
    `_with_penalty`).

    Exposes what the pipeline uses of a Keras optimizer: `build`, `apply`,
    `iterations`, `learning_rate`, `variables`.

    Args:
        optimizer: the inner Keras optimizer.
    """

    def __init__(self, optimizer):
        super().__init__(name="mixed_precision_optimizer_wrapper")
        self.optimizer = optimizer
        self.masters = []
        self._targets = []
        # ids of the model variables, in `_targets` order (ints: nothing for a checkpoint to track)
        self._variable_ids = ()
        self.built = False

    @property
    def iterations(self):
        return self.optimizer.iterations

    @property
    def learning_rate(self):
        return self.optimizer.learning_rate

    @property
    def variables(self):
        return list(self.optimizer.variables) + list(self.masters)

    def build(self, variables):
        """Creates a float32 master per low-precision variable, then builds the inner optimizer on the masters."""
        if self.built:
            return
        targets = []
        for variable in variables:
            if is_low_precision(variable):
                master = _master(variable)
                self.masters.append(master)
                targets.append(master)
            else:
                targets.append(variable)
        self._targets = targets
        self._variable_ids = tuple(id(variable) for variable in variables)
        self.optimizer.build(targets)
        self.built = True

    def refresh_masters(self, variables):
        """Copies `variables` (the list `build` took) into their float32 masters.

        For weights set from outside after the build (a warm start): without it the
        first update would continue from the masters' old values.
        """
        if tuple(id(variable) for variable in variables) != self._variable_ids:
            raise ParamError("variables", "conflict", "must be the variables `build` took, in the same order",
                             text="`refresh_masters` takes the variables `build` took, in the same order")
        for variable, target in zip(variables, self._targets):
            if target is not variable:
                target.assign(tf.cast(variable, tf.float32))

    @staticmethod
    def _with_penalty(grad, variable, target):
        """`grad` plus the gradient of the variable's regularizer, taken in float32 on its master.

        OpenSeq2Seq's `mp_regularizer_wrapper`: a low-precision variable's penalty
        (e.g. 1e-8 * sum(w**2)) would underflow in float16, and so would its
        gradient; on the float32 master it does not. `get_regularization_loss`
        leaves these penalties out of the loss, so each is counted once.
        """
        regularizer = getattr(variable, "regularizer", None)
        if grad is None or regularizer is None or target is variable:
            return grad
        watched = target.value  # the master is a Keras variable; the tape watches the TF variable it holds
        with tf.GradientTape() as tape:
            tape.watch(watched)
            penalty = tf.cast(regularizer(target), tf.float32)
        return tf.cast(grad, tf.float32) + tape.gradient(penalty, watched)

    def apply(self, grads, variables):
        """Applies float32 `grads` to the masters, then copies the masters into `variables`.

        `variables` may be any subset of the built ones, in any order (the pipeline
        leaves out those without a gradient): each is matched to its own master.
        """
        self.build(variables)
        targets = [self._targets[self._variable_ids.index(id(variable))] for variable in variables]
        grads = [self._with_penalty(g, variable, target) for g, variable, target in zip(grads, variables, targets)]
        self.optimizer.apply(
            [tf.cast(g, target.dtype) if g is not None else None for g, target in zip(grads, targets)],
            targets,
        )
        for variable, target in zip(variables, targets):
            if target is not variable:
                variable.assign(tf.cast(target, variable.dtype))
