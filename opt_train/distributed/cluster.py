"""Reads the cluster this process is a worker of from its environment (`TF_CONFIG` or SLURM), as TF's resolvers do.

TF-free. The rules are those of TensorFlow's own cluster resolvers, read from their
source (TF 2.21, `tensorflow/python/distribute/cluster_resolver/` and
`multi_worker_util.py`), so that a job a cluster launcher starts for TensorFlow is
the job opt-train joins:

- `TF_CONFIG` (`TFConfigClusterResolver`): JSON `{"cluster": {"chief": [...],
  "worker": [...]}, "task": {"type": "worker", "index": 1}}`, what Kubernetes' TFJob,
  Ray Train, SageMaker and Vertex AI set for each worker. The chief, when there is one,
  is worker 0 and the workers follow it (`id_in_cluster`); without a chief, worker 0
  is the chief (`is_chief`). A `TF_CONFIG` without a `cluster` is no cluster.
- SLURM (`SlurmClusterResolver`), read inside an `srun` step only (the batch script
  itself sees `SLURM_NTASKS` too but is one process): `SLURM_PROCID` is the task,
  `SLURM_STEP_NUM_TASKS` the number of tasks, `SLURM_STEP_NODELIST` the hosts in
  SLURM's compressed syntax (`node[01-03,07]`), `SLURM_STEP_TASKS_PER_NODE` how many
  tasks each host runs (`2(x3),1`). Hosts are taken in sorted order, the tasks of a
  host on ports 8888, 8889, ... (TF's `port_base` rule), and task i is the i-th
  address of that list. TF also sets CUDA_VISIBLE_DEVICES per task; here the
  backend places devices (`Cluster.local_index`, `local_size`).

`TF_CONFIG` wins when both are present, as in TensorFlow (MultiWorkerMirroredStrategy
reads `TF_CONFIG`). A malformed environment is a `ClusterError` naming the variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

from opt_train.errors import ParamError

SLURM_PORT_BASE = 8888  # SlurmClusterResolver's default port_base
# The job types of a MultiWorkerMirroredStrategy cluster; TF also knows "ps"
# (ParameterServerStrategy) and "evaluator" (a side-car evaluator), which opt-train has not.
WORKER_JOBS = ("chief", "worker")


class ClusterError(ParamError):
    """The cluster environment is malformed: `key` names the variable (`TF_CONFIG`, `SLURM_STEP_NODELIST`).

    `code`: `wrong_type` for what cannot be read, `out_of_range` for a task index past
    the cluster, `conflict` for variables that disagree.
    """

    def __init__(self, variable, message, value=None, code="wrong_type"):
        shown = value if value is None or len(str(value)) <= 200 else str(value)[:200] + "..."
        text = f"{variable}: {message}" + (f". Received: {shown!r}" if value is not None else "")
        super().__init__(None, code, message, value, key=variable, text=text)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The workers of one job and which of them this process is.

    `workers`: every worker's "host:port", in worker order (the chief first);
    `task_index`: this process's place in `workers`; `source`: where it was read
    (`TF_CONFIG`, `SLURM`, or `launcher`); `task_type` and `task_id` are the
    `TF_CONFIG` task (`worker` / `chief` and its index in that job).
    """

    workers: tuple
    task_index: int
    source: str = "TF_CONFIG"
    task_type: str = "worker"
    task_id: int = 0
    jobs: dict = dataclasses.field(default=None, compare=False, repr=False)
    rpc_layer: str | None = None

    @property
    def num_workers(self):
        return len(self.workers)

    @property
    def is_chief(self):
        return self.task_index == 0

    @property
    def address(self):
        return self.workers[self.task_index]

    @property
    def local_index(self):
        """This worker's place among the workers on its own host (0 for the first)."""
        host = _host(self.address)
        return sum(1 for address in self.workers[: self.task_index] if _host(address) == host)

    @property
    def local_size(self):
        """How many workers run on this worker's host."""
        host = _host(self.address)
        return sum(1 for address in self.workers if _host(address) == host)

    def tf_config(self):
        """The `TF_CONFIG` dict TensorFlow reads for this worker (json.dumps it into the environment)."""
        jobs = self.jobs if self.jobs is not None else {"worker": list(self.workers)}
        config = {"cluster": {job: list(tasks) for job, tasks in jobs.items()},
                  "task": {"type": self.task_type, "index": self.task_id}}
        if self.rpc_layer:
            config["rpc_layer"] = self.rpc_layer
        return config


