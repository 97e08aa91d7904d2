"""TensorBoard summaries as a user reads them: every summary name, scalars and histograms, right values."""

import re

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from opt_train.optimizers.names import OPTIMIZER_SUMMARIES, SUMMARIES
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


def _run(cli, logdir, *overrides):
    args = ["train", "--config", CONFIGS / "default.yaml"]
    for override in (f"logdir={logdir}", "max_steps=2", "save_summaries_steps=1", "print_loss_steps=1",
                     "model_params.hidden_units=[8]", *overrides):
        args += ["--set", override]
    assert cli(*args).exit_code == 0
    return set(_events(logdir / "train"))


def test_each_summary_row_names_the_tags_a_real_run_writes(cli, tmp_path):
    """Every `SUMMARIES` row against a real event file of a run listing every name (LARC on, so
    `larc_summaries` writes): each of its tags is written, for each trained variable where it is
    per variable, and every per-variable tag written belongs to some row."""
    written = _run(cli, tmp_path / "every", f"summaries={list(SUMMARIES.rows)}", "larc_params={larc_eta: 0.002}")
    variables = {"dense_0/kernel", "dense_0/bias", "logits/kernel", "logits/bias"}  # the 1-hidden-layer MLP
    claimed = set()
    for name, row in SUMMARIES.rows.items():
        for pattern in row.tags:
            expected = {pattern.replace("<variable>", v) for v in variables} if "<variable>" in pattern else {pattern}
            assert expected <= written, (name, sorted(expected - written))
            claimed |= expected
    per_variable = {t for t in written if re.match(r"(gradients|gradient_norm|variables|variable_norm|larc)/", t)}
    assert per_variable <= claimed, sorted(per_variable - claimed)


def test_openseq2seqs_default_summaries_are_written_whether_listed_or_not(cli, tmp_path):
    """Their rows say so: with `summaries: []` a run still writes the tags of the `default` rows, and no other row's."""
    written = _run(cli, tmp_path / "none", "summaries=[]", "larc_params={larc_eta: 0.002}")
    for name, row in SUMMARIES.rows.items():
        prefixes = [pattern.replace("<variable>", "") for pattern in row.tags]
        shown = any(tag == prefix or ("<variable>" in pattern and tag.startswith(prefix))
                    for tag in written for prefix, pattern in zip(prefixes, row.tags))
        assert shown == row.default, (name, sorted(written))
