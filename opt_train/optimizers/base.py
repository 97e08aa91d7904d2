"""The optimizer base class: Keras 3 plumbing plus the TF1 `tf.train.Optimizer` API.

Subclasses write only the math, as in Keras 3: `__init__` (checks its own
hyperparameters), `build` (creates slots with `add_slots`), the update hooks
and `get_config`. `Optimizer.update_step` is the one template every subclass
runs: it casts the learning rate and the gradient to the variable's dtype,
sums repeated rows of a sparse gradient, and calls `dense_update` or
`sparse_update`, or `fused_dense_update` / `fused_sparse_update` where the
subclass says TF1's fused kernel runs for that variable. A sparse hook reads
the rows it touches with `gather_rows`, which reads those rows alone.

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
import numbers
import warnings

import keras
import tensorflow as tf

from opt_train import params
from opt_train.errors import ParamError
from opt_train.optimizers.mesh_state import is_dvariable
from opt_train.optimizers.specs import base_args, check_args
from opt_train.optimizers.table import USE_LOCKING, row_of_class

# `keras.saving` names opt-train's optimizers "opt_train>Name".
KERAS_PACKAGE = "opt_train"

def keras_serializable(cls):
    """Registers an optimizer class with `keras.saving` as "opt_train>Name".

    So a model compiled with it saves and loads with Keras (`model.save`,
    `keras.models.load_model`), pickles, and `keras.optimizers.deserialize`
    takes its serialized form. Name: the registry's display name.
    """
    name = vars(cls).get("_registry_name") or cls.__name__
    return keras.saving.register_keras_serializable(package=KERAS_PACKAGE, name=name)(cls)


def check_range(name, value, low=None, high=None, low_open=False, high_open=False):
    """For a user's optimizer subclass: a `ParamError` when `value` is outside the interval.

    opt-train's own optimizers check with their row of `opt_train.optimizers.table`.
    Example message: "`beta_1` must be in [0, 1). Received: beta_1=1.5".
    """
    if callable(value) or tf.is_tensor(value) or isinstance(value, tf.Variable):
        return  # a schedule, a callable or a tensor: its value is known only when it is read
    rule = params.number(low, high, low_open=low_open, high_open=high_open, interval=True, schedules=True)
    rule(name, value)


def may_be_positive(value):
    """False only for a hyperparameter known now to be <= 0; a callable or tensor may be > 0.

    Decides Python-level branches (TF1 skips the soft-threshold when l1 is 0): a
    hyperparameter given as a callable or tensor takes the general branch, which
    computes the same values when it turns out 0.
    """
    if callable(value) or not isinstance(value, numbers.Real):
        return True
    return value > 0


def dense(gradient):
    """The gradient as a dense tensor, whatever form it came in."""
    return tf.convert_to_tensor(gradient)


def is_sparse(gradient):
    return isinstance(gradient, tf.IndexedSlices)


def _compiling_with_xla():
    """Whether the function being traced is (inside) one XLA compiles: `tf.function(jit_compile=True)`."""
    # No public API says so; TF itself marks the graphs it traces for XLA with this context.
    from tensorflow.python.ops import control_flow_util

    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


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
    float32/float64, for instance), the optimizers run the same math as separate ops. So
    they do for a sparse update traced into an XLA cluster (`jit_compile`): XLA compiles
    TF1's dense kernels (tf2xla's training_ops.cc) and none of the `ResourceSparseApply*`.
    """
    if op_name.startswith("ResourceSparseApply") and _compiling_with_xla():
        return False
    device = tf.DeviceSpec.from_string(variable.handle.device).device_type or "CPU"
    dtype = tf.as_dtype(variable.dtype).as_datatype_enum
    return dtype in _kernel_dtypes(op_name).get(device, ())


