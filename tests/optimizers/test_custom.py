"""Tests for BaseCustomOptimizer, CustomGradientDescent, CustomAdam and the example SignSGD.

References: TF1's C++ kernels (`tf.compat.v1.train.GradientDescentOptimizer`,
`AdamOptimizer`), and the update rules of reference 000 re-computed in NumPy.

`numpy_reference` (also used by the other RETURNN-family tests) turns a NumPy
rule into a `parity.run_parity` reference. The rule is written as the
reference states it and computed in float32, the variables' dtype: NumPy's
float32 operations are IEEE-rounded like TensorFlow's, so what is compared is
the update rule. A float64 reference is not a fair 1e-6 yardstick for a
float32 optimizer: near a weight's zero crossing the rounding of `lr * g`
alone moves the relative difference past 1e-6 (measured 4e-6 for plain
gradient descent, which is bit-exact against TF1's kernel).
"""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf
from parity import REQUIRED, TOLERANCE, assert_defaults, assert_parity

from opt_train.optimizers import classes, registry, table
from opt_train.optimizers.amsgrad import AMSGrad
from opt_train.optimizers.custom import BaseCustomOptimizer, CustomAdam, CustomGradientDescent
from opt_train.optimizers.grad_variance_scaled import GradVarianceScaled
from opt_train.optimizers.neural_optimizer1 import NeuralOptimizer1
from opt_train.optimizers.normalized_sgd import NormalizedSGD


# -- the NumPy reference adapter -------------------------------------------
def dense_gradient(grad):
    """(dense gradient with duplicate rows summed, sorted touched rows or None)."""
    if isinstance(grad, tf.IndexedSlices):
        indices = grad.indices.numpy()
        values = grad.values.numpy()
        dense = np.zeros(tuple(grad.dense_shape.numpy()), values.dtype)
        np.add.at(dense, indices, values)
        return dense, np.unique(indices)
    return np.asarray(grad), None


def numpy_reference(rule, slot_names):
    """A `run_parity` reference applying `rule(w, g, rows, slots, lr, t) -> (w, slots)`.

    `w`, `g` and the slots are dense arrays of the variable's dtype, `lr` a
    scalar of it; `rows` are the rows a sparse gradient touches (None for a
    dense one); `t` is the 1-based update number. Hyperparameters the rule
    closes over should be of that dtype too (`np.float32(0.9)`).
    """

    def make(learning_rate, global_step):
        state = {}

        def apply(grads_and_vars):
            t = int(global_step.numpy()) + 1
            for grad, var in grads_and_vars:
                dtype = var.dtype.as_numpy_dtype
                lr = np.asarray(learning_rate()).astype(dtype)
                slots = state.setdefault(
                    var.ref(), {name: np.zeros(var.shape, dtype) for name in slot_names}
                )
                g, rows = dense_gradient(grad)
                current = {name: value.copy() for name, value in slots.items()}
                w, new_slots = rule(var.numpy(), g, rows, current, lr, t)
                assert w.dtype == dtype, f"the rule computed in {w.dtype}, not {dtype}"
                slots.update(new_slots)
                var.assign(w)

        return apply

    return make


def adaptive_lr_schedule(step):
    """parity's changing rate, scaled to 0.002 for optimizers whose step is ~lr whatever g.

    Adam-like steps have size ~lr however small the gradient, so at parity's
    default rates (0.05) a weight near parity's floor (1e-3) receives steps 50x
    its size, and 1e-6 of it (1e-9) is below the float32 resolution of the
    step itself (ulp(0.05) = 3.7e-9): two correct float32 implementations
    differ there by rounding alone. At 0.002 the comparison measures the rule.
    """
    return 0.002 * (0.99**step) * (1.0 + 0.5 * np.sin(step / 3.0))


def touched(rows):
    """Index of the rows a rule reads and writes: all of them for a dense gradient."""
    return slice(None) if rows is None else rows


def gradient_descent_rule(w, g, rows, slots, lr, t):
    sel = touched(rows)
    w[sel] -= lr * g[sel]
    return w, {}


def adam_rule(beta_1, beta_2, epsilon):
    """Reference 000's CustomAdam, lazy in the rows of a sparse gradient."""

    def rule(w, g, rows, slots, lr, t):
        sel = touched(rows)
        m, v = slots["m"], slots["v"]
        # Exact in float64, rounded once: see CustomAdam._bias_correction.
        correction = np.sqrt(1 - np.float64(beta_2) ** t) / (1 - np.float64(beta_1) ** t)
        lr_t = lr * correction.astype(w.dtype)
        m[sel] = beta_1 * m[sel] + (1 - beta_1) * g[sel]
        v[sel] = beta_2 * v[sel] + (1 - beta_2) * g[sel] * g[sel]
        w[sel] -= lr_t * m[sel] / (np.sqrt(v[sel]) + epsilon)
        return w, {"m": m, "v": v}

    return rule


