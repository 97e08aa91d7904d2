"""Built-in datasets by name as `tf.data` pipelines, and the user's own .npz / .csv files.

Importing this package pulls in no TensorFlow: the registry names and parameter checks
are TF-free, and `build_data` / `DataBundle` load `opt_train.data.pipeline` on first use.
"""

from opt_train.data.registry import DATASET_NAMES, check_params, resolve, task_kind
from opt_train.data.task import Task
from opt_train.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__, {"build_data": "pipeline:build_data", "DataBundle": "pipeline:DataBundle"}
)

__all__ = ["DATASET_NAMES", "DataBundle", "Task", "build_data", "check_params", "resolve", "task_kind"]
