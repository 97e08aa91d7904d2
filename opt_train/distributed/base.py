"""The distribution layer's own error, and its name for the process-group interface (`opt_train.process_group`)."""

from opt_train.process_group import Backend


class HorovodUnavailableError(RuntimeError):
    """`use_horovod: true` was asked for but horovod.tensorflow cannot be imported."""


__all__ = ["Backend", "HorovodUnavailableError"]