# -- parity -------------------------------------------------------------------
@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
def test_custom_gradient_descent_matches_tf1_kernel(sparse):
    # TF1's GradientDescent scatters the two contributions to a row named twice one after the
    # other, (w - a) - b; ours subtracts their sum, w - (a + b), as TF1's other optimizers do.
    # Equal in exact arithmetic, one rounding apart: at a weight near the floor (1e-3) one ulp
    # of an update (~1e-2) is ~1e-6 relative, and which way it rounds depends on the CPU's
    # kernels (1.8e-6 on an AVX-512 machine, under 1e-6 on another). The NumPy rule below sums
    # as ours does, and holds 1e-6.
    assert_parity(
        lambda lr: CustomGradientDescent(learning_rate=lr),
        lambda lr: tf.compat.v1.train.GradientDescentOptimizer(lr),
        sparse=sparse,
        tolerance=1e-5 if sparse else TOLERANCE,
    )


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
def test_custom_gradient_descent_matches_numpy_rule(sparse):
    assert_parity(
        lambda lr: CustomGradientDescent(learning_rate=lr),
        numpy_reference(gradient_descent_rule, ()),
        sparse=sparse,
        steps=100,
    )


def test_custom_adam_dense_matches_tf1_adam_kernel():
    """Against TF1's kernel with betas far from 1.

    TF1 keeps `beta^t` as a float32 running product; for a beta near 1 the
    product's rounding, amplified by the cancellation in `1 - beta^t`, puts
    TF1 itself ~1e-5 off the rule at small `t` (CustomAdam computes the bias
    correction in float64). With beta_1=0.5, beta_2=0.75 that cancellation is
    benign and the kernel is a 1e-6 reference for the rest of the rule.
    """
    assert_parity(
        lambda lr: CustomAdam(learning_rate=lr, beta_1=0.5, beta_2=0.75, epsilon=1e-7),
        lambda lr: tf.compat.v1.train.AdamOptimizer(lr, beta1=0.5, beta2=0.75, epsilon=1e-7),
        steps=120,
        lr_schedule=adaptive_lr_schedule,
    )


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.slow  # 4 s on 2 cores, its 2 cases
def test_custom_adam_matches_numpy_rule(sparse):
    assert_parity(
        lambda lr: CustomAdam(learning_rate=lr),
        numpy_reference(adam_rule(*np.float32([0.9, 0.999, 1e-8])), ("m", "v")),
        sparse=sparse,
        steps=120,
        lr_schedule=adaptive_lr_schedule,
    )


def test_custom_adam_sparse_leaves_untouched_rows_and_slots_alone():
    table = tf.Variable(np.ones((4, 2), np.float32))
    optimizer = CustomAdam(learning_rate=0.1)
    optimizer.apply_gradients([(tf.ones((4, 2)), table)])
    before = table.numpy().copy()
    m_before = optimizer.get_slot(table, "m").numpy().copy()
    grad = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([1]), tf.constant([4, 2]))
    optimizer.apply_gradients([(grad, table)])
    untouched = [0, 2, 3]
    np.testing.assert_array_equal(table.numpy()[untouched], before[untouched])
    np.testing.assert_array_equal(
        optimizer.get_slot(table, "m").numpy()[untouched], m_before[untouched]
    )
    assert not np.array_equal(table.numpy()[1], before[1])


def test_duplicate_sparse_rows_are_summed_once():
    """A row named twice gets one update with the summed gradient (TF1's dedup)."""
    table = tf.Variable(np.zeros((3, 2), np.float32))
    optimizer = CustomAdam(learning_rate=0.1)
    values = tf.constant([[1.0, 2.0], [3.0, -4.0]])
    grad = tf.IndexedSlices(values, tf.constant([2, 2]), tf.constant([3, 2]))
    optimizer.apply_gradients([(grad, table)])
    summed = np.array([4.0, -2.0])
    np.testing.assert_allclose(optimizer.get_slot(table, "m").numpy()[2], 0.1 * summed, rtol=1e-6)
    # The first Adam step is lr * sign(g) (up to epsilon).
    np.testing.assert_allclose(table.numpy()[2], -0.1 * np.sign(summed), rtol=1e-6)


