"""The distribution layer's own error: Horovod asked for where it cannot be imported."""


class HorovodUnavailableError(RuntimeError):
    """`use_horovod: true` was asked for but horovod.tensorflow cannot be imported."""
