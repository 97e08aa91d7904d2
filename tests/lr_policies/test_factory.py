"""`get_lr_policy`: defaults filled as OpenSeq2Seq did, the warm-up block, serialization."""

import keras
import lr_reference as ref
import numpy as np
import pytest
import tensorflow as tf

from opt_train.lr_policies import get_lr_policy, schedules
from opt_train.suggest import UnknownNameError

TOL = dict(rtol=1e-6, atol=1e-6)


def values(schedule, steps):
    return np.array([float(schedule(tf.constant(s, tf.int64))) for s in steps])


def test_name_any_spelling_gives_the_policy_class():
    assert isinstance(get_lr_policy("Poly_Decay", learning_rate=0.1, max_steps=10), schedules.PolyDecay)
    assert isinstance(get_lr_policy("FIXED", learning_rate=0.1), schedules.FixedLR)


def test_defaulted_decay_steps_end_the_decay_on_the_last_update():
    max_steps = 100
    schedule = get_lr_policy("poly", learning_rate=0.1, max_steps=max_steps, power=2.0, min_lr=0.001,
                             warmup_steps=10)
    expected = ref.curve(ref.poly, [0, 5, 10, 55, 99, 100], 0.1, decay_steps=90, power=2.0,
                         begin_decay_at=10, min_lr=0.001, warmup_steps=10)
    np.testing.assert_allclose(values(schedule, [0, 5, 10, 55, 99, 100]), expected, **TOL)
    np.testing.assert_allclose(float(schedule(max_steps)), 0.001, **TOL)


def test_piecewise_boundaries_are_epochs_when_the_run_counts_epochs():
    schedule = get_lr_policy("piecewise", learning_rate=1.0, steps_per_epoch=10,
                             boundaries=[1, 3], decay_rates=[0.1, 0.01])
    np.testing.assert_allclose(values(schedule, [10, 11, 30, 31]), [1.0, 0.1, 0.1, 0.01], **TOL)


def test_piecewise_switch_on_boundary_takes_the_new_rate_on_the_boundary_step():
    # An epoch of 10 updates: steps 0..9 are epoch 1, step 10 is epoch 2's first update.
    schedule = get_lr_policy("piecewise", learning_rate=1.0, steps_per_epoch=10,
                             boundaries=[1, 3], decay_rates=[0.1, 0.01], switch_on_boundary=True)
    np.testing.assert_allclose(values(schedule, [9, 10, 29, 30]), [1.0, 0.1, 0.1, 0.01], **TOL)


def test_decay_steps_needs_max_steps_or_a_value():
    with pytest.raises(ValueError, match="`decay_steps` is required by lr_policy 'cosine' when `max_steps`"):
        get_lr_policy("cosine", learning_rate=0.1)


def test_unknown_parameter_and_name_raise_unknown_name_error():
    with pytest.raises(UnknownNameError, match="unknown lr_policy parameter 'decay_step'; did you mean 'decay_steps'"):
        get_lr_policy("exp", learning_rate=0.1, decay_step=10, decay_rate=0.5)
    with pytest.raises(UnknownNameError, match="did you mean 'cosine'"):
        get_lr_policy("cosin", learning_rate=0.1, max_steps=10)


def test_negative_learning_rate_is_rejected():
    with pytest.raises(ValueError, match="`learning_rate` must be >= 0. Received: learning_rate=-0.1"):
        get_lr_policy("fixed", learning_rate=-0.1)


def test_warmup_block_ramps_to_the_policy_value_then_hands_over():
    schedule = get_lr_policy("exp", learning_rate=0.1, max_steps=100, decay_rate=0.5,
                             warmup={"steps": 8, "power": 2.0})
    assert isinstance(schedule, schedules.WarmUp)
    inner = lambda s: ref.exp(s, 0.1, decay_steps=100, decay_rate=0.5)  # noqa: E731
    steps = [0, 1, 4, 7, 8, 9, 50, 99]
    expected = ref.curve(ref.warmed_up(inner, 8, 2.0), steps)
    np.testing.assert_allclose(values(schedule, steps), expected, **TOL)


