"""`OptimizerGroups`: the final apply of one gradient pipeline, split by `optimizer_groups` among their optimizers.

Everything before the apply is the run's, once for all groups (loss scale and skip
decision, accumulation, all-reduce, the global norm of `max_grad_norm`, LARC per
variable): the train op hands this object the gradients it would hand one optimizer,
and each group's optimizer applies its own variables' share.

Keras 3.15 ships the same idea as `keras.optimizers.MultiOptimizer` (a map from a
variable's path to an optimizer; `apply` dispatches by variable). opt-train keeps its own
router because its groups differ where MultiOptimizer cannot follow: the first group
whose regex `re.search`es a path wins (MultiOptimizer `re.fullmatch`es and refuses a
path two keys match); a group's optimizer may be a `MixedPrecisionOptimizerWrapper`
(float32 masters under `dtype: float16`), which MultiOptimizer refuses as no Keras
optimizer; and a group that takes no variable is refused before the first update.
The numbers are MultiOptimizer's (tests/optimizers/test_optimizer_groups.py).
"""

from __future__ import annotations

import tensorflow as tf

import keras

from opt_train.optimizers import grouping
from opt_train.optimizers.freezing import variable_path


class MultipliedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`inner(step) * multiplier` in float32: a group's rate from the run's (policy, warm-up, lr_control)."""

    def __init__(self, inner, multiplier):
        self.inner = inner
        self.multiplier = float(multiplier)

    def __call__(self, step):
        return tf.cast(self.inner(step), tf.float32) * tf.constant(self.multiplier, tf.float32)

    def get_config(self):
        return {"inner": keras.saving.serialize_keras_object(self.inner), "multiplier": self.multiplier}


def group_rate(rate, multiplier):
    """A group's learning rate: the run's `rate` (a schedule or a number) times `multiplier`."""
    if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        return rate if multiplier == 1.0 else MultipliedSchedule(rate, multiplier)
    return float(rate) * float(multiplier)


class OptimizerGroups(tf.Module):
    """Applies each variable's gradient with its group's optimizer; the variables no group takes, with `default`.

    Exposes what the train op uses of an optimizer: `build`, `apply`, `iterations`
    (applied updates, the run's lr position), `learning_rate` (the run's rate at it,
    before any group's multiplier), `variables`.

    Args:
        groups: the checked entries (`grouping.check_entry`), in order.
        optimizers: one optimizer per group (a Keras optimizer, or a
            `MixedPrecisionOptimizerWrapper`), built by the caller with the group's rate.
        default: the top-level optimizer.
        rate: the run's learning rate, a schedule or a number.
    """

    def __init__(self, groups, optimizers, default, rate):
        super().__init__(name="optimizer_groups")
        self.groups = tuple(dict(group) for group in groups)
        # Tracked in this order by a checkpoint: each group's slots under its own index.
        self.optimizers = list(optimizers) + [default]
        self._rate = rate
        self._iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        # ids of the built variables and the optimizer index of each (ints: nothing to track)
        self._variable_ids = ()
        self._owner = ()
        self.counts = ()
        self.built = False

    @property
    def default(self):
        return self.optimizers[-1]

    @property
    def iterations(self):
        return self._iterations

    @property
    def learning_rate(self):
        """The run's rate at this update, as one optimizer without groups would report it."""
        if isinstance(self._rate, keras.optimizers.schedules.LearningRateSchedule):
            return tf.cast(self._rate(self._iterations), tf.float32)
        return tf.constant(self._rate, tf.float32)

    @property
    def use_ema(self):
        return any(getattr(optimizer, "use_ema", False) for optimizer in self.optimizers)

    @property
    def variables(self):
        return [self._iterations] + [v for optimizer in self.optimizers for v in optimizer.variables]

    def build(self, variables, frozen=()):
        """Gives each variable to its group (`grouping.assign`, which refuses a group taking none) and builds them.

        `frozen` are the variables `freeze_variables_regex` left out, named in a refusal.
        """
        if self.built:
            return
        variables = list(variables)
        taken = grouping.assign([variable_path(v) for v in variables], self.groups,
                                [variable_path(v) for v in frozen])
        owner = [len(self.groups) if index is None else index for index in taken]
        for index, optimizer in enumerate(self.optimizers):
            optimizer.build([v for v, o in zip(variables, owner) if o == index])
        self._variable_ids = tuple(id(v) for v in variables)
        self._owner = tuple(owner)
        self.counts = tuple(owner.count(index) for index in range(len(self.optimizers)))
        self.built = True

    def multipliers(self, variables):
        """Each variable's rate multiplier (its group's `lr_multiplier`; 1.0 for the top-level optimizer's)."""
        return grouping.multiplier_of(self.groups, grouping.assign([variable_path(v) for v in variables], self.groups))

    def apply(self, grads, variables):
        """Each group's optimizer applies its own variables' gradients; then the update counts once."""
        self.build(variables)
        shares = [([], []) for _ in self.optimizers]
        for grad, variable in zip(grads, variables):
            grads_of, variables_of = shares[self._owner[self._variable_ids.index(id(variable))]]
            grads_of.append(grad)
            variables_of.append(variable)
        for optimizer, (grads_of, variables_of) in zip(self.optimizers, shares):
            if variables_of:
                optimizer.apply(grads_of, variables_of)
        self._iterations.assign_add(1)

    def describe(self):
        """`[(label, variables taken, optimizer class name, lr_multiplier)]`: a group each, then the top-level one."""
        rows = []
        for index, optimizer in enumerate(self.optimizers):
            inner = getattr(optimizer, "optimizer", optimizer)  # the wrapped one under float16
            if index < len(self.groups):
                label = f"{grouping.KEY}[{index}] ({self.groups[index]['variables']!r})"
                multiplier = self.groups[index]["lr_multiplier"]
            else:
                label, multiplier = "the other variables", 1.0
            rows.append((label, self.counts[index], type(inner).__name__, multiplier))
        return rows
