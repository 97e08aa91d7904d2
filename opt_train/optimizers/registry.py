"""`get`: an optimizer instance from a name, dotted path, class, instance or serialized dict.

Names live in `table.py`, classes in `classes.py`, parameter checks and construction
in `construct.py`, serialisation in `serialization.py`; `get` picks the one that fits
what it is given.
"""

from __future__ import annotations

from opt_train.errors import ParamError
from opt_train.optimizers.classes import get_class, keras_optimizer_base
from opt_train.optimizers.construct import instantiate
from opt_train.optimizers.serialization import deserialize


def get(identifier, *, mesh=None, **params):
    """An optimizer instance from a name, dotted path, class, instance or serialized dict.

    Examples: `get("Momentum", learning_rate=0.1, momentum=0.9)`,
    `get("AdamOptimizer", beta1=0.8)`, `get("keras.optimizers.RMSprop")`,
    `get({"class_name": "SGD", "config": {...}})`.

    `mesh`: a `tf.experimental.dtensor.Mesh`, as the DTensor SGD's `mesh=` of
    `tf.keras.dtensor.experimental.optimizers`: the optimizer's state is created as
    DVariables, each slot laid out as its model variable (which must be a DVariable
    on `mesh`), counters and the learning rate replicated
    (`opt_train.optimizers.mesh_state.mesh_aware`).
    """
    optimizer = _get(identifier, **params)
    if mesh is not None:
        from opt_train.optimizers.mesh_state import mesh_aware

        optimizer = mesh_aware(optimizer, mesh)
    return optimizer


def _get(identifier, **params):
    if identifier is None:
        raise ParamError("optimizer", "missing", "is required", None,
                         text="An optimizer is required. Received: optimizer=None")
    if isinstance(identifier, dict):
        return deserialize(identifier, **params)
    if not isinstance(identifier, (str, type)) and isinstance(identifier, keras_optimizer_base()):
        if params:
            raise ParamError(
                None, "conflict", "parameters cannot be given with an optimizer instance", sorted(params),
                text=f"Parameters cannot be given with an optimizer instance. Received: {sorted(params)}",
            )
        return identifier
    return instantiate(get_class(identifier), params)