def gather_rows(variable, indices):
    """The rows `indices` of a variable (Keras or tf.Variable), reading those rows only.

    `tf.gather(keras_variable, indices)` first converts the Keras variable to a
    tensor, a read of the whole table; the resource gather reads the rows alone,
    so a sparse update of a large embedding costs the rows it touches.
    """
    return tf.raw_ops.ResourceGather(
        resource=variable.handle, indices=indices, dtype=variable.dtype
    )


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
    # Signatures as TF1 wrote them, so positional calls move over. `gate_gradients`,
    # `aggregation_method` and `colocate_gradients_with_ops` are graph-mode settings
    # that TF1's own eager path ignores too.
    def compute_gradients(
        self,
        loss,
        var_list=None,
        gate_gradients=1,
        aggregation_method=None,
        colocate_gradients_with_ops=False,
        grad_loss=None,
        *,
        tape=None,
    ):
        """TF1 API: returns a list of (gradient, variable) pairs.

        TF2 has no graph to read the loss from, so `loss` is a zero-argument
        callable (or a tensor computed under `tape`). A gradient is None for a
        variable the loss does not depend on, as in TF1.
        """
        if var_list is not None and not callable(var_list):
            var_list = list(var_list)
            _check_optimizable(var_list)
        if callable(loss):
            if tape is not None:
                raise ParamError.said("tape", "conflict", "`tape` must be None when `loss` is callable.")
            with tf.GradientTape() as tape:
                if var_list is not None and not callable(var_list):
                    tape.watch([_tf_variable(v) for v in var_list])
                loss_value = loss()
            if callable(var_list):
                var_list = var_list()
        else:
            if tape is None:
                raise ParamError.said("tape", "missing", "`tape` is required when `loss` is a Tensor. Received: tape=None")
            loss_value = loss
        if var_list is None:
            var_list = tape.watched_variables()
        var_list = list(var_list)
        if not var_list:
            # TF1's words.
            raise ParamError.said("var_list", "missing", "No variables to optimize.")
        _check_optimizable(var_list)
        grads = tape.gradient(
            loss_value, [_tf_variable(v) for v in var_list], output_gradients=grad_loss
        )
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies the gradients; with `global_step`, also increments it by one.

        Pairs whose gradient is None are dropped with a warning, as Keras does
        (TF1 raised only when every gradient was None). Returns the optimizer's
        iteration counter.
        """
        grads_and_vars = list(grads_and_vars)
        kept = [(g, v) for g, v in grads_and_vars if g is not None]
        if not kept:
            raise ParamError.said(
                "grads_and_vars", "missing",
                f"No gradients provided for any variable. Received: {[getattr(v, 'name', v) for _, v in grads_and_vars]}",
            )
        missing = [getattr(v, "name", v) for g, v in grads_and_vars if g is None]
        if missing:
            warnings.warn(
                f"Gradients do not exist for variables {missing} when minimizing the loss: "
                "the loss does not depend on them, so they are left as they are.",
                stacklevel=2,
            )
        grads, variables = zip(*kept)
        for variable in variables:
            if isinstance(variable, tf.Tensor) and not isinstance(variable, tf.Variable):
                # TF1's _TensorProcessor.update_op: a tensor's gradient can be computed, not applied.
                raise NotImplementedError("Trying to update a Tensor ", variable)
        self.apply(list(grads), list(variables))
        if global_step is not None:
            global_step.assign_add(1)
        return self.iterations

    def minimize(
        self,
        loss,
        global_step=None,
        var_list=None,
        gate_gradients=1,
        aggregation_method=None,
        colocate_gradients_with_ops=False,
        name=None,
        grad_loss=None,
        *,
        tape=None,
    ):
        """TF1 API: `compute_gradients` then `apply_gradients`."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, grad_loss=grad_loss, tape=tape
        )
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)


