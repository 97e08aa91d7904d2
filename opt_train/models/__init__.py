"""Built-in Keras models by name (mlp, cnn, transformer) and `{factory: "module:function"}` for your own.

Importing this package pulls in no TensorFlow: the registry names and parameter checks
are TF-free, and `build_model` loads `opt_train.models.build` (and Keras) on first use.
"""

from opt_train.lazy import lazy_exports
from opt_train.models.registry import MODEL_NAMES, check_params, check_task, resolve

__getattr__, __dir__ = lazy_exports(__name__, {"build_model": "build:build_model"})

__all__ = ["MODEL_NAMES", "build_model", "check_params", "check_task", "resolve"]
