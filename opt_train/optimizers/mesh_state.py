"""Optimizer and gradient-pipeline state on a DTensor mesh: each variable a DVariable laid out as the model variable it belongs to.

One mechanism for every piece of state, rather than code per optimizer: a variable
creator (`on_mesh(mesh)`) turns every `tf.Variable` created inside it into a
`DVariable`. Its layout is the layout of the model variable it belongs to
(`belongs_to(variable)`, set around the creation of a slot, a float32 master, an
accumulator, an EMA copy) when the shapes agree, and replicated otherwise: scalars
(iterations, the learning rate, the loss scale, counters, NovoGrad's per-variable norms)
are whole on every device. Adafactor's factored rows and columns, created without a
reference, are laid out after the build as the dimensions of their variable they keep.

Why every variable must be a DVariable: a plain `tf.Variable` updated inside a DTensor
step runs its update once per device of the mesh, racily, without an error
(`check_step` refuses a step that touches one).

A Keras optimizer creates a slot through `add_variable_from_reference(reference, ...)`:
`mesh_aware(optimizer, mesh)` wraps that method of the instance so that each slot
belongs to its reference, and builds inside `on_mesh` (the reference's
`tf.keras.dtensor.experimental.optimizers.SGD(..., mesh=mesh)`, for any optimizer).
"""

from __future__ import annotations

import contextlib
import threading

import tensorflow as tf
from tensorflow.experimental import dtensor

from opt_train.errors import ParamError

_owners = threading.local()


@contextlib.contextmanager
def belongs_to(variable):
    """Within: a state variable created has `variable`'s layout (when its shape is `variable`'s)."""
    stack = _owners.__dict__.setdefault("stack", [])
    stack.append(variable)
    try:
        yield
    finally:
        stack.pop()


def _owner():
    stack = getattr(_owners, "stack", None)
    return stack[-1] if stack else None