def test_warmup_block_of_zero_steps_is_no_wrapper():
    schedule = get_lr_policy("fixed", learning_rate=0.1, warmup={"steps": 0})
    assert isinstance(schedule, schedules.FixedLR)


def test_shorter_linear_warmup_block_is_invisible_over_a_policy_warmup():
    # Both ramps are linear from 0 with slope lr / W, so the curve is the policy's own.
    steps = list(range(0, 40)) + [60, 99]
    own = get_lr_policy("poly", learning_rate=0.1, max_steps=100, warmup_steps=20)
    both = get_lr_policy("poly", learning_rate=0.1, max_steps=100, warmup_steps=20, warmup={"steps": 8})
    np.testing.assert_allclose(values(both, steps), values(own, steps), **TOL)


def test_longer_warmup_block_replaces_the_policy_warmup():
    steps = [0, 5, 10, 29, 30, 31, 80]
    both = get_lr_policy("poly", learning_rate=0.1, max_steps=100, warmup_steps=10, warmup={"steps": 30})
    inner = lambda s: ref.poly(s, 0.1, decay_steps=90, begin_decay_at=10, warmup_steps=10)  # noqa: E731
    np.testing.assert_allclose(values(both, steps), ref.curve(ref.warmed_up(inner, 30), steps), **TOL)


def test_bad_warmup_block_is_keyed_to_warmup():
    with pytest.raises(ValueError) as caught:
        get_lr_policy("fixed", learning_rate=0.1, warmup={"steps": -2})
    assert caught.value.key == "warmup.steps"


ALL_POLICIES = [
    ("fixed", {}),
    ("exp", dict(decay_rate=0.5, use_staircase_decay=True, begin_decay_at=3, min_lr=1e-4)),
    ("poly", dict(power=2.0, min_lr=1e-4, warmup_steps=5)),
    ("inv_poly", dict(min_lr=1e-4, power=0.5, warmup_steps=5)),
    ("piecewise", dict(boundaries=[1, 2], decay_rates=[0.1, 0.01], steps_per_epoch=20)),
    ("transformer", dict(d_model=128, warmup_steps=10, max_lr=0.005, coefficient=2.0)),
    ("cosine", dict(min_lr=0.1, warmup_steps=5, begin_decay_at=8)),
]
STEPS = [0, 3, 5, 8, 20, 21, 40, 41, 59]


@pytest.mark.parametrize("policy, params", ALL_POLICIES, ids=[p for p, _ in ALL_POLICIES])
@pytest.mark.parametrize("warmup", [None, {"steps": 4, "power": 1.5}], ids=["plain", "warmup"])
def test_config_round_trip_rebuilds_the_same_schedule(policy, params, warmup):
    schedule = get_lr_policy(policy, learning_rate=0.1, max_steps=60, warmup=warmup, **params)
    rebuilt = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert type(rebuilt) is type(schedule)
    assert rebuilt.get_config() == schedule.get_config()
    np.testing.assert_array_equal(values(rebuilt, STEPS), values(schedule, STEPS))
    assert type(schedule).from_config(schedule.get_config()).get_config() == schedule.get_config()


def test_optimizer_config_round_trip_keeps_the_schedule():
    schedule = get_lr_policy("cosine", learning_rate=0.1, max_steps=60, warmup={"steps": 4})
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    restored = keras.optimizers.SGD.from_config(optimizer.get_config())
    assert isinstance(restored._learning_rate, schedules.WarmUp)
    assert restored._learning_rate.get_config() == schedule.get_config()


def test_optimizer_applies_the_rate_of_each_update():
    schedule = get_lr_policy("exp", learning_rate=0.5, max_steps=10, decay_rate=0.1)
    variable = tf.Variable([1.0])
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    for update in range(3):
        before = float(variable[0])
        optimizer.apply_gradients([(tf.constant([1.0]), variable)])
        step = before - float(variable[0])
        np.testing.assert_allclose(step, ref.exp(update, 0.5, decay_steps=10, decay_rate=0.1), **TOL)
