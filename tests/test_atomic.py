"""Atomic writes: a private temporary file per write, fsynced, never a fixed name another writer or a symlink shares."""

import os
import threading

import pytest

from opt_train.atomic import read_json, write_json, write_text


def test_a_symlink_planted_at_the_old_fixed_temporary_name_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "config.yaml"
    os.symlink(victim, str(target) + ".tmp")
    write_text(target, "new: 1\n")
    assert victim.read_text() == "keep me"
    assert target.read_text() == "new: 1\n"


def test_concurrent_writers_each_leave_a_whole_file_and_no_temporary(tmp_path):
    target = tmp_path / "final_metrics.json"
    payloads = [{"writer": n, "data": list(range(2000))} for n in range(8)]
    errors = []

    def write(payload):
        try:
            for _ in range(20):
                write_json(target, payload)
        except Exception as error:  # noqa: BLE001 - any failure is the test's failure
            errors.append(error)

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert read_json(target) in payloads
    assert sorted(os.listdir(tmp_path)) == ["final_metrics.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    write_json(target, {"a": 1})

    class Unwritable:
        def __str__(self):
            raise RuntimeError("boom")

    try:
        write_text(target, Unwritable())
    except TypeError:
        pass
    assert read_json(target) == {"a": 1}
    assert sorted(os.listdir(tmp_path)) == ["a.json"]


def _mode_open_gives(folder, name="reference"):
    """The permission bits a plain open() gives a new file under the current umask (the reference)."""
    path = folder / name
    with open(path, "w"):
        pass
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_an_atomic_write_follows_the_umask_as_open_does(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_json(tmp_path / "final_metrics.json", {"a": 1})
        write_text(tmp_path / "config.yaml", "a: 1\n")
        expected = _mode_open_gives(tmp_path)
    finally:
        os.umask(previous)
    assert expected == 0o666 & ~umask
    assert (tmp_path / "final_metrics.json").stat().st_mode & 0o777 == expected
    assert (tmp_path / "config.yaml").stat().st_mode & 0o777 == expected


@pytest.mark.slow  # 4 s on 2 cores
def test_the_files_a_run_leaves_in_its_logdir_follow_the_umask(cli, write_config, tmp_path):
    from tests.support import SMALL_RUN

    config = write_config({**SMALL_RUN, "logdir": str(tmp_path / "run")})
    previous = os.umask(0o027)
    try:
        assert cli("train", "--config", config).exit_code == 0
        expected = _mode_open_gives(tmp_path)
    finally:
        os.umask(previous)
    for name in ("config.yaml", "final_metrics.json", "metrics.jsonl"):
        assert (tmp_path / "run" / name).stat().st_mode & 0o777 == expected, name