def tf_variable(variable):
    """The tf.Variable behind a Keras variable (the variable itself otherwise)."""
    inner = getattr(variable, "_value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def is_dvariable(variable):
    return isinstance(tf_variable(variable), dtensor.DVariable)


def layout_of_variable(variable):
    """The layout of a DVariable (Keras or TF), None for a plain variable."""
    inner = tf_variable(variable)
    return getattr(inner, "layout", None) if isinstance(inner, dtensor.DVariable) else None


def place(value, layout):
    """`value` (a tensor, a DTensor or a NumPy array) as a DTensor of `layout`."""
    if not dtensor.is_dtensor(value):
        value = tf.convert_to_tensor(value)
        value = dtensor.copy_to_mesh(value, dtensor.Layout.replicated(layout.mesh, value.shape.rank))
    if dtensor.fetch_layout(value) != layout:
        value = dtensor.relayout(value, layout)
    return value


def replicated(mesh, rank):
    return dtensor.Layout.replicated(mesh, rank)


def _state_layout(mesh, shape):
    owner = _owner()
    layout = layout_of_variable(owner) if owner is not None else None
    if layout is not None and layout.mesh == mesh and tuple(owner.shape) == tuple(shape):
        return layout
    return replicated(mesh, len(shape))


def _creator(mesh):
    def create(next_creator, **kwargs):
        initial = kwargs.pop("initial_value")
        dtype = kwargs.pop("dtype", None)
        # On the host, then laid out: Keras creates a slot colocated with its variable, whose
        # device is DTensor's own; an initial value made there is no ordinary tensor.
        with tf.device(_host(mesh)):
            if callable(initial):
                initial = initial()
            if not dtensor.is_dtensor(initial):
                initial = tf.convert_to_tensor(initial, dtype=dtype)
        value = place(initial, _state_layout(mesh, initial.shape))
        return dtensor.DVariable(value, trainable=kwargs.get("trainable", True), name=kwargs.get("name"),
                                 dtype=dtype)

    return create


def _host(mesh):
    """This process's first CPU: `/job:localhost/.../CPU:0` alone, `/job:worker/replica:0/task:N/...` as
    DTensor client N of a mesh across processes."""
    spec = tf.DeviceSpec.from_string(mesh.local_devices()[0])
    return spec.replace(device_type="CPU", device_index=0).to_string()


def on_mesh(mesh):
    """Within: every `tf.Variable` created is a DVariable on `mesh` (see the module docstring)."""
    return tf.variable_creator_scope(_creator(mesh))


def mesh_refusal(optimizer):
    """Why `optimizer` cannot update DVariables (one line naming it), or None: the table's word
    (`optimizers.table.mesh_refusal`: a TF1 fused kernel, its only dense update, that DTensor cannot lay out)."""
    from opt_train.optimizers.table import mesh_refusal as table_refusal
    from opt_train.optimizers.table import row_of_class

    row = row_of_class(type(optimizer))
    if row is None:  # a wrapper (the mixed-precision one): the table knows the optimizer inside
        optimizer = getattr(optimizer, "optimizer", optimizer)
        row = row_of_class(type(optimizer))
    if row is None:
        return None
    params = {row.mesh_unless: getattr(optimizer, row.mesh_unless)} if row.mesh_unless else {}
    return table_refusal(row.name, params)


def mesh_aware(optimizer, mesh):
    """Makes `optimizer` create its state as DVariables on `mesh`, each slot laid out as its variable.

    Call before `build` (the iteration counter and learning rate, created with the
    optimizer, are replaced by replicated DVariables here when they are plain). Returns
    the optimizer. Its model variables must be DVariables on `mesh` already. An
    `OptimizerGroups` (made in the mesh's scope, so its counter is a DVariable) has each
    group's optimizer made mesh-aware.
    """
    if getattr(optimizer, "_opt_train_mesh", None) is not None:
        return optimizer
    members = getattr(optimizer, "optimizers", None)
    if isinstance(members, list):  # OptimizerGroups: each group's optimizer keeps its own state
        for member in members:
            mesh_aware(member, mesh)
        if not is_dvariable(optimizer.iterations):
            raise TypeError("OptimizerGroups must be made inside the mesh's scope (its counter on the mesh)")
        optimizer._opt_train_mesh = mesh
        return optimizer
    refusal = mesh_refusal(optimizer)
    if refusal:
        from opt_train.errors import ParamError

        raise ParamError.at("optimizer", "conflict", refusal, type(optimizer).__name__)
    inner = getattr(optimizer, "optimizer", None)  # MixedPrecisionOptimizerWrapper: the Keras optimizer inside
    keras_optimizer = inner if inner is not None and hasattr(inner, "add_variable_from_reference") else optimizer
    from_reference = keras_optimizer.add_variable_from_reference

    def add_variable_from_reference(reference_variable, *args, **kwargs):
        with belongs_to(reference_variable):
            return from_reference(reference_variable, *args, **kwargs)

    keras_optimizer.add_variable_from_reference = add_variable_from_reference
    build = optimizer.build

    def build_on_mesh(variables):
        with on_mesh(mesh):
            built = build(variables)
        _lay_out_factored(keras_optimizer, mesh)
        return built

    optimizer.build = build_on_mesh
    for variable in list(getattr(keras_optimizer, "variables", ())):
        to_dvariable(variable, replicated(mesh, len(variable.shape)))
    optimizer._opt_train_mesh = mesh
    return optimizer


def _lay_out_factored(optimizer, mesh):
    """Lays out Adafactor's factored rows and columns as the dimensions of their variable they keep.

    Keras creates them with `add_variable(shape=...)`, which names no reference, so they are made
    replicated; the optimizer table says which lists hold them (`Slot` "rows" / "columns") and
    `table.slot_dimensions` which of the variable's dimensions, and so which of its layout, each keeps.
    """
    from opt_train.optimizers.table import row_of_class, slot_dimensions

    row = row_of_class(type(optimizer))
    for slot in row.state if row is not None else ():
        if slot.shape not in ("rows", "columns"):
            continue
        for variable, state in zip(optimizer._trainable_variables, getattr(optimizer, row.slots[slot.name])):
            layout = layout_of_variable(variable)
            if state is None or layout is None or len(variable.shape) < 2:
                continue  # not factored: a scalar placeholder, or no state at all
            to_dvariable(state, dtensor.Layout(list(slot_dimensions(slot.shape, layout.sharding_specs)), mesh))


def to_dvariable(variable, layout):
    """Replaces the tf.Variable behind the Keras `variable` with a DVariable of `layout` holding its value.

    A DVariable of another layout is replaced too (a model built in the mesh's scope has
    replicated ones): its value is relaid out.
    """
    inner = tf_variable(variable)
    if isinstance(inner, dtensor.DVariable) and inner.layout == layout:
        return variable
    if inner is variable:
        raise TypeError(f"`{getattr(variable, 'name', variable)}` is a plain tf.Variable, not a Keras variable: "
                        "it cannot be swapped for a DVariable")
    value = place(inner.read_value(), layout)
    variable._value = dtensor.DVariable(value, trainable=inner.trainable, name=inner.name.split(":")[0])
    return variable


def check_step(function, *args):
    """Raises ParamError (a ValueError) naming every plain variable the traced `function(*args)` reads or writes.

    A plain variable in a DTensor step is updated once per device of the mesh (a counter
    moved 4, 7, 11 after 3 steps on 4 devices): wrong numbers, no error.
    """
    concrete = function.get_concrete_function(*args)
    plain = sorted({v.name for v in concrete.variables if not isinstance(v, dtensor.DVariable)})
    if plain:
        raise ParamError.said(
            "function", "conflict",
            f"the step touches {len(plain)} plain tf.Variable(s) under a mesh, which every device would "
            f"update on its own: {', '.join(plain[:5])}{' ...' if len(plain) > 5 else ''}; create them inside "
            "the backend's scope() (or as Keras variables of the model) so that they are DVariables"
        )
