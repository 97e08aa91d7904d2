"""FLOP counting for an MLP training step, and this machine's measured matmul FLOP/s.

An MLP step with layer sizes n_0, ..., n_L at batch B costs

    6 * B * sum_i n_{i-1} * n_i

FLOPs: 2 B n_{i-1} n_i for each layer's forward matmul, the same for its weight
gradient and the same for its input gradient. (The first layer needs no input
gradient, so this overstates the work by 2 B n_0 n_1; `mlp_step_flops(exact=True)`
leaves it out.) Bias adds, activations, the loss and the optimizer update are not
counted: in a matmul-bound MLP they are the small remainder.
"""

from __future__ import annotations

import time


def mlp_step_flops(layer_sizes, batch_size, exact=False):
    """FLOPs of one forward + backward pass of a dense MLP (see the module docstring)."""
    pairs = list(zip(layer_sizes[:-1], layer_sizes[1:]))
    flops = 6 * batch_size * sum(fan_in * fan_out for fan_in, fan_out in pairs)
    if exact and pairs:
        flops -= 2 * batch_size * pairs[0][0] * pairs[0][1]
    return flops


class MatmulProbe:
    """Times a fixed list of float32 matmuls, run together in one compiled call.

    Each product is `(m, k, n, transpose_a, transpose_b)`: an (m x k) by (k x n)
    product, 2 m k n FLOPs, with operands stored transposed where the flags say
    (as the backward pass of a dense layer reads them).
    """

    def __init__(self, products, calls):
        import tensorflow as tf

        self.products = [tuple(product) for product in products]
        self.calls = calls
        operands = []
        for index, (m, k, n, transpose_a, transpose_b) in enumerate(self.products):
            left = tf.random.stateless_normal([k, m] if transpose_a else [m, k], seed=[index, 1])
            right = tf.random.stateless_normal([n, k] if transpose_b else [k, n], seed=[index, 2])
            operands.append((left, right, transpose_a, transpose_b))

        @tf.function
        def multiply():
            return [tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb) for a, b, ta, tb in operands]

        self._multiply = multiply
        self._multiply()  # traces and pays for kernel selection

    @classmethod
    def square(cls, size=2048, calls=6):
        """`size` x `size` by `size` x `size`: the machine's best case, its matmul FLOP/s."""
        return cls([(size, size, size, False, False)], calls)

    @classmethod
    def mlp_step(cls, layer_sizes, batch_size, calls=5):
        """The matmuls of one MLP training step, at their own shapes (see `mlp_step_flops(exact=True)`).

        Per layer: forward x @ W, weight gradient x^T @ dy, and the input gradient
        dy @ W^T for every layer but the first (its input needs none).
        """
        products = []
        for layer, (fan_in, fan_out) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:])):
            products.append((batch_size, fan_in, fan_out, False, False))
            products.append((fan_in, batch_size, fan_out, True, False))
            if layer > 0:
                products.append((batch_size, fan_out, fan_in, False, True))
        return cls(products, calls)

    @property
    def size(self):
        """The square probe's matrix size (the first product's m)."""
        return self.products[0][0]

    @property
    def flops_per_call(self):
        return sum(2 * m * k * n for m, k, n, _, _ in self.products)

    def measure(self):
        """Wall time of `calls` calls (CPU execution is synchronous: a call returns when done)."""
        start = time.perf_counter()
        for _ in range(self.calls):
            self._multiply()
        return time.perf_counter() - start
