"""opt-train's optimizers: the table, the registry (`get`, `OPTIMIZER_CLS_NAMES`) and the gradient pipeline.

Every export is loaded on first use (module `__getattr__`), so importing this
package does not import TensorFlow. To export something new, add one line to
`_EXPORTS`: public name -> "module:attribute" (module relative to this package).
"""

from __future__ import annotations

from opt_train.lazy import lazy_exports

_EXPORTS = {
    "OPTIMIZER_NAMES": "table:OPTIMIZER_NAMES",
    "OPTIMIZER_CLS_NAMES": "classes:OPTIMIZER_CLS_NAMES",
    "resolve": "table:resolve",
    "check_params": "construct:check_params",
    "describe": "table:describe",
    "get": "registry:get",
    "serialize": "serialization:serialize",
    "deserialize": "serialization:deserialize",
    "Optimizer": "base:Optimizer",
    "BaseCustomOptimizer": "custom:BaseCustomOptimizer",
    "optimize_loss": "pipeline:optimize_loss",
    "get_regularization_loss": "pipeline:get_regularization_loss",
    "MixedPrecisionOptimizerWrapper": "mixed_precision:MixedPrecisionOptimizerWrapper",
    "AutomaticLossScaler": "loss_scaling:AutomaticLossScaler",
    "TrainOp": "train_op:TrainOp",
    "GradientTransform": "transform:GradientTransform",
    "chain": "transform:chain",
    "dtype_policy_name": "mixed_precision:dtype_policy_name",
    "OPTIMIZER_SUMMARIES": "names:OPTIMIZER_SUMMARIES",
    "DTYPES": "names:DTYPES",
    "LOSS_SCALERS": "names:LOSS_SCALERS",
    "LARC_PARAMS": "names:LARC_PARAMS",
    "LARC_MODES": "names:LARC_MODES",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