# -- defaults, errors, config -------------------------------------------------
def test_defaults_follow_reference_000():
    # RETURNN: CustomAdamOptimizer(beta1=0.9, beta2=0.999, epsilon=1e-08, **kwargs),
    # BaseCustomOptimizer / CustomGradientDescentOptimizer(learning_rate, ...).
    assert_defaults(
        CustomAdam, {"learning_rate": REQUIRED, "beta_1": 0.9, "beta_2": 0.999, "epsilon": 1e-8}
    )
    assert_defaults(CustomGradientDescent, {"learning_rate": REQUIRED})
    assert_defaults(BaseCustomOptimizer, {"learning_rate": REQUIRED})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"beta_1": 1.0}, "`beta_1` must be in [0, 1). Received: beta_1=1.0"),
        ({"beta_2": -0.1}, "`beta_2` must be in [0, 1). Received: beta_2=-0.1"),
        ({"epsilon": -1.0}, "`epsilon` must be in [0, inf]. Received: epsilon=-1.0"),
        (
            {"learning_rate": -0.5},
            "`learning_rate` must be in [0, inf]. Received: learning_rate=-0.5",
        ),
    ],
)
def test_custom_adam_rejects_bad_hyperparameters(kwargs, message):
    params = {"learning_rate": 0.1, **kwargs}
    with pytest.raises(ValueError) as error:
        CustomAdam(**params)
    assert str(error.value) == message


@pytest.mark.parametrize("cls", [CustomGradientDescent, CustomAdam])
def test_config_round_trip(cls):
    optimizer = cls(learning_rate=0.25, clipnorm=1.0)
    config = optimizer.get_config()
    assert cls.from_config(config).get_config() == config
    assert config["learning_rate"] == 0.25


def test_custom_adam_config_holds_only_its_own_keys_beyond_the_base():
    extra = set(CustomAdam(learning_rate=0.1).get_config()) - set(
        CustomGradientDescent(learning_rate=0.1).get_config()
    )
    assert extra == {"beta_1", "beta_2", "epsilon"}


def test_registry_takes_tf1_spellings():
    optimizer = registry.get("CustomAdamOptimizer", learning_rate=0.1, beta1=0.5, beta2=0.9)
    assert isinstance(optimizer, CustomAdam)
    assert (optimizer.beta_1, optimizer.beta_2) == (0.5, 0.9)


# -- the base class a user subclasses ----------------------------------------
class Velocity(BaseCustomOptimizer):
    """A user rule with one slot: heavy-ball momentum, velocity <- 0.5 v + g."""

    slot_names = ("velocity",)

    def apply_rule(self, grad, var, lr, slots):
        velocity = 0.5 * slots["velocity"] + grad
        return lr * velocity, {"velocity": velocity}


def test_user_rule_matches_tf1_momentum_kernel():
    assert_parity(
        lambda lr: Velocity(learning_rate=lr),
        lambda lr: tf.compat.v1.train.MomentumOptimizer(lr, momentum=0.5),
        steps=100,
    )


def test_user_rule_slots_are_tf1_slots():
    var = tf.Variable([1.0, 2.0])
    optimizer = Velocity(learning_rate=0.1)
    optimizer.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    assert optimizer.get_slot_names() == ["velocity"]
    np.testing.assert_array_equal(optimizer.get_slot(var, "velocity").numpy(), [1.0, 1.0])


def test_undeclared_slot_is_an_error():
    class Undeclared(BaseCustomOptimizer):
        def apply_rule(self, grad, var, lr, slots):
            return lr * grad, {"m": grad}

    with pytest.raises(ValueError, match="does not declare: \\['m'\\]"):
        Undeclared(learning_rate=0.1).apply_gradients([(tf.constant([1.0]), tf.Variable([0.0]))])


def test_missing_rule_is_an_error():
    with pytest.raises(NotImplementedError, match="`apply_rule` or `_apply`"):
        BaseCustomOptimizer(learning_rate=0.1).apply_gradients(
            [(tf.constant([1.0]), tf.Variable([0.0]))]
        )


def test_tf1_api_apply_gradients_increments_global_step_and_minimize_descends():
    var = tf.Variable([3.0, -2.0])
    global_step = tf.Variable(0, dtype=tf.int64)
    optimizer = CustomGradientDescent(learning_rate=0.1)
    optimizer.apply_gradients([(tf.constant([1.0, 1.0]), var)], global_step=global_step)
    assert int(global_step.numpy()) == 1
    np.testing.assert_allclose(var.numpy(), [2.9, -2.1], rtol=1e-6)
    optimizer.minimize(lambda: tf.reduce_sum(var * var), var_list=[var], global_step=global_step)
    assert int(global_step.numpy()) == 2
    np.testing.assert_allclose(var.numpy(), [2.9 - 0.1 * 5.8, -2.1 + 0.1 * 4.2], rtol=1e-6)