def cluster_from_environment(environ=None):
    """The `Cluster` of this process from `TF_CONFIG`, else from SLURM's `srun` step; None when neither.

    Raises `ClusterError` for a `TF_CONFIG` or SLURM environment that cannot be read.
    """
    environ = os.environ if environ is None else environ
    text = environ.get("TF_CONFIG", "")
    if text.strip():
        cluster = from_tf_config(text)
        if cluster is not None:
            return cluster
    if environ.get("SLURM_PROCID") is not None and environ.get("SLURM_STEP_NUM_TASKS") is not None:
        return from_slurm(environ)
    return None


# -- TF_CONFIG -------------------------------------------------------------------------------


def from_tf_config(text):
    """The `Cluster` a `TF_CONFIG` JSON text describes; None when it has no `cluster` (TF: no cluster)."""
    try:
        config = json.loads(text)
    except ValueError as error:
        raise ClusterError("TF_CONFIG", f"is not JSON ({error})", text) from None
    if not isinstance(config, dict):
        raise ClusterError("TF_CONFIG", "must be a JSON object with `cluster` and `task`", text)
    jobs = config.get("cluster")
    if jobs is None or jobs == {}:
        return None
    if not isinstance(jobs, dict):
        raise ClusterError("TF_CONFIG", "`cluster` must map job names to lists of host:port", jobs)
    for job, tasks in jobs.items():
        if job not in WORKER_JOBS:
            raise ClusterError(
                "TF_CONFIG", f"has a {job!r} job: opt-train's tf backend is MultiWorkerMirroredStrategy, "
                "whose cluster has only `chief` and `worker` jobs", job)
        if not isinstance(tasks, list) or not tasks:
            raise ClusterError("TF_CONFIG", f"`cluster.{job}` must be a non-empty list of host:port", tasks)
        for address in tasks:
            _check_address("TF_CONFIG", f"cluster.{job}", address)
    if len(jobs.get("chief", [])) > 1:
        raise ClusterError("TF_CONFIG", "there must be at most one `chief`", jobs["chief"], code="conflict")
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ClusterError("TF_CONFIG", "`task` must say which worker this process is: "
                           '{"type": "worker", "index": N}', task)
    task_type, index = task["type"], task["index"]
    if task_type not in jobs:
        raise ClusterError("TF_CONFIG", f"`task.type` {task_type!r} is not a job of `cluster` "
                           f"({', '.join(jobs)})", task_type)
    # TF reads the index with int(): "1" is 1.
    if isinstance(index, bool) or not ((isinstance(index, int) and index >= 0)
                                       or (isinstance(index, str) and index.isdigit())):
        raise ClusterError("TF_CONFIG", "`task.index` must be a whole number", index)
    index = int(index)
    if index >= len(jobs[task_type]):
        raise ClusterError("TF_CONFIG", f"`task.index` {index} is out of range: cluster.{task_type} "
                           f"has {len(jobs[task_type])} task(s)", index, code="out_of_range")
    chiefs = list(jobs.get("chief", []))
    workers = tuple(chiefs + list(jobs.get("worker", [])))
    task_index = 0 if task_type == "chief" else index + len(chiefs)
    rpc_layer = config.get("rpc_layer")
    return Cluster(workers, task_index, "TF_CONFIG", str(task_type), index,
                   jobs={job: list(jobs[job]) for job in WORKER_JOBS if job in jobs},
                   rpc_layer=rpc_layer if isinstance(rpc_layer, str) else None)


def _check_address(variable, where, address):
    if not isinstance(address, str):
        raise ClusterError(variable, f"`{where}` holds {address!r}, not a host:port string", address)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(variable, f"`{where}`: {address!r} is not host:port", address)


def _host(address):
    return address.rpartition(":")[0]


# -- SLURM -----------------------------------------------------------------------------------


