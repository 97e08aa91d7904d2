"""`train_op.nonfinite_check`: the paths of the float variables holding a NaN or an infinity, eager and compiled alike."""

import numpy as np
import tensorflow as tf

from opt_train.optimizers.train_op import EAGER_CHECKS, nonfinite_check


def test_every_call_names_the_non_finite_float_variables_as_numpy_does():
    variables = [tf.Variable(np.zeros((3, 2), np.float32), name="kernel"),
                 tf.Variable(np.zeros(2, np.float16), name="bias"),
                 tf.Variable(0, dtype=tf.int64, name="iterations")]
    check = nonfinite_check(variables + variables[:1])  # a variable given twice is looked at once
    rng = np.random.default_rng(0)
    # Past EAGER_CHECKS the calls run the compiled check: both answer every case.
    for call in range(EAGER_CHECKS + 4):
        for variable in variables[:2]:
            value = rng.normal(size=variable.shape).astype(variable.dtype.as_numpy_dtype)
            if rng.random() < 0.5:
                value.flat[rng.integers(value.size)] = rng.choice([np.nan, np.inf, -np.inf])
            variable.assign(value)
        expected = [v.name for v in variables[:2] if not np.isfinite(v.numpy()).all()]
        assert check() == expected, call


def test_no_float_variables_is_nothing_to_look_at():
    assert nonfinite_check([tf.Variable(1, dtype=tf.int32)])() == []
