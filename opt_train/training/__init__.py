"""The training loop: steps, evaluation, checkpoints, summaries, progress, benchmark figures.

`train` and `evaluate` import TensorFlow; importing this package does not.
"""

from opt_train.lazy import lazy_exports
from opt_train.training.errors import TrainingFailed

__getattr__, __dir__ = lazy_exports(__name__, {"train": "loop:train", "evaluate": "evaluation:evaluate"})

__all__ = ["TrainingFailed", "evaluate", "train"]
