"""`opt-train train --np 2 --hosts localhost:1,OTHER:1`: a worker started over real ssh on a second host.

The second host is a network namespace of this machine with an address of its own on a
veth pair, running a throwaway sshd (Debian's openssh-server, scripts/install_sshd.sh)
on a non-default port with a key made for the test: the launcher reaches it with
`--ssh-port` and `--ssh-identity-file`, as horovodrun would. The job is one run of 2
tf.distribute workers, one on each side of the pair: it must equal one process on the
doubled batch, as every distributed form must.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.distributed import horovod_train_worker as worker
from tests.e2e.test_equal_to_one_process import LOSS_TOLERANCE, TOLERANCE, checkpoint_values, reported_losses
from tests.support import REPO

pytestmark = pytest.mark.slow

SSHD = "/usr/sbin/sshd"
SSH_PORT = 2222  # not ssh's default: --ssh-port must carry it


def _ip(*args, namespace=None):
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return subprocess.run([*prefix, "ip", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def second_host(tmp_path_factory):
    """(the namespace's address, ssh key path): a host with its own network and an sshd on SSH_PORT."""
    if not os.path.exists(SSHD) or shutil.which("ssh") is None:
        pytest.skip("no sshd/ssh (bash scripts/install_sshd.sh installs them)")
    folder = tmp_path_factory.mktemp("second-host")
    tag = f"ot{os.getpid() % 100000}"
    namespace, outside, inside = tag, f"{tag}a", f"{tag}b"
    subnet = f"10.213.{os.getpid() % 250}"
    if _ip("netns", "add", namespace).returncode != 0:
        pytest.skip("network namespaces are not available here (needs CAP_NET_ADMIN)")
    sshd = None
    try:
        for args, where in [
            (("link", "add", outside, "type", "veth", "peer", "name", inside), None),
            (("link", "set", inside, "netns", namespace), None),
            (("addr", "add", f"{subnet}.1/24", "dev", outside), None),
            (("link", "set", outside, "up"), None),
            (("addr", "add", f"{subnet}.2/24", "dev", inside), namespace),
            (("link", "set", inside, "up"), namespace),
            (("link", "set", "lo", "up"), namespace),
            (("route", "add", "default", "via", f"{subnet}.1"), namespace),
        ]:
            done = _ip(*args, namespace=where)
            assert done.returncode == 0, (args, done.stderr)
        key, host_key = folder / "id_ed25519", folder / "host_ed25519"
        for path in (key, host_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
        (folder / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        config = folder / "sshd_config"
        config.write_text("\n".join([
            f"Port {SSH_PORT}", f"ListenAddress {subnet}.2", f"HostKey {host_key}",
            f"AuthorizedKeysFile {folder / 'authorized_keys'}", "PasswordAuthentication no",
            "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no", f"PidFile {folder / 'sshd.pid'}",
        ]) + "\n")
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        sshd = subprocess.Popen(["ip", "netns", "exec", namespace, SSHD, "-D", "-e", "-f", str(config)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-p", str(SSH_PORT),
                              "-i", str(key), f"{subnet}.2", "true"], capture_output=True).returncode != 0:
            assert sshd.poll() is None and time.monotonic() < deadline, sshd.stdout.read() if sshd.poll() else "sshd"
            time.sleep(0.5)
        yield f"{subnet}.2", key
    finally:
        if sshd is not None:
            sshd.terminate()
            sshd.wait(timeout=30)
        _ip("netns", "del", namespace)
        _ip("link", "del", outside)


def _train(config, *extra):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    for variable in ("TF_CONFIG", "OPT_TRAIN_LAUNCHED"):
        env.pop(variable, None)
    # `python -m opt_train` from the checkout: the remote worker (cd'ed there by the launcher) imports it too.
    return subprocess.run([sys.executable, "-m", "opt_train", "train", "--config", str(config), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _config(folder, backend):
    """The equality suite's `plain` run: 2 workers x 16 (`workers`), or one process x 32 (None)."""
    logdir = folder / (backend or "single")
    return worker.write_config(worker.config_payload("plain", backend, logdir), folder / f"{logdir.name}.yaml")


def test_a_worker_on_another_host_over_ssh_trains_the_run_of_one_process_on_the_doubled_batch(
        second_host, tmp_path, cli):
    address, key = second_host
    job = _train(_config(tmp_path, "workers"), "--np", "2", "--hosts", f"localhost:1,{address}:1",
                 "--ssh-port", str(SSH_PORT), "--ssh-identity-file", str(key))
    # Worker 1 listened on the other host's address (port 8888 there): the job could only
    # train with a worker behind it, started by ssh inside the namespace.
    assert job.returncode == 0, job.stdout + job.stderr
    assert f"done: step {worker.STEPS}" in job.stdout, job.stdout
    # The reference trains in this process: what it is compared on is what it wrote.
    single = cli("train", "--config", _config(tmp_path, None))
    assert single.exit_code == 0, single.output[-4000:]
    both, one = checkpoint_values(tmp_path / "workers"), checkpoint_values(tmp_path / "single")
    assert sorted(both) == sorted(one) and any(k.startswith("model_variables/") for k in one)
    for name, value in one.items():
        np.testing.assert_allclose(both[name], value, rtol=0, atol=TOLERANCE, err_msg=name)
    losses, expected = reported_losses(tmp_path / "workers"), reported_losses(tmp_path / "single")
    assert sorted(losses) == sorted(expected)
    for step, loss in expected.items():
        assert losses[step] == pytest.approx(loss, rel=0, abs=LOSS_TOLERANCE), step


def test_ssh_options_without_hosts_are_refused(tmp_path, cli):
    result = cli("train", "--config", _config(tmp_path, "workers"), "--ssh-port", "2222")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == "Error: --ssh-port and --ssh-identity-file need --hosts"
