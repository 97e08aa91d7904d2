"""Every figure a run reports is a function of the step alone, whatever SIGINT, SIGTERM or kill -9 came between.

A run is stopped by a real signal (sent to itself when its train op reaches a given
step, so the stop lands exactly on, one before or one after a reporting step), then
resumed by the same command; every record of metrics.jsonl, every TensorBoard scalar
(as TensorBoard itself reads the event files) and final_metrics.json must equal an
uninterrupted run's.

Only the stopped run needs a process of its own (it is signalled or killed); the resume
and the uninterrupted run are `opt-train train` in this process, as tests/training/test_resume.py
resumes, which spares each case a second TensorFlow import.
"""

import json
import signal

import numpy as np
import pytest
import tensorflow as tf
import yaml

from tests.support import read_json, read_jsonl, run_python

# Dropout, momentum and a decaying lr (as test_resume), reporting every 5 updates, summaries
# every 3, an evaluation every 6 and a checkpoint every 4, so the cadences cross.
RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [16], "dropout": 0.2},
    "data": "digits",
    "batch_size_per_gpu": 16,
    "optimizer": "Momentum",
    "optimizer_params": {"learning_rate": 0.05, "momentum": 0.9},
    "lr_policy": "exp",
    "lr_policy_params": {"decay_steps": 10, "decay_rate": 0.5},
    "print_loss_steps": 5,
    "save_summaries_steps": 3,
    "eval_steps": 6,
    "save_checkpoint_steps": 4,
    "max_steps": 22,
    "random_seed": 3,
}
# No test here looks at logdir/export: the runs in this process skip the end-of-run export
# (conftest.py: no_export); the stopped runs never reach it.
pytestmark = pytest.mark.usefixtures("no_export")

# Timing depends on the machine, not the step.
TIMED = ("samples_per_sec",)

# The trainer as `opt-train train` runs it, sending itself `SIG` once its train op reaches
# update AT: the real handler (or, for SIGKILL, the kernel) takes it from there.
STOPPER = """
import os, sys
from opt_train.training import loop
at, number = int(sys.argv[1]), int(sys.argv[2])
count = loop.Session._count_losses
def count_and_stop(self, mean_loss):
    count(self, mean_loss)
    if not getattr(self, "_sent", False) and int(self.run.train_op.global_step.numpy()) >= at:
        self._sent = True
        os.kill(os.getpid(), number)
loop.Session._count_losses = count_and_stop
from opt_train.cli.main import main
main(["train", "--config", sys.argv[3]])
"""


def _write(folder, run):
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({**run, "logdir": str(folder / "run")}, sort_keys=False))
    return config


def _scalars(logdir):
    """{(folder, tag): [(step, value)]} as TensorBoard shows them (orphans of a killed run purged)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as accumulator

    found = {}
    for folder in ("train", "eval"):
        if not (logdir / folder).is_dir():
            continue
        events = accumulator.EventAccumulator(str(logdir / folder), size_guidance={"tensors": 0})
        events.Reload()
        for tag in events.Tags()["tensors"]:
            if tag.endswith(TIMED):
                continue
            values = [(e.step, tf.make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)]
            if all(np.asarray(v).size == 1 for _, v in values):
                found[folder, tag] = sorted((step, float(np.asarray(v).item())) for step, v in values)
    return found


def _records(logdir):
    return [{k: v for k, v in record.items() if k not in TIMED} for record in read_jsonl(logdir / "metrics.jsonl")]


def _train(config):
    """`opt-train train --config config` in this process (no signal is sent to it)."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    return CliRunner().invoke(cli, ["train", "--config", str(config)], catch_exceptions=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, no_export):
    """`uninterrupted(run) -> logdir` of `run` trained without a stop (once per run)."""
    done_runs = {}

    def train(run):
        key = json.dumps(run, sort_keys=True)
        if key not in done_runs:
            folder = tmp_path_factory.mktemp("whole")
            done = _train(_write(folder, run))
            assert done.exit_code == 0, done.output[-3000:]
            done_runs[key] = folder / "run"
        return done_runs[key]

    return train


def _stop_and_resume(folder, run, at, sent):
    config = _write(folder, run)
    stopped = run_python(STOPPER, at, int(sent), config)
    assert stopped.returncode in (128 + sent, -sent), stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    resumed = _train(config)
    assert resumed.exit_code == 0, resumed.output[-3000:]
    assert "resumed from" in resumed.output
    return stopped, folder / "run"


def _assert_same_figures(logdir, reference):
    expected = _records(reference)
    # The stop itself is a record of its own; every other record is the uninterrupted run's.
    actual = [r for r in _records(logdir) if "interrupted" not in r]
    assert actual == expected
    assert _scalars(logdir) == _scalars(reference)
    assert read_json(logdir / "final_metrics.json") == read_json(reference / "final_metrics.json")


@pytest.mark.slow
# SIGINT before, on and after a report; SIGTERM (the same handler) on it: each case is two processes.
@pytest.mark.parametrize(("at", "sent"), [
    pytest.param(9, signal.SIGINT, id="before-SIGINT"),
    pytest.param(10, signal.SIGINT, id="on-SIGINT"),
    pytest.param(11, signal.SIGINT, id="after-SIGINT"),
    pytest.param(10, signal.SIGTERM, id="on-SIGTERM"),
])
def test_a_signal_on_before_or_after_a_report_leaves_every_figure_as_uninterrupted(at, sent, tmp_path, uninterrupted):
    # on_nonfinite: stop looks for a stop every update, so the stop lands exactly at `at`.
    run = {**RUN, "on_nonfinite": "stop"}
    stopped, logdir = _stop_and_resume(tmp_path, run, at, sent)
    assert f"interrupted by {signal.Signals(sent).name} at step {at}" in stopped.stderr
    assert {"step": at, "interrupted": signal.Signals(sent).name} in _records(logdir)
    _assert_same_figures(logdir, uninterrupted(run))


@pytest.mark.slow
def test_ctrl_c_landing_on_a_report_by_the_default_stop_check(tmp_path, uninterrupted):
    """The defect of issue 26: the default looks every 10 updates, 10 is a report (print_loss_steps 5)."""
    stopped, logdir = _stop_and_resume(tmp_path, RUN, 7, signal.SIGINT)
    assert "interrupted by SIGINT at step 10" in stopped.stderr
    report = [r for r in read_jsonl(logdir / "metrics.jsonl") if r["step"] == 10 and "loss" in r]
    assert len(report) == 1  # written before the stop, not merged into step 15's
    _assert_same_figures(logdir, uninterrupted(RUN))


@pytest.mark.slow
@pytest.mark.parametrize("at", [10, 13], ids=["on", "after-checkpoint"])
def test_kill_9_then_resume_leaves_every_figure_as_uninterrupted(at, tmp_path, uninterrupted):
    """Resumed from the last checkpoint (every 4): the killed run's later records and events are dropped."""
    _, logdir = _stop_and_resume(tmp_path, RUN, at, signal.SIGKILL)
    _assert_same_figures(logdir, uninterrupted(RUN))
    assert json.loads((logdir / "metrics.jsonl").read_text().splitlines()[-1])["step"] == RUN["max_steps"]
