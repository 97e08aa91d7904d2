"""The evaluation step: one trace for every batch of the eval split, the short last one too, and the right figures."""

import numpy as np

from tests.support import SMALL_RUN


def test_a_short_last_batch_does_not_trace_the_eval_step_again(write_config):
    import keras

    from opt_train.config import load_config
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run
    from opt_train.training.evaluation import Evaluator

    # digits' eval split in batches of 64: full ones, then a short one.
    run = build_run(load_config([str(write_config({**SMALL_RUN, "eval_batch_size": 64}))]), get_backend())
    batches = list(run.data.eval.as_numpy_iterator())
    assert {len(y) for _, y in batches[:-1]} == {64} and 0 < len(batches[-1][1]) < 64
    evaluator = Evaluator(run.model, run.data)
    results = evaluator()
    assert evaluator() == results  # a second evaluation traces nothing either
    assert evaluator._step.experimental_get_tracing_count() == 1

    # The figures over every example, each counted once (NumPy on the model's eager outputs).
    x = np.concatenate([x for x, _ in batches])
    y = np.concatenate([y for _, y in batches])
    logits = np.asarray(run.model(x, training=False))
    np.testing.assert_allclose(results["accuracy"], np.mean(np.argmax(logits, axis=1) == y), rtol=1e-6)  # float32
    loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    np.testing.assert_allclose(results["loss"], np.mean(np.asarray(loss)), rtol=1e-5)
