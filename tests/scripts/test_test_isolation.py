"""What one test leaves in its worker's process is not what the next one finds (tests/conftest.py's autouse fixtures)."""

import pytest

from opt_train.optimizers.mixed_precision import dtype_policy_name

# In file order on one worker: the second finds what the first left, were it kept.
pytestmark = pytest.mark.xdist_group("test_isolation")


def test_a_mixed_run_sets_the_global_dtype_policy_as_build_run_does():
    import keras

    keras.mixed_precision.set_dtype_policy(dtype_policy_name("mixed"))
    assert keras.config.dtype_policy().name == "mixed_float16"


def test_the_next_test_finds_the_policy_as_it_was():
    import keras

    assert keras.config.dtype_policy().name == "float32"
