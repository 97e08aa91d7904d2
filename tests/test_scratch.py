"""A process's own temporary folders: named by its id, and removed by a later process once that process is gone."""

import os
import tempfile

import pytest

from opt_train import scratch
from tests.support import ended_pid


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_process_that_ended_is_not_alive_and_this_one_and_init_are():
    assert not scratch.alive(ended_pid())
    assert scratch.alive(os.getpid()) and scratch.alive(1)


def test_only_the_folders_of_processes_that_are_gone_are_removed_whole(temporary):
    gone = ended_pid()
    left = temporary / f"kind-{gone}-a1"
    (left / "ckpt_temp").mkdir(parents=True)
    (left / "ckpt_temp" / "part").write_text("data")
    own = scratch.make_folder("kind-")
    kept = {
        os.path.basename(own),
        "kind-1-b2",  # a live process's (init's)
        f"other-{gone}-c3",  # another kind
        "kind-x-d4",  # not a process id
    }
    for name in kept - {os.path.basename(own)}:
        (temporary / name).mkdir()
    (temporary / f"kind-{gone}-file").write_text("")  # not a folder
    kept.add(f"kind-{gone}-file")
    if os.getuid() == 0:  # another user's folder: not this process's to judge
        (temporary / f"kind-{gone}-e5").mkdir()
        os.chown(temporary / f"kind-{gone}-e5", 65534, 65534)
        kept.add(f"kind-{gone}-e5")

    scratch.remove_orphans("kind-")

    assert sorted(os.listdir(temporary)) == sorted(kept)
    assert os.path.basename(own).startswith(f"kind-{os.getpid()}-")
