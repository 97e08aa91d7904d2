"""TensorBoard summaries as a user reads them: every summary name, scalars and histograms, right values."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from opt_train.optimizers.names import OPTIMIZER_SUMMARIES
from tests.support import CONFIGS

# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def _events(directory):
    accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance={"tensors": 0})
    accumulator.Reload()
    return {tag: accumulator.Tensors(tag) for tag in accumulator.Tags()["tensors"]}


@pytest.mark.slow  # 22 s measured on 2 loaded cores: every histogram and scalar summary each step
def test_every_summary_is_written_with_the_right_values(cli, tmp_path):
    logdir = tmp_path / "run"
    summaries = [name for name in OPTIMIZER_SUMMARIES if name != "larc_summaries"]
    args = ["train", "--config", CONFIGS / "default.yaml"]
    for override in (f"logdir={logdir}", "max_steps=10", "save_summaries_steps=1",
                     "print_loss_steps=5", f"summaries={summaries}", "model_params.hidden_units=[8]"):
        args += ["--set", override]
    assert cli(*args).exit_code == 0

    events = _events(logdir / "train")
    for tag in ("loss", "learning_rate", "pipeline/loss_scale", "pipeline/global_gradient_norm",
                "pipeline/skipped_steps", "pipeline/consecutive_overflows", "perf/samples_per_sec",
                "gradients/dense_0/kernel", "variables/logits/bias",
                "gradient_norm/dense_0/kernel", "variable_norm/dense_0/kernel"):
        assert tag in events, (tag, sorted(events))
    assert [e.step for e in events["learning_rate"]] == list(range(1, 11))
    assert tf.make_ndarray(events["learning_rate"][-1].tensor_proto) == np.float32(0.001)
    histogram = tf.make_ndarray(events["gradients/dense_0/kernel"][-1].tensor_proto)
    assert histogram.ndim == 2 and histogram.shape[1] == 3  # (left edge, right edge, count) buckets
    assert histogram[:, 2].sum() == 64 * 8  # every element of the 64x8 kernel counted

    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(logdir / "checkpoints")))
    kernel_key = "model_variables/0/.ATTRIBUTES/VARIABLE_VALUE"  # model.variables[0]: dense_0/kernel
    assert reader.get_variable_to_shape_map()[kernel_key] == [64, 8]
    logged = tf.make_ndarray(events["variable_norm/dense_0/kernel"][-1].tensor_proto)
    np.testing.assert_allclose(logged, np.linalg.norm(reader.get_tensor(kernel_key)), rtol=1e-6)

    eval_events = _events(logdir / "eval")
    assert {"loss", "accuracy"} <= set(eval_events)  # the train run's names: one card each for both runs
