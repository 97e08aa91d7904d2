"""A throwaway single-node SLURM cluster (Debian's munged, slurmctld and slurmd) for the SLURM tests.

Started once per session under a temporary folder, on free ports, with a generated
`slurm.conf` naming this host; stopped at the end. The daemons run as root (the
SLURM user of the generated config), so the tests skip, with one line, where this
process is not root or the binaries are absent (`scripts/install_slurm.sh` installs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
COMMANDS = ("srun", "sbatch", "squeue", "scancel", "scontrol", "sinfo", "sacct")
# Task slots on the one node: more than its cores, so a sweep's array tasks and an
# `srun -n 2` step can run at once on a 2-core machine (SlurmdParameters=config_overrides).
NODE_CPUS = 8
START_SECONDS = 30
# A requeued job waits cred_expire seconds before it may start again (slurm.conf(5), AuthInfo),
# 120 by default, and the next backfill pass (30 s by default) starts it: the requeue test
# waited two and a half minutes on these alone. A step's credential is checked the moment
# its tasks launch on this one node, well within 10 s.
CRED_EXPIRE_SECONDS = 10
# The main scheduling loop's period, 60 s by default. A backfill pass (every second here) skips
# a queue where nothing changed, and a start time that arrives (`--begin`) or a requeued job's
# wait that ends is no change: such a job waited for the main loop, up to a minute
# (slurmctld.log: submitted 03:19:53 with --begin=now+15, allocated by "sched:" at 03:20:52).
SCHED_INTERVAL_SECONDS = 1


def _free_port():
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _config(root, host):
    return f"""\
ClusterName=opttrain
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket,cred_expire={CRED_EXPIRE_SECONDS}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
KillWait=20
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval={SCHED_INTERVAL_SECONDS}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
NodeName={host} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


class SlurmCluster:
    """The running cluster: `environ` (SLURM_CONF set) for its commands, and `run(*argv)`."""

    def __init__(self, root, environ):
        self.root, self.environ = root, environ

    def run(self, *argv, check=True):
        return subprocess.run([str(arg) for arg in argv], env=self.environ, capture_output=True, text=True,
                              check=check, timeout=60)

    def queued(self, job_id):
        """The array task ids (or the job id) of `job_id` still pending or running, as squeue lists them."""
        listed = self.run("squeue", "-h", "-r", "-j", job_id, "-o", "%i", check=False).stdout.split()
        return listed


def _start(root, environ):
    host = socket.gethostname().split(".")[0]
    for folder in ("munge", "state", "spool", "log"):
        os.makedirs(os.path.join(root, folder))
    os.chmod(os.path.join(root, "munge"), 0o700)
    key = os.path.join(root, "munge", "munge.key")
    with open(key, "wb") as handle:
        handle.write(os.urandom(1024))
    os.chmod(key, 0o600)
    with open(environ["SLURM_CONF"], "w") as handle:
        handle.write(_config(root, host))
    munge = os.path.join(root, "munge")
    subprocess.run([DAEMONS[0], "--force", f"--key-file={key}", f"--socket={munge}/socket",
                    f"--log-file={root}/log/munged.log", f"--pid-file={munge}/munged.pid",
                    f"--seed-file={munge}/seed"], check=True, capture_output=True, timeout=30)
    subprocess.run([DAEMONS[1], "-i"], env=environ, check=True, capture_output=True, timeout=30)
    subprocess.run([DAEMONS[2]], env=environ, check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=environ, capture_output=True, text=True)
        if state.stdout.strip() == "idle":
            return
        time.sleep(0.5)
    log = ""
    with contextlib.suppress(OSError):
        log = open(os.path.join(root, "log", "slurmctld.log")).read()[-2000:]
    raise RuntimeError(f"the node did not become idle within {START_SECONDS} s: {log}")


def _stop(root):
    for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(open(os.path.join(root, pid_file)).read().strip()), 9)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A `SlurmCluster` of one node (this host), started for the session."""
    missing = [path for path in DAEMONS if not os.path.exists(path)]
    missing += [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        pytest.skip(f"SLURM is not installed ({', '.join(missing)}); scripts/install_slurm.sh installs it")
    if os.geteuid() != 0:
        pytest.skip("the throwaway SLURM cluster runs its daemons as root")
    root = tempfile.mkdtemp(prefix="opt-train-slurm-")
    environ = {**os.environ, "SLURM_CONF": os.path.join(root, "slurm.conf")}
    try:
        _start(root, environ)
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        _stop(root)
        pytest.skip(f"the SLURM daemons did not start: {str(error).splitlines()[0] if str(error) else error}")
    try:
        yield SlurmCluster(root, environ)
    finally:
        _stop(root)
        shutil.rmtree(root, ignore_errors=True)
