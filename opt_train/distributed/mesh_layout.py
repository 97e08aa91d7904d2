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
