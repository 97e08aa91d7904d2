"""The optimizer base class: Keras 3 plumbing plus the TF1 `tf.train.Optimizer` API.

Subclasses write only the math, as in Keras 3: `__init__` (checks its own
hyperparameters), `build` (creates slots with `add_slots`), `update_step`
(dense and, where the reference has one, sparse path) and `get_config`.

What the Keras base already gives every subclass: `weight_decay` with
`exclude_from_weight_decay`, `clipnorm` / `clipvalue` / `global_clipnorm`,
`use_ema` / `ema_momentum` / `ema_overwrite_frequency`,
`finalize_variable_values`, and a learning rate that is a float, a
`LearningRateSchedule` (opt-train's lr policies are ones) or a callable.

What this class adds is the TF1 API of reference 003 (`compute_gradients`,
`apply_gradients(grads_and_vars, global_step=...)`, `minimize`, `get_slot`,
`get_slot_names`) so code written against `tf.compat.v1.train.Optimizer`
moves over unchanged.
"""

from __future__ import annotations

import functools

import keras
import tensorflow as tf

from opt_train import params
from opt_train.optimizers.specs import base_args


def check_range(name, value, low=None, high=None, low_open=False, high_open=False):
    """For a user's optimizer subclass: a `ParamError` when `value` is outside the interval.

    opt-train's own optimizers check with their table in `opt_train.optimizers.specs`.
    Example message: "`beta_1` must be in [0, 1). Received: beta_1=1.5".
    """
    rule = params.number(low, high, low_open=low_open, high_open=high_open, interval=True, schedules=True)
    rule(name, value)


def dense(gradient):
    """The gradient as a dense tensor, whatever form it came in."""
    return tf.convert_to_tensor(gradient)


def is_sparse(gradient):
    return isinstance(gradient, tf.IndexedSlices)


@functools.lru_cache(maxsize=None)
def _kernel_dtypes(op_name):
    """{device type: dtype enums} of the kernels TF registered for `op_name`."""
    # TF's own kernel registry: the truth about which device/dtype pairs an op runs on,
    # where a hand-written table would drift. No public API exposes it.
    from tensorflow.python.framework import kernels

    registered = {}
    for kernel in kernels.get_registered_kernels_for_op(op_name).kernel:
        for constraint in kernel.constraint:
            if constraint.name == "T":
                types = constraint.allowed_values.list.type
                registered.setdefault(kernel.device_type, set()).update(types)
    return registered


def has_kernel(op_name, variable):
    """Whether TF has a kernel of `op_name` (a fused TF1 ResourceApply*) for `variable`.

    Where it has none (ProximalGradientDescent and AdagradDA exist only on CPU and only for
    float32/float64, for instance), the optimizers run the same math as separate ops.
    """
    device = tf.DeviceSpec.from_string(variable.handle.device).device_type or "CPU"
    dtype = tf.as_dtype(variable.dtype).as_datatype_enum
    return dtype in _kernel_dtypes(op_name).get(device, ())


def deduplicate(gradient):
    """Sums the rows of an IndexedSlices that name the same index.

    TF1's sparse kernels are applied to de-duplicated slices
    (`Optimizer._apply_sparse_duplicate_indices`): a row looked up twice gets
    one update with the summed gradient, not two updates.
    """
    unique, positions = tf.unique(gradient.indices)
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, gradient.dense_shape)


