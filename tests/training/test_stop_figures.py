"""Every figure a run reports is a function of the step alone, whatever SIGINT, SIGTERM or kill -9 came between.

A run is stopped by a real signal (sent to itself when its train op reaches a given
step, so the stop lands exactly on, one before or one after a reporting step), then
resumed by the same command; every record of metrics.jsonl, every TensorBoard scalar
(as TensorBoard itself reads the event files) and final_metrics.json must equal an
uninterrupted run's.

Only the stopped runs need a process apart from the tests', and all seven share one
TensorFlow import: each killed run is a child process forked once TensorFlow is imported
(before this process runs anything), the five signalled ones run in the process itself (a
stop ends `main` with SystemExit, and the next run starts in the same interpreter). The
resumes and the uninterrupted runs are `opt-train train` in this process, as
tests/e2e/test_resume.py resumes; a resumed run ends with the uninterrupted run's figures
and every tensor of its checkpoint.
"""

import json
import signal

import numpy as np
import pytest
import tensorflow as tf

from tests.support import END_WITHOUT_TEARDOWN, checkpoint_tensors, read_json, read_jsonl, run_python, write_run

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
# (conftest.py: no_export); the stopped runs never reach it. One worker runs them all, so the
# signalled runs' process and the uninterrupted runs are made once.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_export")]

# Timing depends on the machine, not the step.
TIMED = ("samples_per_sec",)

# `opt-train train` runs one after another, each sending itself its signal once its train op
# reaches its update `at`: the real handler (or, for SIGKILL, the kernel) takes it from there.
# A SIGKILLed run is a child process of its own, forked when it comes (the killed runs come
# first: nothing of TensorFlow's runtime has started in this process yet), its code the
# child's. Prints each run's exit code and what it wrote to stderr, as a JSON line.
STOPPER = """
import contextlib, io, json, os, signal, sys
from opt_train import quiet
quiet.import_tensorflow()
from opt_train.training import loop
from opt_train.cli.main import main
stop = {}
count = loop.Session._count_losses
def count_and_stop(self):
    count(self)
    if not getattr(self, "_sent", False) and int(self.run.train_op.global_step.numpy()) >= stop["at"]:
        self._sent = True
        os.kill(os.getpid(), stop["number"])
loop.Session._count_losses = count_and_stop
for at, number, config in json.loads(sys.argv[1]):
    stop.update(at=at, number=number)
    if number == signal.SIGKILL:
        child = os.fork()
        if child == 0:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            with contextlib.suppress(BaseException):
                main(["train", "--config", config])
            os._exit(0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), "stderr": ""}), flush=True)
        continue
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            main(["train", "--config", config])
            code = 0
        except SystemExit as end:
            code = end.code
    print(json.dumps({"code": code, "stderr": stderr.getvalue()}), flush=True)
""" + END_WITHOUT_TEARDOWN

# The signalled cases: (id, at, signal, on_nonfinite: stop). SIGINT before, on and after a
# report, SIGTERM (the same handler) on it, each with a stop check every update (on_nonfinite:
# stop), so the stop lands exactly at `at`; and Ctrl-C under the default stop check.
SIGNALLED = {
    "before-SIGINT": (9, signal.SIGINT, True),
    "on-SIGINT": (10, signal.SIGINT, True),
    "after-SIGINT": (11, signal.SIGINT, True),
    "on-SIGTERM": (10, signal.SIGTERM, True),
    "ctrl-c-default-check": (7, signal.SIGINT, False),
}
# The SIGKILLed cases (id: at), of RUN: on a report, and one after a checkpoint.
KILLED = {"on": 10, "after-checkpoint": 13}


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
            done = _train(write_run(folder, run))
            assert done.exit_code == 0, done.output[-3000:]
            done_runs[key] = folder / "run"
        return done_runs[key]

    return train


def _case_run(stop_every_update):
    return {**RUN, "on_nonfinite": "stop"} if stop_every_update else RUN


@pytest.fixture(scope="module")
def signalled(tmp_path_factory):
    """{case: (how its stopped run ended, its folder)} for KILLED and SIGNALLED, all stopped in one fresh process."""
    cases = {**{case: (at, signal.SIGKILL, False) for case, at in KILLED.items()}, **SIGNALLED}
    folders = {case: tmp_path_factory.mktemp(case) for case in cases}
    plan = [[at, int(sent), str(write_run(folders[case], _case_run(every)))]
            for case, (at, sent, every) in cases.items()]
    stopped = run_python(STOPPER, json.dumps(plan))
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    ended = [json.loads(line) for line in stopped.stdout.splitlines() if line.startswith("{")]
    return {case: (end, folders[case]) for case, end in zip(cases, ended, strict=True)}


def _resume(folder):
    resumed = _train(folder / "config.yaml")
    assert resumed.exit_code == 0, resumed.output[-3000:]
    assert "resumed from" in resumed.output
    return folder / "run"


def _assert_same_figures(logdir, reference):
    expected = _records(reference)
    # The stop itself is a record of its own; every other record is the uninterrupted run's.
    actual = [r for r in _records(logdir) if "interrupted" not in r]
    assert actual == expected
    assert _scalars(logdir) == _scalars(reference)
    assert read_json(logdir / "final_metrics.json") == read_json(reference / "final_metrics.json")
    expected, actual = checkpoint_tensors(reference), checkpoint_tensors(logdir)
    assert expected.keys() == actual.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


@pytest.mark.parametrize("case", ["before-SIGINT", "on-SIGINT", "after-SIGINT", "on-SIGTERM"])
def test_a_signal_on_before_or_after_a_report_leaves_every_figure_as_uninterrupted(case, signalled, uninterrupted):
    at, sent, _ = SIGNALLED[case]
    stopped, folder = signalled[case]
    assert stopped["code"] == 128 + sent, stopped["stderr"][-3000:]
    assert "Traceback" not in stopped["stderr"]
    assert f"interrupted by {signal.Signals(sent).name} at step {at}" in stopped["stderr"]
    logdir = _resume(folder)
    assert {"step": at, "interrupted": signal.Signals(sent).name} in _records(logdir)
    _assert_same_figures(logdir, uninterrupted(_case_run(True)))


def test_ctrl_c_landing_on_a_report_by_the_default_stop_check(signalled, uninterrupted):
    """The defect of issue 26: the default looks every 10 updates, 10 is a report (print_loss_steps 5)."""
    stopped, folder = signalled["ctrl-c-default-check"]
    assert stopped["code"] == 130, stopped["stderr"][-3000:]
    assert "interrupted by SIGINT at step 10" in stopped["stderr"]
    logdir = _resume(folder)
    report = [r for r in read_jsonl(logdir / "metrics.jsonl") if r["step"] == 10 and "loss" in r]
    assert len(report) == 1  # written before the stop, not merged into step 15's
    _assert_same_figures(logdir, uninterrupted(RUN))


@pytest.mark.parametrize("case", list(KILLED))
def test_kill_9_then_resume_leaves_every_figure_as_uninterrupted(case, signalled, uninterrupted):
    """Resumed from the last checkpoint (every 4): the killed run's later records and events are dropped."""
    killed, folder = signalled[case]
    assert killed["code"] == -signal.SIGKILL
    logdir = _resume(folder)
    _assert_same_figures(logdir, uninterrupted(RUN))
    assert json.loads((logdir / "metrics.jsonl").read_text().splitlines()[-1])["step"] == RUN["max_steps"]
