"""TensorBoard as a user sees it, read with TensorBoard's own loaders: runs, tags, HParams of a single run."""

import pytest
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins.hparams import metadata as hparams_metadata

from tests.support import SMALL_RUN, train_in_process

# Its tests share a trained fixture: one xdist worker runs them all (scripts/test.sh: --dist loadgroup).


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tensorboard")
    run = {**SMALL_RUN, "max_steps": 6, "eval_steps": 3, "print_loss_steps": 3, "save_summaries_steps": 3,
           "metrics": ["accuracy"], "max_grad_norm": 1.0}
    return train_in_process(folder, run)[1]


def _multiplexer(directory):
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(directory))
    multiplexer.Reload()
    return multiplexer


def test_train_and_eval_runs_share_tag_names_and_bookkeeping_has_its_own_prefix(logdir):
    scalars = _multiplexer(logdir).PluginRunToTagToContent("scalars")
    # The Scalars tab lists exactly two runs: the logdir itself holds only the HParams session.
    assert set(scalars) == {"train", "eval"}
    train, evaluation = set(scalars["train"]), set(scalars["eval"])
    assert {"loss", "accuracy"} == evaluation  # Keras's validation run: the training run's names
    assert "loss" in train and "learning_rate" in train  # the card "loss" holds both runs' curves
    assert {"pipeline/loss_scale", "pipeline/consecutive_overflows", "pipeline/skipped_steps",
            "pipeline/global_gradient_norm", "pipeline/global_clipped_gradient_norm",
            "perf/samples_per_sec"} <= train
    assert "global_step" not in train
    # Nothing else without a prefix: loss, metrics and the learning rate are the only top-level cards.
    assert {tag for tag in train | evaluation if "/" not in tag} == {"loss", "learning_rate", "accuracy"}


def test_the_train_loss_curve_is_the_printed_loss_once_per_reported_step(logdir):
    import tensorflow as tf

    from tests.support import read_jsonl

    multiplexer = _multiplexer(logdir)
    points = [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in multiplexer.Tensors("train", "loss")]
    printed = [(r["step"], r["loss"]) for r in read_jsonl(logdir / "metrics.jsonl") if "loss" in r]
    # Summaries and reports fall on the same steps here: still one point each, the interval's mean.
    assert [step for step, _ in points] == [3, 6]
    assert points == [(step, pytest.approx(loss, rel=1e-6)) for step, loss in printed]


def test_a_single_run_has_an_hparams_session_of_the_keys_it_sets_apart_from_the_defaults(logdir):
    multiplexer = _multiplexer(logdir)
    content = multiplexer.PluginRunToTagToContent(hparams_metadata.PLUGIN_NAME)
    assert set(content) == {"."}  # the logdir itself: the parent of the train and eval runs
    start = hparams_metadata.parse_session_start_info_plugin_data(
        content["."][hparams_metadata.SESSION_START_INFO_TAG])
    values = start.hparams
    # The fixture's config against the key table's defaults (docs/config.md): `optimizer: Adam` and
    # `data: digits` are defaults; max_steps, eval_steps, print_loss_steps, save_summaries_steps
    # and logdir do not define the run. What is left, one column per leaf:
    assert set(values) == {"batch_size_per_gpu", "max_grad_norm", "metrics", "model_params.hidden_units",
                           "optimizer_params.learning_rate"}
    assert values["optimizer_params.learning_rate"].number_value == pytest.approx(0.01)
    assert values["batch_size_per_gpu"].number_value == 16
    assert values["max_grad_norm"].number_value == 1.0
    assert values["model_params.hidden_units"].string_value == "[8]"
    assert values["metrics"].string_value == "[accuracy]"
    assert start.group_name == "run"


def test_hparams_plugin_lists_the_run_with_its_metrics_from_the_train_and_eval_runs(logdir):
    """TensorBoard's HParams backend infers the experiment: this run's keys and the (tag, run) metric names."""
    from tensorboard.backend.event_processing import data_provider
    from tensorboard import context
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context

    # `tensorboard --logdir` on the folder of runs, as with several runs started by hand.
    parent = logdir.parent
    multiplexer = _multiplexer(parent)
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(parent))
    tb_context = base_plugin.TBContext(data_provider=provider, logdir=str(parent), multiplexer=multiplexer)
    backend = backend_context.Context(tb_context)
    ctx = context.RequestContext()
    experiment = backend.experiment_from_metadata(
        ctx, "", True, backend.hparams_metadata(ctx, ""), backend.hparams_from_data_provider(ctx, "", None))
    names = sorted(info.name for info in experiment.hparam_infos)
    # The table orders them by name and shows the first five: the learning rate is among them.
    assert "optimizer_params.learning_rate" in names[:5]
    assert not {"optimizer", "data", "count_skipped_updates", "max_steps", "logdir"} & set(names)
    metrics = {(info.name.group, info.name.tag) for info in experiment.metric_infos}
    assert {("train", "loss"), ("eval", "loss"), ("eval", "accuracy")} <= metrics
    assert all(group in ("train", "eval") for group, _ in metrics)  # no third run of the same figures
