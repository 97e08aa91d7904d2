"""TF1's Momentum optimizer (accumulation form, optional Nesterov) as a Keras 3 optimizer."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, gather_rows, has_kernel, keras_serializable
from opt_train.optimizers.specs import check_args

DEFAULT_LEARNING_RATE = 0.01


@keras_serializable
class Momentum(Optimizer):
    """Momentum, as TF1's `tf.compat.v1.train.MomentumOptimizer`.

    TF1's accumulation form: the accumulator sums raw gradients and the
    learning rate multiplies it at apply time, so when the learning rate
    changes the whole history is rescaled (unlike Keras `SGD`, whose velocity
    stores gradients already multiplied by past learning rates).

    .. math::

        a \\leftarrow \\mu\\, a + g,\\qquad
        \\theta \\leftarrow
        \\begin{cases}
            \\theta - \\eta\\, a & \\text{default} \\\\
            \\theta - \\eta\\, g - \\eta\\, \\mu\\, a & \\text{use\\_nesterov}
        \\end{cases}

    Dense: every element's accumulator decays and is applied at each step,
    even where the gradient is zero. Sparse (`tf.IndexedSlices`): only the
    rows named (repeated rows summed first) and their accumulators change.

    Args:
        learning_rate: A float, a `LearningRateSchedule` or a callable. TF1 has
            no default. Defaults to `0.01`.
        momentum: :math:`\\mu`, >= 0. Required, as in TF1 (no default).
        use_nesterov: Nesterov momentum in TF1's form (Keras spelling
            `nesterov` accepted by `get`). Defaults to `False`.
        name: The optimizer's name. Defaults to `"Momentum"`.
        **kwargs: The Keras base arguments.
    """

    def __init__(
        self,
        learning_rate=DEFAULT_LEARNING_RATE,
        momentum=None,
        use_nesterov=False,
        name="Momentum",
        **kwargs,
    ):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        check_args("Momentum", momentum=momentum, use_nesterov=use_nesterov)
        self.momentum = momentum
        self.use_nesterov = bool(use_nesterov)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self.add_slots(var_list, "momentum")

    def dense_kernel(self, variable):
        return has_kernel("ResourceApplyMomentum", variable)

    def sparse_kernel(self, variable):
        return has_kernel("ResourceSparseApplyMomentum", variable)

    def _kernel_arguments(self, variable, lr):
        return dict(
            var=variable.handle,
            accum=self.slot(variable, "momentum").handle,
            lr=lr,
            momentum=self.hyper("momentum", variable.dtype),
            use_locking=self.use_locking,
            use_nesterov=self.use_nesterov,
        )

    def fused_dense_update(self, gradient, variable, lr):
        # TF1's own fused kernel, the one MomentumOptimizer runs: one pass over the
        # variable and its accumulator, where separate ops make several.
        tf.raw_ops.ResourceApplyMomentum(grad=gradient, **self._kernel_arguments(variable, lr))

    def fused_sparse_update(self, gradient, variable, lr):
        # TF1's sparse kernel: the named rows of the variable and accumulator only.
        tf.raw_ops.ResourceSparseApplyMomentum(
            grad=gradient.values, indices=gradient.indices, **self._kernel_arguments(variable, lr)
        )

    def dense_update(self, gradient, variable, lr):
        momentum = self.hyper("momentum", variable.dtype)
        accumulator = self.slot(variable, "momentum")
        new_accumulator = accumulator * momentum + gradient
        self.assign(accumulator, new_accumulator)
        self.assign_sub(variable, self._step(gradient, new_accumulator, lr, momentum))

    def sparse_update(self, gradient, variable, lr):
        momentum = self.hyper("momentum", variable.dtype)
        accumulator = self.slot(variable, "momentum")
        values, indices = gradient.values, gradient.indices
        new_rows = gather_rows(accumulator, indices) * momentum + values
        self.assign(accumulator, tf.IndexedSlices(new_rows, indices))
        if self.use_nesterov:
            # TF's sparse kernel folds momentum * lr into one scalar first.
            step = values * lr + new_rows * (momentum * lr)
        else:
            step = new_rows * lr
        self.assign_sub(variable, tf.IndexedSlices(step, indices))

    def _step(self, gradient, accumulator, lr, momentum):
        """What TF1's dense kernel subtracts from the variable."""
        if self.use_nesterov:
            return gradient * lr + accumulator * momentum * lr
        return accumulator * lr

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum, "use_nesterov": self.use_nesterov})
        return config