def from_slurm(environ, port_base=SLURM_PORT_BASE):
    """The `Cluster` of an `srun` step, by SlurmClusterResolver's rules (see the module docstring)."""
    rank = _slurm_int(environ, "SLURM_PROCID")
    tasks = _slurm_int(environ, "SLURM_STEP_NUM_TASKS")
    nodelist_name = "SLURM_STEP_NODELIST" if environ.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = expand_hostlist(environ.get(nodelist_name, ""), nodelist_name)
    per_node_name = ("SLURM_STEP_TASKS_PER_NODE" if environ.get("SLURM_STEP_TASKS_PER_NODE")
                     else "SLURM_TASKS_PER_NODE")
    per_node = expand_tasks_per_node(environ.get(per_node_name, ""), per_node_name)
    if len(per_node) != len(hosts):
        raise ClusterError(per_node_name, f"gives {len(per_node)} host(s) but {nodelist_name} lists "
                           f"{len(hosts)}", environ.get(per_node_name), code="conflict")
    counts = dict(zip(hosts, per_node))
    if sum(counts.values()) != tasks:
        raise ClusterError("SLURM_STEP_NUM_TASKS", f"is {tasks} but {per_node_name} places "
                           f"{sum(counts.values())} task(s)", tasks, code="conflict")
    if not 0 <= rank < tasks:
        raise ClusterError("SLURM_PROCID", f"must be in [0, {tasks})", rank, code="out_of_range")
    workers = tuple(f"{host}:{port_base + offset}" for host, count in sorted(counts.items())
                    for offset in range(count))
    return Cluster(workers, rank, "SLURM", "worker", rank)


def _slurm_int(environ, name):
    value = environ.get(name, "")
    if not value.strip().isdigit():
        raise ClusterError(name, "must be a whole number", value)
    return int(value)


def expand_hostlist(text, variable="SLURM_STEP_NODELIST"):
    """SLURM's compressed host list as host names, in order: `n[1-2],m5,o[08-10]` -> n1 n2 m5 o08 o09 o10.

    Ranges keep the width of their first number (`[08-10]`); a host may hold several
    bracket groups (`r[1-2]n[1-2]`) and text after them (`n[1-2]-ib`).
    """
    hosts = []
    for part in _split_outside_brackets(text, variable):
        pieces = re.split(r"(\[[^\]]*\])", part)
        expanded = [""]
        for piece in pieces:
            if piece.startswith("["):
                values = _expand_ranges(piece[1:-1], text, variable)
                expanded = [head + value for head in expanded for value in values]
            elif "[" in piece or "]" in piece:
                raise ClusterError(variable, "has an unbalanced bracket", text)
            else:
                expanded = [head + piece for head in expanded]
        hosts.extend(expanded)
    if not hosts:
        raise ClusterError(variable, "lists no host", text)
    return hosts


def _split_outside_brackets(text, variable):
    parts, current, depth = [], "", 0
    for char in text.strip():
        if char == "[":
            depth += 1
            if depth > 1:
                raise ClusterError(variable, "has nested brackets", text)
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ClusterError(variable, "has an unbalanced bracket", text)
        if char == "," and depth == 0:
            if not current:
                raise ClusterError(variable, "has an empty host name", text)
            parts.append(current)
            current = ""
            continue
        current += char
    if depth:
        raise ClusterError(variable, "has an unbalanced bracket", text)
    if current:
        parts.append(current)
    elif parts:
        raise ClusterError(variable, "has an empty host name", text)
    return parts


def _expand_ranges(inside, text, variable):
    values = []
    for item in inside.split(","):
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ClusterError(variable, f"has a bad range [{inside}]", text)
        high = high if dash else low
        if int(high) < int(low):
            raise ClusterError(variable, f"has a range that runs backwards [{inside}]", text)
        values.extend(str(number).zfill(len(low)) for number in range(int(low), int(high) + 1))
    return values


def expand_tasks_per_node(text, variable="SLURM_STEP_TASKS_PER_NODE"):
    """SLURM's tasks per node, one number per host: `3(x2),2,1` -> [3, 3, 2, 1]."""
    counts = []
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ClusterError(variable, "must be counts like 2(x3),1", text)
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


# -- a cluster for workers opt-train starts itself ----------------------------------------------


def launch_clusters(addresses):
    """One `Cluster` per worker of a job on `addresses` ("host:port", worker 0 the chief), in order."""
    workers = tuple(addresses)
    for address in workers:
        _check_address("--hosts", "worker", address)
    return [Cluster(workers, index, "launcher", "worker", index) for index in range(len(workers))]
