"""TF1's Momentum optimizer (accumulation form, optional Nesterov) as a Keras 3 optimizer."""

from __future__ import annotations

import tensorflow as tf

from opt_train.optimizers.base import Optimizer, deduplicate, has_kernel, is_sparse
from opt_train.optimizers.specs import check_args

DEFAULT_LEARNING_RATE = 0.01


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

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        momentum = tf.cast(self.momentum, dtype)
        accumulator = self.slot(variable, "momentum")
        if is_sparse(gradient):
            self._sparse_update(deduplicate(gradient), variable, accumulator, lr, momentum)
            return
        gradient = tf.cast(gradient, dtype)
        if has_kernel("ResourceApplyMomentum", variable):
            # TF1's own fused kernel, the one MomentumOptimizer runs: one pass over the
            # variable and its accumulator, where separate ops make several.
            tf.raw_ops.ResourceApplyMomentum(
                var=variable.handle,
                accum=accumulator.handle,
                lr=lr,
                grad=gradient,
                momentum=momentum,
                use_locking=False,
                use_nesterov=self.use_nesterov,
            )
            return
        new_accumulator = accumulator * momentum + gradient
        self.assign(accumulator, new_accumulator)
        self.assign_sub(variable, self._step(gradient, new_accumulator, lr, momentum))

    def _sparse_update(self, gradient, variable, accumulator, lr, momentum):
        indices = gradient.indices
        values = tf.cast(gradient.values, variable.dtype)
        new_rows = tf.gather(accumulator, indices) * momentum + values
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
