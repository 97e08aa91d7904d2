"""A stand-in tf.distribute worker for the launcher tests: reads and checks its TF_CONFIG, then does what its plan says.

Run by the launcher as `python tf_worker.py OUTDIR PLAN` (PLAN: JSON, worker index ->
action), or in place of `python -m opt_train train` through `launched/sitecustomize.py`.
No TensorFlow: what is tested is the launcher's supervision of real processes.

Started as a Horovod rank instead (HOROVOD_RANK, no TF_CONFIG), it records the rank
and acts the same, `meet` being a plain exit 0: the launcher tests use it to see which
backend `--np` picked.

It writes OUTDIR/worker<index>.json (pid, argv, TF_CONFIG) once started, then:
- `meet` (default): listens on its own TF_CONFIG port and connects to every other
  worker's, so the ports the launcher picked are free here and reach the others;
- `fail`: one progress line, one error line, exit 1 (`fail_after:S`: S seconds later); `exit:N`: exit N;
- `kill` / `stop`: SIGKILL / SIGSTOP itself; `wait`: sleep (the test signals it);
- `kill_before:N` / `stop_before:N`: SIGKILL / SIGSTOP itself while the launcher's OPT_TRAIN_RESTART_COUNT
  is below N, else `meet` (each attempt's record is also kept as worker<index>-attempt<count>.json);
- `peer`: as a worker inside a collective: runs while every other worker does, and once
  one is gone (exited, or killed, by a signal or by the launcher) fails at once, exit 1,
  with the backends' line for it (`names.lost_peer_line`); `lost_peer_first`: fails so at once;
  a worker that fails in a sweep's trial writes its failure record into TF_WORKER_LOGDIR,
  as `opt-train train` does;
- `count_signals`: counts SIGTERM / SIGINT until the first, then writes how many it got.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from opt_train import trial
from opt_train.distributed.names import lost_peer_line

MEET_SECONDS = 60


def check_tf_config():
    """The TF_CONFIG this worker got, checked against what MultiWorkerMirroredStrategy needs."""
    config = json.loads(os.environ["TF_CONFIG"])
    workers = config["cluster"]["worker"]
    assert set(config["cluster"]) == {"worker"}, config
    assert config["task"]["type"] == "worker" and isinstance(config["task"]["index"], int), config
    assert 0 <= config["task"]["index"] < len(workers), config
    assert len(set(workers)) == len(workers), f"two workers share an address: {workers}"
    for address in workers:
        host, _, port = address.rpartition(":")
        assert host and 0 < int(port) < 65536, address
    assert os.environ.get("OPT_TRAIN_LAUNCHED") == "1"
    return config


def meet(workers, index):
    """Listen on this worker's address; connect to every other's; each accepts from all the others."""
    host, _, port = workers[index].rpartition(":")
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, int(port)))
    server.listen(len(workers))
    server.settimeout(MEET_SECONDS)
    deadline = time.monotonic() + MEET_SECONDS
    for other, address in enumerate(workers):
        if other == index:
            continue
        peer_host, _, peer_port = address.rpartition(":")
        while True:
            try:
                with socket.create_connection((peer_host, int(peer_port)), timeout=5) as connection:
                    connection.sendall(str(index).encode())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    heard = set()
    while len(heard) < len(workers) - 1:
        connection, _ = server.accept()
        with connection:
            heard.add(int(connection.recv(16).decode()))
    assert heard == set(range(len(workers))) - {index}, heard


def _gone(pid):
    """Whether process `pid` has ended (no longer in /proc, or a zombie not yet reaped)."""
    from opt_train.distributed.worker_process import process_state  # the launcher's own reading of /proc

    return process_state(pid) in (None, "Z")


def wait_for_a_lost_peer(outdir, index, count):
    """Returns once a worker other than `index` of `count` has ended (each found by its record's pid)."""
    paths = [os.path.join(outdir, f"worker{other}.json") for other in range(count) if other != index]
    while not all(os.path.exists(path) for path in paths):
        time.sleep(0.05)
    pids = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            pids.append(json.load(handle)["pid"])
    while not any(_gone(pid) for pid in pids):
        time.sleep(0.05)


def fail(message):
    """Exits 1 after an error line, with a failure record in a sweep's trial (opt_train/trial.py)."""
    print(f"Error: {message}", file=sys.stderr, flush=True)
    if trial.description() is not None:
        trial.write_failure(os.environ["TF_WORKER_LOGDIR"], 1, "TrainingFailed", message)
    sys.exit(1)


def main(outdir, plan):
    if "TF_CONFIG" not in os.environ and "HOROVOD_RANK" in os.environ:
        assert os.environ.get("OPT_TRAIN_LAUNCHED") == "1"
        config = None
        index = int(os.environ["HOROVOD_RANK"])
        record = {"pid": os.getpid(), "argv": sys.argv, "horovod_rank": index,
                  "horovod_size": int(os.environ["HOROVOD_SIZE"]),
                  "rendezvous_port": os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")}
    else:
        config = check_tf_config()
        index = config["task"]["index"]
        record = {"pid": os.getpid(), "argv": sys.argv, "tf_config": config}
    action = plan.get(str(index), "meet")
    attempt = int(os.environ.get("OPT_TRAIN_RESTART_COUNT", "0"))
    record["restart_count"] = attempt
    if action.startswith(("kill_before:", "stop_before:")):
        action = action.split("_")[0] if attempt < int(action.split(":")[1]) else "meet"
    seen = []
    if action == "count_signals":
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, lambda n, f: seen.append(n))
    path = os.path.join(outdir, f"worker{index}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    with open(os.path.join(outdir, f"worker{index}-attempt{attempt}.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)
    if action == "meet":
        if config is not None:
            meet(config["cluster"]["worker"], index)
        print(f"worker {index} met the others", flush=True)
        sys.exit(0)
    if action.startswith("fail"):  # "fail", or "fail_after:SECONDS"
        time.sleep(float(action.partition(":")[2] or 0))
        print("some progress", flush=True)
        fail("worker-specific trouble")
    if action.startswith("exit:"):
        sys.exit(int(action.split(":")[1]))
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if action in ("peer", "lost_peer_first"):
        # As a collective fails on a lost peer, with the backends' line; "lost_peer_first" ends before
        # the failed worker does, as the launcher may see it when both end within one scheduling slice.
        noun = "worker" if config is not None else "rank"
        if action == "peer":
            count = len(config["cluster"]["worker"]) if config is not None else int(os.environ["HOROVOD_SIZE"])
            wait_for_a_lost_peer(outdir, index, count)
        fail(lost_peer_line(noun, index, "failed or was stopped (its connection broke); the job stopped"))
    if action == "count_signals":
        while not seen:
            time.sleep(0.05)
        time.sleep(1)  # a second signal would arrive meanwhile
        with open(os.path.join(outdir, f"signals{index}"), "w", encoding="utf-8") as handle:
            handle.write(str(len(seen)))
        sys.exit(128 + seen[0])
    time.sleep(600)  # "wait": until the test or the launcher ends it


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
