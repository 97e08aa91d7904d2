"""Learning-rate policies: OpenSeq2Seq's functional forms and serializable schedule objects.

Importing this package imports no TensorFlow: the registry (`POLICY_NAMES`,
`resolve`, `check_params`, `check_warmup`) is TF-free, and the TensorFlow parts
(`get_lr_policy`, the schedule classes, the functional forms such as
`exp_decay`) load on first access.
"""

from __future__ import annotations

from opt_train.lazy import lazy_exports
from opt_train.lr_policies.registry import (
    FUNCTION_NAMES,
    POLICY_NAMES,
    check_params,
    check_warmup,
    parameter_names,
    resolve,
)

# public name -> "module:attribute", imported when the name is first used.
_LAZY = {
    "get_lr_policy": "factory:get_lr_policy",
    **{
        name: f"schedules:{name}"
        for name in (
            "PolicySchedule",
            "FixedLR",
            "ExpDecay",
            "PolyDecay",
            "InvPolyDecay",
            "PiecewiseConstant",
            "TransformerPolicy",
            "CosineDecay",
            "WarmUp",
            "SCHEDULE_CLASSES",
        )
    },
    **{name: f"functional:{name}" for name in FUNCTION_NAMES.values()},
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "FUNCTION_NAMES",
    "POLICY_NAMES",
    "check_params",
    "check_warmup",
    "parameter_names",
    "resolve",
    *_LAZY,
]