def test_keras_base_weight_decay_excludes_named_variables():
    kernel = keras.Variable(np.full((2,), 2.0, np.float32), name="kernel")
    bias = keras.Variable(np.full((2,), 2.0, np.float32), name="bias")
    optimizer = CustomGradientDescent(learning_rate=0.1, weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    zero = tf.zeros((2,))
    optimizer.apply_gradients([(zero, kernel), (zero, bias)])
    # Keras' decoupled decay: w <- w - lr * wd * w, before the rule.
    np.testing.assert_allclose(np.asarray(kernel), 2.0 * (1 - 0.1 * 0.5), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(bias), [2.0, 2.0])


def test_keras_base_clipnorm_and_ema():
    var = keras.Variable(np.zeros((2,), np.float32))
    optimizer = CustomGradientDescent(
        learning_rate=1.0, clipnorm=1.0, use_ema=True, ema_momentum=0.5
    )
    optimizer.apply_gradients([(tf.constant([3.0, 4.0]), var)])
    np.testing.assert_allclose(np.asarray(var), [-0.6, -0.8], rtol=1e-6)
    optimizer.finalize_variable_values([var])
    # Keras' EMA starts from the first post-update value.
    np.testing.assert_allclose(np.asarray(var), [-0.6, -0.8], rtol=1e-6)


RETURNN_FAMILY = [
    AMSGrad,
    CustomAdam,
    CustomGradientDescent,
    GradVarianceScaled,
    NeuralOptimizer1,
    NormalizedSGD,
]


@pytest.mark.parametrize("cls", [*RETURNN_FAMILY, Velocity])
def test_xla_compiled_dense_step_equals_eager(cls):
    init = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(3, 2)
    grads = [tf.constant(np.cos(np.arange(6.0) + k).reshape(3, 2), tf.float32) for k in range(3)]
    eager_var, xla_var = tf.Variable(init), tf.Variable(init)
    eager, xla = cls(learning_rate=0.1), cls(learning_rate=0.1)
    xla.build([xla_var])

    @tf.function(jit_compile=True)
    def compiled_step(grad):
        xla.apply_gradients([(grad, xla_var)])

    for grad in grads:
        eager.apply_gradients([(grad, eager_var)])
        compiled_step(grad)
    np.testing.assert_allclose(xla_var.numpy(), eager_var.numpy(), rtol=1e-6)
    assert not np.array_equal(xla_var.numpy(), init)


@pytest.mark.parametrize("cls", RETURNN_FAMILY)
def test_registry_names_the_family(cls):
    assert classes.get_class(cls.__name__) is cls
    assert table.family_of(cls.__name__ + "Optimizer") == "returnn"


# -- the documented example user optimizer -----------------------------------
def sign_sgd_rule(momentum):
    def rule(w, g, rows, slots, lr, t):
        sel = touched(rows)
        m = slots["m"]
        m[sel] = momentum * m[sel] + (1 - momentum) * g[sel]
        w[sel] -= lr * np.sign(m[sel])
        return w, {"m": m}

    return rule


def test_example_sign_sgd_loads_by_dotted_path():
    from examples.my_optimizer import SignSGD

    optimizer = registry.get("examples.my_optimizer.SignSGD", learning_rate=0.1)
    assert isinstance(optimizer, SignSGD)
    assert registry.get("examples.my_optimizer:SignSGD", momentum=0.5).momentum == 0.5
    assert inspect.signature(SignSGD).parameters["momentum"].default == 0.0


@pytest.mark.one_case_fast
@pytest.mark.parametrize("sparse", [False, True])
def test_example_sign_sgd_matches_numpy_rule(sparse):
    from examples.my_optimizer import SignSGD

    assert_parity(
        lambda lr: SignSGD(learning_rate=lr, momentum=0.9),
        numpy_reference(sign_sgd_rule(np.float32(0.9)), ("m",)),
        sparse=sparse,
        steps=100,
        lr_schedule=adaptive_lr_schedule,
    )


@pytest.mark.parametrize("cls", RETURNN_FAMILY)
def test_graph_sparse_step_equals_eager(cls):
    init = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(4, 2)
    eager_var, graph_var = tf.Variable(init), tf.Variable(init)
    eager, graph = cls(learning_rate=0.1), cls(learning_rate=0.1)

    @tf.function
    def graph_step(grad):
        graph.apply_gradients([(grad, graph_var)])

    for k in range(3):
        values = tf.constant(np.sin(np.arange(6.0) + k).reshape(3, 2), tf.float32)
        grad = tf.IndexedSlices(values, tf.constant([k % 4, 3, k % 4]), tf.constant([4, 2]))
        eager.apply_gradients([(grad, eager_var)])
        graph_step(grad)
    np.testing.assert_allclose(graph_var.numpy(), eager_var.numpy(), rtol=1e-6)
    assert not np.array_equal(graph_var.numpy(), init)
