"""HParams summaries, read back with TensorBoard's own event reader and hparams metadata parser."""

import glob

import pytest

from opt_train.config.sweep_block import Distribution
from tests.support import NO_TENSORFLOW, run_python

pytest.importorskip("tensorboard")


def read_hparams_events(directory):
    """`{tag: plugin content bytes}` of the hparams summaries in `directory`'s event files, plus scalars."""
    import tensorflow as tf
    from tensorboard.plugins.hparams import metadata

    found, scalars = {}, {}
    for path in glob.glob(f"{directory}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME:
                    found[value.tag] = value.metadata.plugin_data.content
                elif value.tag:
                    scalars[value.tag] = (event.step, float(tf.make_ndarray(value.tensor)))
    return found, scalars


def test_experiment_lists_swept_keys_with_domains_and_the_metrics(tmp_path):
    from opt_train.sweep.hparams import write_experiment
    from tensorboard.plugins.hparams import metadata

    rows = [
        {"overrides": {"optimizer": "Adam", "lr": 0.1, "hidden": [64]}, "metrics": {"eval/accuracy": 0.9, "train/loss": 1.0}},
        {"overrides": {"optimizer": "SGD", "lr": 0.01, "hidden": [32]}, "metrics": {}},
    ]
    ranges = {"lr": Distribution("log_uniform", (1e-3, 1.0))}
    write_experiment(str(tmp_path), ["optimizer", "lr", "hidden"], rows, "eval/accuracy", ranges)
    write_experiment(str(tmp_path), ["optimizer", "lr", "hidden"], rows, "eval/accuracy", ranges)  # replaces
    assert len(glob.glob(f"{tmp_path}/events.out.tfevents.*")) == 1
    found, _ = read_hparams_events(tmp_path)
    experiment = metadata.parse_experiment_plugin_data(found[metadata.EXPERIMENT_TAG])
    infos = {info.name: info for info in experiment.hparam_infos}
    assert [v.string_value for v in infos["optimizer"].domain_discrete.values] == ["Adam", "SGD"]
    assert (infos["lr"].domain_interval.min_value, infos["lr"].domain_interval.max_value) == (1e-3, 1.0)
    assert [v.string_value for v in infos["hidden"].domain_discrete.values] == ["[32]", "[64]"]
    # Each metric points at its tag in the trial's own train or eval run (no run of copies).
    assert [(m.name.group, m.name.tag) for m in experiment.metric_infos] == [("eval", "accuracy"), ("train", "loss")]
    assert [m.display_name for m in experiment.metric_infos] == ["eval/accuracy", "train/loss"]


def test_session_holds_the_swept_values_alone_and_no_scalars(tmp_path):
    import yaml
    from opt_train.sweep.hparams import write_session
    from tensorboard.plugins.hparams import metadata

    # The trial's config sets more than the sweep varies: those keys are no columns.
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(
        {"optimizer": "Adam", "optimizer_params": {"learning_rate": 0.1}, "max_steps": 60, "logdir": str(tmp_path)}))
    record = {"trial": "trial-001-abcdef12",
              "overrides": {"optimizer": "Adam", "lr": 0.1, "nesterov": True, "lr_policy_params": {"gamma": 0.5}},
              "metrics": {"eval/accuracy": 0.75, "global_step": 60, "train/loss": float("nan")}}
    write_session(str(tmp_path), record)
    write_session(str(tmp_path), record)  # replaces
    assert len(glob.glob(f"{tmp_path}/events.out.tfevents.*")) == 1
    found, scalars = read_hparams_events(tmp_path)
    start = metadata.parse_session_start_info_plugin_data(found[metadata.SESSION_START_INFO_TAG])
    assert start.group_name == "trial-001-abcdef12"
    assert set(start.hparams) == {"optimizer", "lr", "nesterov", "lr_policy_params"}
    assert start.hparams["optimizer"].string_value == "Adam"
    assert start.hparams["lr"].number_value == pytest.approx(0.1)
    assert start.hparams["nesterov"].bool_value is True
    assert start.hparams["lr_policy_params"].string_value == "{gamma: 0.5}"  # one swept key, one column
    # The figures stay in the trial's train and eval runs: the session folder is no third run.
    assert scalars == {}


def test_the_summaries_are_written_without_importing_tensorflow(tmp_path):
    # The sweep driver writes them after every trial: TensorFlow's import would cost it
    # seconds of CPU and hundreds of MiB beside the trials it runs. (The two tests above
    # read what is written with TensorFlow's own event reader.)
    code = (
        "import sys\n"
        "from opt_train.sweep.hparams import write_experiment, write_session\n"
        "record = {'trial': 'trial-001', 'overrides': {'lr': 0.1}, 'metrics': {'eval/accuracy': 0.5}}\n"
        "write_session(sys.argv[2], record)\n"
        "write_experiment(sys.argv[1], ['lr'], [record], 'eval/accuracy')\n"
        + NO_TENSORFLOW
    )
    done = run_python(code, tmp_path, tmp_path / "trial-001")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(glob.glob(f"{tmp_path}/events.out.tfevents.*")) == 1
    assert len(glob.glob(f"{tmp_path}/trial-001/events.out.tfevents.*")) == 1
