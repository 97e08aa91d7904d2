"""A resume's restart sign in the event files, read back with TensorBoard's own accumulator.

The killed run's event file is renamed to sort after any file this process makes in the
same second (pid 99999999 is above every Linux pid_max), dated a second ahead: a resume
that does not wait for a later second writes its sign into a file TensorBoard reads
first, and the killed run's points after the restored step come back (the CI failure
of test_stop_figures' kill -9 case, when the resume fell in the killed run's second).
"""

import os
import socket
import time

import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_accumulator as accumulator

from opt_train.training.reporting import Reporter


def _losses(folder):
    events = accumulator.EventAccumulator(str(folder), size_guidance={"tensors": 0})
    events.Reload()
    return [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events.Tensors("loss")]


def _killed_run(logdir, steps, dated):
    """A run's event file with `loss` = step at `steps`, renamed as if made at second `dated`."""
    killed = Reporter(str(logdir))
    for step in steps:
        killed.summaries(step, {"loss": float(step)})
    killed.close()
    (made,) = os.listdir(logdir / "train")
    renamed = f"events.out.tfevents.{dated}.{socket.gethostname()}.99999999.0.v2"
    os.rename(logdir / "train" / made, logdir / "train" / renamed)


def _resume_at(logdir, step, steps):
    resumed = Reporter(str(logdir))
    notes = resumed.resume(step)
    for later in steps:
        resumed.summaries(later, {"loss": 10.0 * later})
    resumed.close()
    return notes


def test_a_resume_in_the_killed_runs_second_still_purges_its_later_points(tmp_path):
    _killed_run(tmp_path, range(1, 7), dated=int(time.time()) + 1)
    assert _resume_at(tmp_path, 3, range(4, 7)) == []
    assert _losses(tmp_path / "train") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]


def test_an_event_file_dated_far_ahead_is_named_not_waited_for(tmp_path):
    """Another host's clock, a minute ahead: the resume says so instead of waiting for it."""
    _killed_run(tmp_path, range(1, 4), dated=int(time.time()) + 60)
    (note,) = _resume_at(tmp_path, 2, [3])
    assert note.startswith(f"{tmp_path / 'train'}: an event file is dated ")
    assert "ahead of this machine's clock" in note and "after step 2" in note