class TF1OptimizerAPI:
    """The TF1 `tf.train.Optimizer` API (reference 003) on a Keras 3 optimizer.

    Mixed into `Optimizer` below and into the wrapped Keras classes, which
    register their own slot lists in `self._slots` after `build`.
    """

    _slots: dict

    def __dir__(self):
        # tf.train.Checkpoint takes any object whose dir() lists `get_slot_names` for a
        # TF1 optimizer and saves its slots a second time, which fails ("A slot
        # variable was re-used") because Keras 3 already tracks them as children.
        # The method still works; it is only kept out of dir().
        return [name for name in super().__dir__() if name != "get_slot_names"]

    def slot(self, variable, slot_name):
        """The `slot_name` slot of `variable` (Keras or tf.Variable)."""
        return self._slots[slot_name][self._get_variable_index(variable)]

    def get_slot_names(self):
        """TF1 API: the names of the slots this optimizer creates."""
        return sorted(getattr(self, "_slots", {}))

    def get_slot(self, var, name):
        """TF1 API: the slot `name` created for `var`, or None."""
        slots = getattr(self, "_slots", {}).get(name)
        if slots is None:
            return None
        try:
            return slots[self._get_variable_index(var)]
        except KeyError:
            return None

    # -- the TF1 tf.train.Optimizer API (reference 003) ------------------
    def compute_gradients(self, loss, var_list=None, tape=None, grad_loss=None):
        """TF1 API: returns a list of (gradient, variable) pairs.

        TF2 has no graph to read the loss from, so `loss` is a zero-argument
        callable (or a tensor computed under `tape`). A gradient is None for a
        variable the loss does not depend on, as in TF1.
        """
        if callable(loss):
            if tape is not None:
                raise ValueError("`tape` must be None when `loss` is callable.")
            with tf.GradientTape() as tape:
                if var_list is not None and not callable(var_list):
                    tape.watch([_tf_variable(v) for v in var_list])
                loss_value = loss()
            if callable(var_list):
                var_list = var_list()
        else:
            if tape is None:
                raise ValueError(
                    "`tape` is required when `loss` is a Tensor. Received: tape=None"
                )
            loss_value = loss
        if var_list is None:
            var_list = tape.watched_variables()
        var_list = list(var_list)
        grads = tape.gradient(
            loss_value, [_tf_variable(v) for v in var_list], output_gradients=grad_loss
        )
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients; with `global_step`, also increments it by one.

        Pairs whose gradient is None are dropped (TF1 raised only when every
        gradient was None). Returns the optimizer's iteration counter.
        """
        grads_and_vars = list(grads_and_vars)
        kept = [(g, v) for g, v in grads_and_vars if g is not None]
        if not kept:
            raise ValueError(
                "No gradients provided for any variable. Received: "
                f"{[getattr(v, 'name', v) for _, v in grads_and_vars]}"
            )
        grads, variables = zip(*kept)
        self.apply(list(grads), list(variables))
        if global_step is not None:
            global_step.assign_add(1)
        return self.iterations

    def minimize(self, loss, var_list=None, global_step=None, tape=None, name=None):
        """TF1 API: `compute_gradients` then `apply_gradients`."""
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, tape=tape)
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)


class Optimizer(TF1OptimizerAPI, keras.optimizers.Optimizer):
    """Base class of every opt-train optimizer.

    Subclasses create their slots with `add_slots(var_list, "m")`, which
    records them under a name so `get_slot(var, "m")` and `get_slot_names()`
    work as in TF1, and read a slot in `update_step` with `self.slot(var, "m")`.
    A sparse update writes rows with `self.assign(slot, tf.IndexedSlices(...))`
    (and `assign_add` / `assign_sub`): the Keras TF backend turns those into
    scatter ops on the underlying variable.
    """

    def __init__(self, learning_rate, name=None, **kwargs):
        # Keras' base arguments, by their table (iter_size and loss_scaling are the
        # pipeline's: Keras's twins would do it twice).
        base_args(kwargs)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self._slots = {}

    # -- slots -----------------------------------------------------------
    def add_slots(self, var_list, slot_name, initializer="zeros"):
        """Creates one slot per variable, shaped like it, and records it by name.

        `initializer` is a Keras initializer name, or a number for a constant fill
        (TF1's `initial_accumulator_value`).
        """
        if not isinstance(initializer, str):
            initializer = keras.initializers.Constant(float(initializer))
        slots = self.add_optimizer_variables(var_list, slot_name, initializer=initializer)
        self._slots[slot_name] = slots
        return slots


def _tf_variable(variable):
    """The tf.Variable behind a Keras 3 variable (tapes watch those)."""
    return getattr(variable, "value", variable) if isinstance(variable, keras.Variable) else variable
