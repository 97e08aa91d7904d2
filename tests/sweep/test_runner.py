"""The sweep's process pool: at most P jobs at once, logs and exit codes, thread variables, stopping on errors."""

import os
import sys
import time

import pytest

from opt_train.sweep.runner import Job, run_jobs, thread_environment


def python_job(tmp_path, name, code, env=None):
    return Job(name, (sys.executable, "-c", code), str(tmp_path / name / "train.log"), env or {})


def test_jobs_run_at_most_parallel_at_once_with_their_logs_and_exit_codes(tmp_path):
    jobs = [python_job(tmp_path, f"j{i}", f"import sys; print('hello {i}'); sys.exit({i})") for i in range(4)]
    running, peak = set(), []

    def started(job):
        running.add(job.name)
        peak.append(len(running))

    def finished(outcome):
        running.discard(outcome.job.name)

    outcomes = run_jobs(jobs, 2, on_start=started, on_finish=finished)
    assert max(peak) <= 2 and len(peak) == 4
    assert sorted((o.job.name, o.exit_code) for o in outcomes) == [("j0", 0), ("j1", 1), ("j2", 2), ("j3", 3)]
    for index in range(4):
        log = (tmp_path / f"j{index}" / "train.log").read_text()
        assert log.startswith("$ ") and f"hello {index}\n" in log


def test_log_start_points_past_earlier_attempts(tmp_path):
    job = python_job(tmp_path, "j", "print('second')")
    os.makedirs(tmp_path / "j")
    (tmp_path / "j" / "train.log").write_text("first attempt\n")
    (outcome,) = run_jobs([job], 1)
    with open(job.log_path, "rb") as handle:
        handle.seek(outcome.log_start)
        assert handle.read().decode() == "second\n"


def test_jobs_see_the_thread_variables():
    assert thread_environment(2, cores=2, environ={}) == {
        "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", "OMP_NUM_THREADS": "1",
    }
    assert thread_environment(3, cores=8, environ={"OMP_NUM_THREADS": "4"}) == {
        "TF_NUM_INTRAOP_THREADS": "2", "TF_NUM_INTEROP_THREADS": "2",
    }
    assert thread_environment(4, cores=2, environ={})["TF_NUM_INTRAOP_THREADS"] == "1"


def test_child_environment_carries_job_variables(tmp_path):
    job = python_job(tmp_path, "j", "import os; print(os.environ['TF_NUM_INTRAOP_THREADS'], os.environ['PYTHONUNBUFFERED'])",
                     env={"TF_NUM_INTRAOP_THREADS": "7"})
    run_jobs([job], 1)
    assert "7 1\n" in open(job.log_path).read()


def test_an_error_while_running_stops_every_child(tmp_path):
    pid_file = tmp_path / "pid"
    sleeper = python_job(tmp_path, "sleeper", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)")
    other = python_job(tmp_path, "other", "pass")

    def started(job):
        if job.name == "other":
            while not pid_file.exists() or not pid_file.read_text():
                time.sleep(0.05)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_jobs([sleeper, other], 2, on_start=started)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_parallel_must_be_positive():
    with pytest.raises(ValueError, match="`parallel` must be >= 1. Received: parallel=0"):
        run_jobs([], 0)


def test_the_pool_wakes_when_a_process_ends_not_at_its_next_look(tmp_path):
    """A trial's end frees its slot at once (a pidfd per process), not at the pool's next look."""
    from opt_train.sweep import runner

    ending = runner._Running(python_job(tmp_path, "ending", "pass"))
    waiting = runner._Running(python_job(tmp_path, "waiting", "import time; time.sleep(600)"))
    try:
        started = time.monotonic()
        runner._wait_for_an_end([waiting, ending], seconds=300)
        assert time.monotonic() - started < 300  # woken by the end, not by the timeout
        assert ending.poll().exit_code == 0 and waiting.poll() is None
    finally:
        waiting.stop()
        waiting.reap()
