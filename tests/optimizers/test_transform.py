"""chain / named_chain: stages run in order, each keeps its own state; allreduce is one stage."""

import numpy as np
import tensorflow as tf

from opt_train.optimizers.allreduce import allreduce
from opt_train.optimizers.transform import chain, named_chain, state_variables, stateless
from opt_train.process_group import SingleProcess


def test_chain_applies_in_order():
    add_one = stateless(lambda grads, variables, **extra: [g + 1.0 for g in grads])
    double = stateless(lambda grads, variables, **extra: [g * 2.0 for g in grads])
    grads = [tf.constant([1.0, 2.0])]
    out, _ = chain(add_one, double).update(grads, chain(add_one, double).init([]))
    np.testing.assert_array_equal(out[0].numpy(), [4.0, 6.0])
    out, _ = chain(double, add_one).update(grads, ((), ()))
    np.testing.assert_array_equal(out[0].numpy(), [3.0, 5.0])


def test_named_chain_state_is_keyed_and_extras_reach_children():
    received = {}

    def record(grads, variables, **extra):
        received.update(extra)
        return grads

    transform = named_chain(("record", stateless(record)), ("reduce", allreduce(SingleProcess())))
    state = transform.init([])
    assert set(state) == {"record", "reduce"}
    grads = [tf.constant(1.0), None]
    out, _ = transform.update(grads, state, None, learning_rate=0.5)
    assert received == {"learning_rate": 0.5}
    assert out[1] is None and float(out[0]) == 1.0


def test_state_variables_finds_nested_variables_once():
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    assert state_variables({"x": (a, [b, a]), "y": ()}) == [a, b]
