"""A `TF_CONFIG` worker whose peers never come up ends after `startup_timeout_secs` naming them, and stops on a signal.

The meeting itself (`opt_train.distributed.startup`) is tested in threads of this process
on real sockets; `opt-train train` as a lone worker is tested as a real process, as a
Kubernetes pod whose peer stays Pending would run it (before: it printed nothing, took
neither SIGTERM nor SIGINT, and only SIGKILL ended it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from opt_train.distributed.cluster import Cluster
from opt_train.distributed.startup import stop_on_signals, wait_for_workers
from opt_train.errors import Interrupted, TrainingFailed
from tests.processes import HOROVOD_INSTALLED, free_ports
from tests.support import REPO, signals_as_a_terminal_leaves_them, unlaunched_environ, write_run

# Far above a lone worker's whole life here (the TensorFlow import and the wait); reaching it means a hang.
HANG_SECONDS = 240


def clusters(count):
    workers = tuple(f"localhost:{port}" for port in free_ports(count))
    return [Cluster(workers, index) for index in range(count)]


def meet(cluster_list, timeout):
    """Each cluster's worker waits in a thread of its own; returns each one's outcome (None or the error)."""
    outcomes = [None] * len(cluster_list)

    def wait(index):
        try:
            wait_for_workers(cluster_list[index], timeout, say=lambda line: None)
        except TrainingFailed as error:
            outcomes[index] = error

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(cluster_list))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_SECONDS)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def test_workers_that_all_come_meet():
    assert meet(clusters(3), 30) == [None, None, None]


def test_worker_0_alone_names_the_others():
    cluster = clusters(3)[0]
    (error,) = meet([cluster], 0.5)
    assert str(error) == (f"worker 0 of 3: never heard from workers 1, 2 ({cluster.workers[1]}, {cluster.workers[2]}) "
                          "within 0.5 s (startup_timeout_secs); nothing was trained")


def test_a_worker_without_worker_0_names_it():
    cluster = clusters(2)[1]
    (error,) = meet([cluster], 0.5)
    assert str(error).startswith(f"worker 1 of 2: never heard from worker 0 ({cluster.workers[0]}) within 0.5 s")


def test_the_workers_that_came_name_the_one_that_did_not():
    first, second, _ = clusters(3)
    errors = meet([first, second], 3.0)
    assert all(f"never heard from worker 2 ({first.workers[2]})" in str(error) for error in errors), errors


def test_worker_0s_port_is_free_again_for_tensorflow():
    cluster_list = clusters(2)
    assert meet(cluster_list, 30) == [None, None]
    import socket

    with socket.create_server(("", int(cluster_list[0].workers[0].rpartition(":")[2]))):
        pass


# The handler of both waits (a TF_CONFIG worker's, a Horovod rank's): each signal's code and line,
# for each noun, in this process; a real lone worker takes SIGTERM below.
@pytest.mark.parametrize("name, number, line", [
    ("worker 0", signal.SIGINT, "worker 0: interrupted by SIGINT while waiting for the other workers to start"),
    ("rank 0", signal.SIGTERM, "rank 0: interrupted by SIGTERM while waiting for the other ranks to start"),
])
def test_a_signal_while_the_workers_meet_is_an_interrupt_naming_it(name, number, line):
    assert threading.current_thread() is threading.main_thread()  # where a process takes its signals
    # SIGINT as a process started from a terminal has it (Python's own handler, not SIG_IGN).
    previous = signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
    try:
        with pytest.raises(Interrupted) as stopped:
            with stop_on_signals(name):
                os.kill(os.getpid(), number)
                time.sleep(HANG_SECONDS)  # the handler raises inside the wait
        assert signal.getsignal(number) in (signal.default_int_handler, signal.SIG_DFL)  # given back
    finally:
        signal.signal(number, previous)
    assert stopped.value.exit_code == 128 + number
    assert str(stopped.value) == f"{line}: nothing trained, nothing saved"


# -- opt-train train as a lone worker, a real process -------------------------------------------


def start_alone(tmp_path, environment, **settings):
    """`opt-train train` of a tiny run with `settings`, in `environment` (a worker's or a rank's)."""
    config = write_run(tmp_path, {"model": "mlp", "model_params": {"hidden_units": [8]}, "data": "digits",
                                  "max_steps": 5, **settings}, "run.yaml")
    return subprocess.Popen(
        [sys.executable, "-m", "opt_train", "train", "--config", str(config)], cwd=REPO,
        env=unlaunched_environ(**environment, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=signals_as_a_terminal_leaves_them,
    )


def lone_worker(tmp_path, timeout_secs):
    """`opt-train train` as worker 0 of a 2-worker TF_CONFIG whose worker 1 never starts."""
    ports = free_ports(2)
    tf_config = {"cluster": {"worker": [f"localhost:{port}" for port in ports]}, "task": {"type": "worker", "index": 0}}
    process = start_alone(tmp_path, {"TF_CONFIG": json.dumps(tf_config)},
                          distributed="tf", startup_timeout_secs=timeout_secs)
    return process, f"localhost:{ports[1]}"


@pytest.mark.slow
def test_a_lone_worker_ends_after_startup_timeout_secs_naming_the_worker_that_never_came(tmp_path):
    process, missing = lone_worker(tmp_path, 3)
    out, err = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 1, out + err
    assert err.strip().splitlines() == [
        f"Error: worker 0 of 2: never heard from worker 1 ({missing}) within 3 s (startup_timeout_secs); "
        "nothing was trained"], err
    assert f"waiting for worker 1 ({missing}) to start, at most 3 s (startup_timeout_secs)" in out
    assert not (tmp_path / "run" / "checkpoints").exists()


# SIGINT goes to the same handler as SIGTERM (stop_on_signals): its own code and line are
# checked in this process (test_a_signal_while_the_workers_meet_is_an_interrupt_naming_it).
@pytest.mark.slow
def test_a_signal_ends_a_lone_worker_while_it_waits(tmp_path):
    number = signal.SIGTERM
    process, missing = lone_worker(tmp_path, 3600)
    # Its line says it waits: the signal lands in the wait, not in the TensorFlow import.
    line = process.stdout.readline()
    assert f"waiting for worker 1 ({missing})" in line, line
    process.send_signal(number)
    out, err = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 128 + number, out + err
    name = signal.Signals(number).name
    assert err.strip().splitlines() == [
        f"worker 0: interrupted by {name} while waiting for the other workers to start: nothing trained, "
        "nothing saved"], err


# -- a Horovod rank started by hand (its rendezvous server and environment as horovodrun makes them) --


@pytest.fixture
def lone_rank(tmp_path):
    """Starts rank 0 of a 2-rank Horovod job whose rank 1 never starts: `start(timeout_secs) -> process`."""
    if not HOROVOD_INSTALLED:
        pytest.skip("Horovod is not installed (bash scripts/install_horovod.sh)")
    from opt_train.distributed.horovod import Rendezvous

    rendezvous = Rendezvous("localhost:2", 2)
    processes = []

    def start(timeout_secs):
        _, _, environment = rendezvous.ranks[0]
        processes.append(start_alone(tmp_path, environment, use_horovod=True, startup_timeout_secs=timeout_secs))
        return processes[-1]

    yield start
    for process in processes:
        process.kill()
    rendezvous.stop()


@pytest.mark.slow
@pytest.mark.horovod
def test_a_lone_horovod_rank_ends_after_startup_timeout_secs_naming_the_rank_that_never_came(lone_rank):
    process = lone_rank(3)
    out, err = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 1, out + err
    assert err.strip().splitlines()[-1] == (
        "Error: rank 0 of 2: never heard from rank 1 within 3 s (startup_timeout_secs); nothing was trained"), err
    assert "rank 0 of 2: waiting for rank 1 to start, at most 3 s (startup_timeout_secs)" in out


# SIGTERM while a lone Horovod rank waits: the same stop_on_signals handler as a TF_CONFIG
# worker's (test_a_signal_ends_a_lone_worker_while_it_waits, a real process), its "rank 0" line
# in test_a_signal_while_the_workers_meet_is_an_interrupt_naming_it; the Horovod wait itself is
# the test above.
