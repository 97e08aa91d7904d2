"""Device-mesh placement without TensorFlow: mesh axes, each variable's layout, and the memory a layout leaves per device.

The config layer (`validate`) and the DTensor backend (`distributed/mesh.py`) read the same
rules from here, so a layout `validate` accepts is the layout the run builds:

- `mesh_axes(value)`: the `mesh:` mapping as an ordered `{axis: size}` (`{}` for no mesh);
- `check_layouts(value)`: the `layouts:` mapping, each key a regex, each value one entry per
  dimension (an axis name or None);
- `layout_of(path, shape, layouts, mesh)`: a variable's sharding spec, Keras 3 `LayoutMap`
  style (see below), checked against the mesh and the shape;
- `plan_memory(...)`: bytes per device of weights and optimizer state, as laid out.

How `layout_of` matches, and where it differs from Keras 3.15's `LayoutMap.__getitem__`:
opt-train takes the first key (in the YAML's order) whose regex `re.search`es the variable's
path; Keras first looks the path up as an exact key, then requires the regex to `re.fullmatch`
and refuses a path that several keys match. `'.*kernel'` means the same in both; `'kernel'`
matches every kernel here and none in Keras; overlapping keys are an error there and an order
here (put the specific one first). Unmatched variables are replicated in both.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from opt_train.errors import ParamError

# DTensor reserves these as layout entries (`dtensor.UNSHARDED`, `dtensor.MATCH`), so no axis may take them.
RESERVED_AXIS_NAMES = ("unsharded", "match")
DEFAULT_BATCH_AXIS = "batch"


def _mesh_error(message, value, code="wrong_type"):
    return ParamError.at("mesh", code, message, value)


def mesh_axes(value):
    """The `mesh:` config value as an ordered `{axis name: size}`; `{}` for None (no mesh).

    Raises `ParamError` (key `mesh`) unless it is a non-empty mapping of axis names
    (strings, not DTensor's reserved `unsharded` / `match`) to integers >= 1.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _mesh_error("mesh must be a mapping of axis name to size, e.g. {batch: 2, model: 2}", value)
    if not value:
        raise _mesh_error("mesh must name at least one axis, e.g. {batch: 2, model: 2}; leave it out for no mesh",
                          value, "out_of_range")
    axes = {}
    for name, size in value.items():
        if not isinstance(name, str) or not name or name in RESERVED_AXIS_NAMES:
            raise _mesh_error(
                f"mesh axis names must be non-empty strings other than {', '.join(RESERVED_AXIS_NAMES)} "
                f"(DTensor's reserved names); got {name!r}", value)
        if isinstance(size, bool) or not isinstance(size, int) and not (isinstance(size, float) and size.is_integer()):
            raise _mesh_error(f"mesh axis {name!r} must have an integer size >= 1; got {size!r}", value)
        if size < 1:
            raise _mesh_error(f"mesh axis {name!r} must have an integer size >= 1; got {size!r}", value, "out_of_range")
        axes[name] = int(size)
    return axes


def mesh_devices(mesh):
    """How many devices a mesh uses: the product of its axis sizes (1 for no mesh)."""
    return math.prod(mesh.values()) if mesh else 1


def batch_axis_of(mesh, mesh_batch_axis=DEFAULT_BATCH_AXIS):
    """The axis the batch is sharded on: `mesh_batch_axis` when the mesh has it, else None (batch replicated)."""
    return mesh_batch_axis if mesh and mesh_batch_axis in mesh else None


def batch_shards(mesh, mesh_batch_axis=DEFAULT_BATCH_AXIS):
    """How many shards one global batch is split into on the mesh: the batch axis's size (1 without one)."""
    axis = batch_axis_of(mesh, mesh_batch_axis)
    return mesh[axis] if axis else 1


def process_batch_shards(mesh, processes, mesh_batch_axis=DEFAULT_BATCH_AXIS, layouts=None):
    """Which shards of the batch axis each of `processes` processes holds: a list (one per process) of indices.

    A mesh over several processes numbers its devices process by process (DTensor's
    `create_distributed_mesh`: process p holds devices p*L .. p*L+L-1 of the row-major mesh,
    L = devices / processes). Each process reads only its own part of the global batch, so
    the batch axis must split across the processes, each holding whole rows of the other
    axes: process p then holds batch shards p*k .. p*k+k-1 (k = batch axis / processes),
    and every collective on another axis stays inside one process. That is also what lets
    the chief evaluate and export alone while the others have left; so a variable laid out
    on the batch axis (fully sharded), whose reads gather across processes, is refused too.

    Raises `ParamError` at `mesh` (the devices do not split evenly, no batch axis, the batch
    axis not outermost enough to split across the processes) or at `layouts`.
    """
    devices = mesh_devices(mesh)
    if processes <= 1:
        return [list(range(batch_shards(mesh, mesh_batch_axis)))]
    if devices % processes:
        raise _mesh_error(f"a mesh of {devices} devices cannot be shared evenly by {processes} processes "
                          "(each process brings the same number of devices)", dict(mesh), "conflict")
    axis = batch_axis_of(mesh, mesh_batch_axis)
    if axis is None:
        raise _mesh_error(f"a mesh across {processes} processes needs the batch axis {mesh_batch_axis!r} "
                          "(each process reads its own part of the batch); add it to the mesh", dict(mesh), "conflict")
    names = list(mesh)
    outer = math.prod(mesh[name] for name in names[: names.index(axis)])
    if outer != 1 or mesh[axis] % processes:
        raise _mesh_error(
            f"a mesh across {processes} processes must split its batch axis {axis!r} between them: put {axis!r} "
            f"first and make its size a multiple of {processes} (each process holds whole rows of the other axes)",
            dict(mesh), "conflict")
    for pattern, spec in (layouts or {}).items():
        if axis in spec:
            raise _layouts_error(
                f"layouts[{pattern!r}] lays variables out on the batch axis {axis!r}, which spans the "
                f"{processes} processes: the chief evaluates and exports alone and could not gather them; "
                "fully sharded layouts run in one process", list(spec), "conflict")
    per_process = mesh[axis] // processes
    return [list(range(p * per_process, (p + 1) * per_process)) for p in range(processes)]


def _layouts_error(message, value, code="wrong_type"):
    return ParamError.at("layouts", code, message, value)


def check_layouts(value):
    """The `layouts:` config value as an ordered `{regex: [axis name | None, ...]}`; `{}` for None.

    Raises `ParamError` (key `layouts`) for a value that is not such a mapping, a key
    that does not compile as a Python regex, or a spec naming one axis twice. Whether
    the axes exist and divide the shapes is `layout_of`'s (it needs the mesh and shapes).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _layouts_error(
            "layouts must be a mapping of variable-path regex to a list of axis names or null, "
            "e.g. {'.*kernel': [null, model]}", value)
    checked = {}
    for pattern, spec in value.items():
        if not isinstance(pattern, str) or not pattern:
            raise _layouts_error(f"layouts keys must be non-empty regex strings; got {pattern!r}", value)
        try:
            re.compile(pattern)
        except re.error as error:
            raise _layouts_error(f"layouts key {pattern!r} is not a valid regular expression ({error})",
                                 pattern) from None
        if not isinstance(spec, (list, tuple)) or not all(
                entry is None or isinstance(entry, str) and entry for entry in spec):
            raise _layouts_error(
                f"layouts[{pattern!r}] must be a list with one axis name or null per dimension; got {spec!r}", spec)
        named = [entry for entry in spec if entry is not None]
        if len(named) != len(set(named)):
            raise _layouts_error(
                f"layouts[{pattern!r}] shards two dimensions on one axis ({spec!r}); each axis may appear once",
                spec, "conflict")
        checked[pattern] = list(spec)
    return checked


def matching_key(path, layouts):
    """The first key of `layouts` whose regex `re.search`es `path`, else None."""
    for pattern in layouts:
        if re.search(pattern, path):
            return pattern
    return None


def layout_of(path, shape, layouts, mesh):
    """The sharding spec of the variable at `path` with `shape`: one axis name or None per dimension.

    The first `layouts` key whose regex `re.search`es `path` gives it; a variable no key
    matches, and every variable without a mesh, is replicated (all None). Raises
    `ParamError` (key `layouts`) when the spec's length is not the variable's rank, names
    an axis `mesh` lacks, or shards a dimension the axis size does not divide.
    """
    shape = tuple(int(size) for size in shape)
    pattern = matching_key(path, layouts) if mesh else None
    if pattern is None:
        return (None,) * len(shape)
    spec = tuple(layouts[pattern])
    if len(spec) != len(shape):
        raise _layouts_error(
            f"layouts[{pattern!r}] has {len(spec)} entries but it matches {path!r} of shape {list(shape)} "
            f"({len(shape)} dimensions); give one axis name or null per dimension", list(spec), "conflict")
    for dimension, (axis, size) in enumerate(zip(spec, shape)):
        if axis is None:
            continue
        if axis not in mesh:
            raise _layouts_error(
                f"layouts[{pattern!r}] names axis {axis!r}, which the mesh lacks (mesh axes: {', '.join(mesh)})",
                axis, "unknown_name")
        if size % mesh[axis]:
            raise _layouts_error(
                f"layouts[{pattern!r}] shards dimension {dimension} of {path!r} (size {size}, shape {list(shape)}) "
                f"on axis {axis!r} of size {mesh[axis]}, which does not divide it", list(spec), "conflict")
    return spec


def shard_shape(shape, spec, mesh):
    """The shape of one device's shard of a variable of `shape` laid out as `spec` on `mesh`."""
    return tuple(size // mesh[axis] if axis else size for size, axis in zip(shape, spec))


# ----- the memory plan -----

_ITEMSIZE = {
    "float64": 8, "int64": 8, "uint64": 8, "complex64": 8,
    "float32": 4, "int32": 4, "uint32": 4,
    "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2,
    "int8": 1, "uint8": 1, "bool": 1,
}
# What Keras' `iterations` counter takes (`dtype="int"`: int64 on TensorFlow).
_ITERATIONS_BYTES = 8
# The dtypes whose variables get float32 masters (`optimizers.mixed_precision.needs_master_weights`;
# a test holds the two equal): `mixed` keeps float32 variables and needs none.
MASTER_DTYPES = ("float16", "bfloat16")


def itemsize(dtype_name):
    """Bytes per element of a dtype named as TensorFlow / Keras name it ("float32", "bfloat16")."""
    return _ITEMSIZE[str(dtype_name).removeprefix("tf.")]


def variable_dtype(dtype):
    """The dtype a model's float variables take under the config's `dtype` (`mixed` keeps float32 variables)."""
    return dtype if dtype in MASTER_DTYPES else "float32"


def format_bytes(count):
    """`count` bytes in B, KiB, MiB or GiB ("512 B", "1.5 MiB")."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{int(count)} B"


def slot_layout(kind, shape, spec):
    """The layout of a slot of `kind` (a table `Slot.shape`) for a variable of `shape` laid out as `spec`.

    A slot shaped like its variable takes the variable's layout; Adafactor's factored rows and columns
    keep the layout of the dimensions they keep (`table.slot_dimensions`), as the DTensor backend lays
    them out (`optimizers.mesh_state`); a scalar (NovoGrad's per-variable norm) is replicated.
    """
    from opt_train.optimizers.table import slot_dimensions

    assert len(shape) == len(spec), (shape, spec)
    return slot_dimensions(kind, spec)


def _muon_uses_adam(path, shape, params):
    """Keras 3's `Muon._should_use_adamw`: all but 2-D weights, embeddings and `exclude_layers` go to AdamW."""
    if len(shape) != 2:
        return True
    if params.get("exclude_embeddings", True) and "embedding" in path.lower():
        return True
    return any(re.search(keyword, path) for keyword in params.get("exclude_layers") or ())


def slot_exists(slot, row, params, path, shape):
    """Whether `slot` of the optimizer `row` is created for the variable at `path` with `shape`."""
    if slot.when is None:
        return True
    if slot.when == "adam_variable":
        return _muon_uses_adam(path, shape, params)
    value = params.get(slot.when, row.params[slot.when].default)
    return bool(value)


@dataclass(frozen=True)
class _Named:
    path: str


@dataclass(frozen=True)
class VariablePlan:
    """One model variable's bytes per device: its weight and the optimizer state created for it."""

    path: str
    shape: tuple
    layout: tuple
    weights: int
    state: int


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device of the model's weights and the optimizer's state, as laid out on the mesh.

    Optimizer state is every slot (as the optimizer table describes it), the float32
    masters of `dtype: float16 | bfloat16`, the `iter_size` accumulators and the EMA copies,
    each sharded as its variable, plus the optimizer's scalars (`iterations`, a learning rate held
    as a variable, its own such as TF1 Adam's beta powers), replicated on every device.
    `state_known` is False for a user's optimizer class (its slots are counted as none).
    """

    weights: int
    optimizer_state: int
    variables: tuple = field(default=())
    scalars: int = 0
    devices: int = 1
    state_known: bool = True

    @property
    def total(self):
        return self.weights + self.optimizer_state

    def line(self):
        """`memory per device: weights X, optimizer state Y, total Z`."""
        if not self.state_known:
            return (f"memory per device: weights {format_bytes(self.weights)}, optimizer state unknown "
                    f"(a user optimizer class), total at least {format_bytes(self.total)}")
        return (f"memory per device: weights {format_bytes(self.weights)}, optimizer state "
                f"{format_bytes(self.optimizer_state)}, total {format_bytes(self.total)}")


def _row_of(optimizer):
    from opt_train.optimizers.table import TABLE, is_path, resolve

    if not isinstance(optimizer, str) or is_path(optimizer):
        return None
    return TABLE[resolve(optimizer)]


def plan_memory(variables, *, optimizer, optimizer_params=None, dtype="float32", iter_size=1, ema=False,
                mesh=None, layouts=None, rate_variable=True, freeze_variables_regex=None, optimizer_groups=()):
    """The `MemoryPlan` of a model's `variables` trained by `optimizer` on `mesh` with `layouts`.

    Args:
        variables: `(path, shape, dtype_name)` per model variable, or `(path, shape, dtype_name,
            trainable)`; a non-trainable one (a moving mean) gets no optimizer state.
        optimizer: a name from the optimizer table (any accepted spelling), or a user class
            path (its state is then unknown).
        optimizer_params: the config's `optimizer_params` (the conditions of the slots, `use_ema`).
        dtype: the config's `dtype`; float16 / bfloat16 variables get float32 masters, and the
            optimizer's state lives on those masters.
        iter_size: above 1, one float32 accumulator per trainable variable.
        ema: EMA copies (also when `optimizer_params.use_ema`).
        mesh: `{axis: size}` (`mesh_axes`); None or `{}` for one device.
        layouts: `{regex: spec}` (`check_layouts`).
        rate_variable: whether the optimizer holds its learning rate as a variable (a float rate
            does, a schedule does not).
        freeze_variables_regex: variables it matches get no optimizer state (`optimizers.freezing`'s rule).
        optimizer_groups: the config's `optimizer_groups`, checked (`grouping.check_groups`): a variable a
            group takes gets the state of the group's optimizer (`grouping.settings`), and each group's
            optimizer its own scalars, beside the groups' shared update counter.
    """
    from opt_train.optimizers import grouping
    from opt_train.optimizers.table import slot_dimensions

    params = dict(optimizer_params or {})
    mesh = dict(mesh or {})
    layouts = dict(layouts or {})
    ema = bool(ema or params.get("use_ema"))
    # (row, params) per optimizer: each group's, then the top-level one (which takes the rest).
    optimizers = [(_row_of(name), group_params)
                  for name, group_params in (grouping.settings(group, optimizer, params) for group in optimizer_groups)]
    optimizers.append((_row_of(optimizer), params))
    owner = [len(optimizer_groups) if index is None else index
             for index in grouping.owners([entry[0] for entry in variables], optimizer_groups)]
    masters = dtype in MASTER_DTYPES
    frozen = set()
    if freeze_variables_regex:
        from opt_train.optimizers.freezing import split_frozen

        frozen = {item.path for item in split_frozen([_Named(entry[0]) for entry in variables],
                                                     freeze_variables_regex)[1]}
    planned = []
    for entry, index in zip(variables, owner):
        row, params = optimizers[index]
        path, shape, dtype_name = entry[0], tuple(int(size) for size in entry[1]), entry[2]
        trainable = (entry[3] if len(entry) > 3 else True) and path not in frozen
        spec = layout_of(path, shape, layouts, mesh)
        local = math.prod(shard_shape(shape, spec, mesh))
        weights = local * itemsize(dtype_name)
        state = 0
        if trainable:
            # The optimizer builds on the float32 master of a low-precision variable.
            target = "float32" if masters and dtype_name in MASTER_DTYPES else dtype_name
            if target != dtype_name:
                state += local * itemsize(target)
            for slot in row.state if row is not None else ():
                if not slot_exists(slot, row, params, path, shape):
                    continue
                slot_shape = slot_dimensions(slot.shape, shape)
                slot_spec = slot_layout(slot.shape, shape, spec)
                slot_dtype = slot.dtype or ("int32" if slot_shape == () and slot.shape in ("rows", "columns")
                                            else target)
                state += math.prod(shard_shape(slot_shape, slot_spec, mesh)) * itemsize(slot_dtype)
            if ema:
                state += local * itemsize(target)
            if iter_size > 1:
                state += local * itemsize("float32")
        planned.append(VariablePlan(path, shape, spec, weights, state))
    # Each optimizer's `iterations` and own scalars; with groups also the groups' counter of updates.
    scalars = _ITERATIONS_BYTES if optimizer_groups else 0
    for row, _ in optimizers:
        own = (row.scalars if row is not None else 0) + (1 if rate_variable else 0)
        scalars += _ITERATIONS_BYTES + own * itemsize("float32")
    return MemoryPlan(
        weights=sum(item.weights for item in planned),
        optimizer_state=sum(item.state for item in planned) + scalars,
        variables=tuple(planned),
        scalars=scalars,
        devices=mesh_devices(mesh),
        state_known=all(row is not None for row, _ in optimizers),
    )
