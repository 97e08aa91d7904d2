"""The finite check: verdict on the reduced gradient, skip counting, and the collective verdict."""

import numpy as np
import tensorflow as tf

from opt_train.optimizers.finite import finite_check
from opt_train.optimizers.loss_scaling import AutomaticLossScaler, ScaleState, StaticLossScale
from opt_train.process_group import SingleProcess


class TwoReplicas(SingleProcess):
    """A unit-test backend: the other simulated replica's flag is fixed by the test."""

    def __init__(self, other_flag):
        self.other_flag = other_flag

    def all_finite(self, flag):
        return tf.logical_and(flag, self.other_flag)


def _step(transform, state, grads, variables, scale=None):
    return transform.update([tf.constant(g) for g in grads], state, variables, scale=scale)


def test_counts_skips_and_consecutive_overflows():
    variables = [tf.Variable(tf.zeros([2])), tf.Variable(tf.zeros([1]))]
    transform = finite_check(SingleProcess())
    state = transform.init(variables)
    stream = [([3.0, 4.0], [0.0]), ([np.inf, 0.0], [1.0]), ([0.0, 0.0], [np.nan]), ([1.0, 0.0], [0.0])]
    verdicts, consecutive = [], []
    for grads in stream:
        _step(transform, state, [np.float32(g) for g in grads], variables)
        verdicts.append(bool(state.finite.numpy()))
        consecutive.append(int(state.consecutive_overflows.numpy()))
    assert verdicts == [True, False, False, True]
    assert consecutive == [0, 1, 2, 0]
    assert int(state.skipped_steps.numpy()) == 2
    assert abs(float(state.global_norm.numpy()) - 1.0) < 1e-6  # last update: norm of [1, 0, 0]


class NoCollective(SingleProcess):
    """A backend whose collective verdict must not be asked for."""

    def all_finite(self, flag):
        raise AssertionError("all_finite called")


def test_the_gradient_verdict_is_taken_on_the_reduced_gradient_without_a_collective():
    # The all-reduce hands every rank the same values: an overflow on one rank is a
    # non-finite reduced gradient everywhere. No collective per update besides it.
    variables = [tf.Variable(tf.zeros([2]))]
    for policy in ({}, {"max_consecutive_overflows": 3}):
        transform = finite_check(NoCollective(), **policy)
        state = transform.init(variables)
        _step(transform, state, [np.float32([np.inf, 2.0])], variables)
        assert not bool(state.finite.numpy())
        assert int(state.skipped_steps.numpy()) == 1


def test_a_non_finite_loss_on_another_rank_stops_this_one_too():
    # on_nonfinite: stop reads each rank's own loss; all must stop at the same update.
    variables = [tf.Variable(tf.zeros([2]))]
    scale = ScaleState(AutomaticLossScaler("Backoff"))
    for other_finite, expected in ((True, None), (False, "loss is not finite")):
        backend = TwoReplicas(other_flag=tf.constant(other_finite))
        transform = finite_check(backend, on_nonfinite="stop")
        state = transform.init(variables)
        transform.update([tf.constant([1.0, 2.0])], state, variables, loss_is_finite=tf.constant(True), scale=scale)
        reason = state.stop_reason()
        assert reason is None if expected is None else expected in reason


def test_stop_policy_is_the_finite_stage_s_own():
    variables = [tf.Variable(tf.zeros([2]))]
    nan = [np.float32([np.nan, 0.0])]
    # A static scale cannot adapt: the first non-finite gradient stops the run; so does
    # no scale at all (a pipeline without an unscale stage).
    for scale in (ScaleState(StaticLossScale(1.0)), None):
        transform = finite_check(SingleProcess(), on_nonfinite="stop")
        state = transform.init(variables)
        _step(transform, state, [np.float32([1.0, 2.0])], variables, scale)
        assert state.stop_reason() is None
        _step(transform, state, nan, variables, scale)
        assert "gradients are not finite and loss scaling is static" in state.stop_reason()
    # An automatic scaler finds its scale by overflowing: only a non-finite loss stops it.
    scale = ScaleState(AutomaticLossScaler("Dynamic"))
    transform = finite_check(SingleProcess(), on_nonfinite="stop")
    state = transform.init(variables)
    _step(transform, state, nan, variables, scale)
    assert state.stop_reason() is None
    transform.update([tf.constant(g) for g in nan], state, variables, loss_is_finite=tf.constant(False),
                     scale=scale)
    assert "loss is not finite" in state.stop_reason()
    # The limit on overflows in a row, whatever the policy.
    transform = finite_check(SingleProcess(), max_consecutive_overflows=2)
    state = transform.init(variables)
    for expected in (None, "2 consecutive non-finite updates"):
        _step(transform, state, nan, variables)
        reason = state.stop_reason()
        assert reason is None if expected is None else expected in reason


def test_state_reports_the_verdict_and_statistics():
    from opt_train.optimizers.transform import report

    variables = [tf.Variable(tf.zeros([2]))]
    transform = finite_check(SingleProcess())
    state = transform.init(variables)
    _step(transform, state, [np.float32([3.0, 4.0])], variables)
    found = report({"finite": state})
    assert bool(found["apply"]) and float(found["global_gradient_norm"]) == 5.0
    assert int(found["skipped_steps"]) == 0 and int(found["consecutive_overflows"]) == 0


def test_the_verdict_adjusts_the_scale_it_is_handed_once_per_update():
    # The scale is the unscale stage's (its ScaleState, the extra input `scale`): the check
    # moves it by its verdict as Keras's LossScaleOptimizer moves its dynamic scale.
    import keras

    variables = [tf.Variable(tf.zeros([2]))]
    scale = ScaleState(AutomaticLossScaler("Dynamic", {"initial_scale": 8.0, "dynamic_growth_steps": 2}))
    transform = finite_check(SingleProcess())
    state = transform.init(variables)
    reference = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.0), initial_scale=8.0,
                                                    dynamic_growth_steps=2)
    kept = keras.Variable(np.zeros(2, np.float32))
    reference.build([kept])
    for grads in ([1.0, 2.0], [np.inf, 0.0], [1.0, 0.0], [1.0, 0.0], [np.nan, 0.0]):
        _step(transform, state, [np.float32(grads)], variables, scale)
        reference.apply([tf.constant(grads, tf.float32)], [kept])
        assert float(scale.loss_scaler.loss_scale) == float(reference.dynamic_scale.numpy())
    # Handed no scale, the check moves none and still judges.
    before = float(scale.loss_scaler.loss_scale)
    _step(transform, state, [np.float32([np.inf, 0.0])], variables)
    assert float(scale.loss_scaler.loss_scale) == before and not bool(state.finite.numpy())
