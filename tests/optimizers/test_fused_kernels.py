"""Tests for the choice between TF1's fused ResourceApply* kernels and the same math as ops.

The dense parity tests of each optimizer run the fused kernel (it exists on this CPU for
float32); these run the separate-ops path that a device or dtype without a kernel takes,
against the same TF1 references, so both paths stay bit-compatible with TF1.
"""

import numpy as np
import pytest
import tensorflow as tf

from opt_train.optimizers import adagrad, adagrad_da, ftrl, gradient_descent, momentum
from opt_train.optimizers.base import has_kernel
from parity import assert_parity

V1 = tf.compat.v1.train


@pytest.mark.parametrize(
    "op_name, dtype, expected",
    [
        ("ResourceApplyAdam", tf.float32, True),
        ("ResourceApplyAdam", tf.bfloat16, True),
        ("ResourceApplyMomentum", tf.float16, True),
        # TF registers these two on CPU for float32/float64 only.
        ("ResourceApplyProximalGradientDescent", tf.float64, True),
        ("ResourceApplyProximalGradientDescent", tf.float16, False),
        ("ResourceApplyAdagradDA", tf.bfloat16, False),
        ("ResourceApplyAdam", tf.int32, False),
    ],
)
def test_has_kernel_reads_tfs_kernel_registry(op_name, dtype, expected):
    assert has_kernel(op_name, tf.Variable(tf.zeros([2], dtype))) is expected


def test_the_registry_agrees_with_running_the_kernels():
    # Cross-check the registry reading against running the kernel: float16 runs ...
    var = tf.Variable(tf.ones([2], tf.float16))
    tf.raw_ops.ResourceApplyGradientDescent(
        var=var.handle, alpha=tf.constant(0.5, tf.float16), delta=tf.ones([2], tf.float16)
    )
    np.testing.assert_array_equal(var.numpy(), [0.5, 0.5])
    # ... and the kernel has_kernel refuses for float16 is really missing.
    var = tf.Variable(tf.ones([2], tf.float16))
    half = tf.constant(0.5, tf.float16)
    with pytest.raises(tf.errors.InvalidArgumentError, match="No OpKernel"):
        tf.raw_ops.ResourceApplyProximalGradientDescent(
            var=var.handle, alpha=half, l1=half, l2=half, delta=tf.ones([2], tf.float16)
        )


FALLBACKS = {
    "GradientDescent": (
        gradient_descent,
        lambda lr: gradient_descent.GradientDescent(lr),
        lambda lr: V1.GradientDescentOptimizer(lr),
    ),
    "ProximalGradientDescent": (
        gradient_descent,
        lambda lr: gradient_descent.ProximalGradientDescent(lr, 0.01, 0.02),
        lambda lr: V1.ProximalGradientDescentOptimizer(lr, 0.01, 0.02),
    ),
    "Momentum": (
        momentum,
        lambda lr: momentum.Momentum(lr, 0.9),
        lambda lr: V1.MomentumOptimizer(lr, 0.9),
    ),
    "Nesterov": (
        momentum,
        lambda lr: momentum.Momentum(lr, 0.9, use_nesterov=True),
        lambda lr: V1.MomentumOptimizer(lr, 0.9, use_nesterov=True),
    ),
    "Adagrad": (
        adagrad,
        lambda lr: adagrad.Adagrad(lr, initial_accumulator_value=0.1),
        lambda lr: V1.AdagradOptimizer(lr, initial_accumulator_value=0.1),
    ),
    "ProximalAdagrad": (
        adagrad,
        lambda lr: adagrad.ProximalAdagrad(lr, 0.1, 0.01, 0.02),
        lambda lr: V1.ProximalAdagradOptimizer(lr, 0.1, 0.01, 0.02),
    ),
    "AdagradDA": (
        adagrad_da,
        lambda lr: adagrad_da.AdagradDA(lr, 0.1, 0.01, 0.0),
        lambda lr, step: V1.AdagradDAOptimizer(lr, step, 0.1, 0.01, 0.0),
    ),
    "Ftrl": (
        ftrl,
        lambda lr: ftrl.Ftrl(lr, l1_regularization_strength=0.01, beta=0.5),
        lambda lr: V1.FtrlOptimizer(lr, l1_regularization_strength=0.01, beta=0.5),
    ),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_separate_ops_match_tf1_where_no_kernel_runs(name, monkeypatch):
    module, make_ours, make_reference = FALLBACKS[name]
    monkeypatch.setattr(module, "has_kernel", lambda op_name, variable: False)
    assert_parity(make_ours, make_reference, steps=30)


def test_proximal_adagrad_takes_a_zero_learning_rate_its_kernel_refuses():
    # A warm-up starts at lr = 0; TF's CPU kernel raises on lr <= 0, the ops do not. The rate
    # arrives from a schedule (a constant 0.0 is refused, as in YAML: `learning_rate` must be > 0).
    var = tf.Variable([1.0, -2.0])
    optimizer = adagrad.ProximalAdagrad(lambda: 0.0, 0.1, 0.01, 0.02)
    optimizer.apply_gradients([(tf.constant([0.5, 0.25]), var)])
    np.testing.assert_array_equal(var.numpy(), [1.0, -2.0])
    accumulator = optimizer.get_slot(var, "accumulator")
    np.testing.assert_allclose(accumulator.numpy(), [0.1 + 0.25, 0.1 + 0.0625], rtol=1e-6)