class Optimizer(TF1OptimizerAPI, keras.optimizers.Optimizer):
    """Base class of every opt-train optimizer.

    Subclasses create their slots with `add_slots(var_list, "m")`, which
    records them under a name so `get_slot(var, "m")` and `get_slot_names()`
    work as in TF1, and read a slot with `self.slot(var, "m")`.

    `update_step` is a template; a subclass writes its math in the hooks:

    * `dense_update(gradient, variable, lr)` -- a dense gradient;
    * `sparse_update(gradient, variable, lr)` -- a `tf.IndexedSlices` whose
      indices are unique (unless `sum_duplicate_indices` is False); the default
      runs `dense_update` on the dense equivalent. Read rows with
      `gather_rows`, write them with `self.assign(slot, tf.IndexedSlices(...))`
      (and `assign_add` / `assign_sub`), which Keras turns into scatter ops;
    * `dense_kernel(variable)` / `sparse_kernel(variable)` -- whether TF1's
      fused kernel runs for this variable (usually `has_kernel(...)`), and then
      `fused_dense_update` / `fused_sparse_update` run it, with
      `use_locking=self.use_locking`.

    The gradient and `lr` reach every hook in the variable's dtype. A
    hyperparameter may be a number, a tensor or a zero-argument callable, as in
    TF1 and Keras: read it with `self.hyper(name, dtype)`.
    """

    # TF1 applies its sparse kernels to de-duplicated slices
    # (`Optimizer._apply_sparse_duplicate_indices`); GradientDescent scatters as it is.
    sum_duplicate_indices = True

    def __init__(self, learning_rate, name=None, use_locking=False, **kwargs):
        # The learning rate by the class's row (subclasses check their other arguments);
        # Keras' base arguments by their table (iter_size and loss_scaling are the
        # pipeline's: Keras's twins would do it twice).
        row = row_of_class(type(self))
        if row is not None:
            check_args(row.name, learning_rate=learning_rate)
        base_args(kwargs)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.use_locking = USE_LOCKING.rule("use_locking", use_locking)
        self._slots = {}

    # -- slots -----------------------------------------------------------
    def add_slots(self, var_list, slot_name, initializer="zeros"):
        """Creates one slot per variable, shaped like it, and records it by name.

        `initializer` is a Keras initializer name, or a number for a constant fill
        (TF1's `initial_accumulator_value`).
        """
        if not isinstance(initializer, (str, keras.initializers.Initializer)):
            value = initializer() if callable(initializer) else initializer
            initializer = keras.initializers.Constant(float(value))
        slots = self.add_optimizer_variables(var_list, slot_name, initializer=initializer)
        self._slots[slot_name] = slots
        return slots

    # -- hyperparameters -------------------------------------------------
    def hyper(self, name, dtype):
        """The hyperparameter `name` as a tensor of `dtype`, calling it first if callable."""
        value = getattr(self, name)
        if callable(value):
            value = value()
        return tf.cast(value, dtype)

    def initial_value(self, name):
        """The hyperparameter `name` as a Python float, for a variable's initial value."""
        value = getattr(self, name)
        return float(value() if callable(value) else value)

    # -- the update template ---------------------------------------------
    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if is_sparse(gradient):
            if self.sum_duplicate_indices:
                gradient = deduplicate(gradient)
            gradient = tf.IndexedSlices(
                tf.cast(gradient.values, dtype), gradient.indices, gradient.dense_shape
            )
            if self.sparse_kernel(variable):
                self.fused_sparse_update(gradient, variable, lr)
            else:
                self.sparse_update(gradient, variable, lr)
            return
        gradient = tf.cast(gradient, dtype)
        if self.dense_kernel(variable) and not self._separate_ops_on_mesh(variable):
            self.fused_dense_update(gradient, variable, lr)
        else:
            self.dense_update(gradient, variable, lr)

    def _separate_ops_on_mesh(self, variable):
        """A DVariable takes the separate-op path where the class has one: several of TF1's fused
        kernels have no DTensor layout propagation (`opt_train.optimizers.mesh_state`)."""
        return type(self).dense_update is not Optimizer.dense_update and is_dvariable(variable)

    def dense_update(self, gradient, variable, lr):
        """Applies a dense gradient as separate ops."""
        raise NotImplementedError(f"{type(self).__name__} must implement `dense_update`.")

    def sparse_update(self, gradient, variable, lr):
        """Applies a sparse gradient; by default as its dense equivalent."""
        self.dense_update(tf.convert_to_tensor(gradient), variable, lr)

    def dense_kernel(self, variable):
        """Whether `fused_dense_update` (TF1's fused kernel) runs for `variable`."""
        return False

    def sparse_kernel(self, variable):
        """Whether `fused_sparse_update` (TF1's fused sparse kernel) runs for `variable`."""
        return False

    def fused_dense_update(self, gradient, variable, lr):
        raise NotImplementedError(f"{type(self).__name__} has no fused dense kernel.")

    def fused_sparse_update(self, gradient, variable, lr):
        raise NotImplementedError(f"{type(self).__name__} has no fused sparse kernel.")

    def get_config(self):
        config = super().get_config()
        if self.use_locking:
            config["use_locking"] = True
        return config


def _check_optimizable(var_list):
    """TF1's _get_processor: a tensor is accepted (its gradient can be read; apply_gradients
    refuses it); anything else is refused, in TF1's words."""
    for variable in var_list:
        if not isinstance(variable, (tf.Variable, keras.Variable, tf.Tensor)):
            raise NotImplementedError("Trying to optimize unsupported type ", variable)


def _tf_variable(variable):
    """The tf.Variable behind a Keras 3 variable (tapes watch those)."""
    return getattr(variable, "value", variable) if isinstance(variable, keras.Variable) else variable
