"""The cluster from the environment: TF_CONFIG and SLURM read as TensorFlow's own cluster resolvers read them."""

from __future__ import annotations

import json

import pytest

from opt_train.distributed.cluster import (
    Cluster, ClusterError, cluster_from_environment, expand_hostlist, expand_tasks_per_node, from_tf_config,
    launch_clusters,
)
from opt_train.errors import ParamError


def tf_config(cluster, task_type="worker", index=0, **extra):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}, **extra})


TWO_WORKERS = {"worker": ["host-a:2222", "host-b:2222"]}
CHIEF_AND_TWO = {"chief": ["boss:2222"], "worker": ["host-a:2222", "host-b:2222"]}


# -- TF_CONFIG, against hard-coded expectations ----------------------------------------------------


def test_a_worker_of_two():
    cluster = cluster_from_environment({"TF_CONFIG": tf_config(TWO_WORKERS, index=1)})
    assert cluster.workers == ("host-a:2222", "host-b:2222")
    assert (cluster.task_index, cluster.num_workers, cluster.is_chief) == (1, 2, False)
    assert cluster.address == "host-b:2222"
    assert cluster.tf_config() == json.loads(tf_config(TWO_WORKERS, index=1))


def test_without_a_chief_worker_0_is_the_chief():
    assert cluster_from_environment({"TF_CONFIG": tf_config(TWO_WORKERS, index=0)}).is_chief


def test_a_chief_is_worker_0_and_the_workers_follow_it():
    chief = cluster_from_environment({"TF_CONFIG": tf_config(CHIEF_AND_TWO, "chief", 0)})
    worker = cluster_from_environment({"TF_CONFIG": tf_config(CHIEF_AND_TWO, "worker", 0)})
    assert chief.workers == worker.workers == ("boss:2222", "host-a:2222", "host-b:2222")
    assert (chief.task_index, chief.is_chief) == (0, True)
    assert (worker.task_index, worker.is_chief, worker.num_workers) == (1, False, 3)
    # What TensorFlow reads back is what the environment said.
    assert worker.tf_config() == json.loads(tf_config(CHIEF_AND_TWO, "worker", 0))


@pytest.mark.parametrize("environ", [{}, {"TF_CONFIG": ""}, {"TF_CONFIG": "{}"}, {"TF_CONFIG": '{"cluster": {}}'},
                                     {"TF_CONFIG": '{"task": {"type": "worker", "index": 0}}'}])
def test_no_cluster_is_none(environ):
    assert cluster_from_environment(environ) is None


def test_an_index_written_as_text_is_read_as_tensorflow_reads_it():
    assert from_tf_config(tf_config(TWO_WORKERS, index="1")).task_index == 1


def test_the_rpc_layer_is_kept():
    assert from_tf_config(tf_config(TWO_WORKERS, rpc_layer="grpc")).tf_config()["rpc_layer"] == "grpc"


OUT_OF_RANGE = "out_of_range"
CONFLICT = "conflict"


@pytest.mark.parametrize("text, words", [
    ("{not json", "is not JSON"),
    ('["worker"]', "must be a JSON object"),
    ('{"cluster": ["a:1"]}', "`cluster` must map job names"),
    (tf_config({"worker": ["a:1"], "ps": ["b:1"]}), "'ps' job"),
    (tf_config({"worker": ["a:1"], "evaluator": ["b:1"]}), "'evaluator' job"),
    (tf_config({"chief": ["a:1", "b:1"]}, "chief"), ("at most one `chief`", CONFLICT)),
    (tf_config({"worker": []}), "non-empty list"),
    (tf_config({"worker": ["a"]}), "'a' is not host:port"),
    (tf_config({"worker": ["a:http"]}), "is not host:port"),
    (tf_config({"worker": [7]}), "not a host:port string"),
    ('{"cluster": {"worker": ["a:1"]}}', "`task` must say which worker"),
    (tf_config(TWO_WORKERS, "chief"), "'chief' is not a job of `cluster`"),
    (tf_config(TWO_WORKERS, index=2), ("`task.index` 2 is out of range: cluster.worker has 2", OUT_OF_RANGE)),
    (tf_config(TWO_WORKERS, index=-1), "`task.index` must be a whole number"),
    (tf_config(TWO_WORKERS, index=True), "`task.index` must be a whole number"),
])
def test_a_malformed_tf_config_is_one_line_naming_it(text, words):
    words, code = words if isinstance(words, tuple) else (words, "wrong_type")
    with pytest.raises(ClusterError) as caught:
        cluster_from_environment({"TF_CONFIG": text})
    error = caught.value
    assert isinstance(error, ParamError) and (error.key, error.code) == ("TF_CONFIG", code)
    assert str(error).startswith("TF_CONFIG: ") and words in str(error)
    assert "\n" not in str(error)


def test_tf_config_wins_over_slurm():
    environ = {"TF_CONFIG": tf_config(TWO_WORKERS, index=1), **slurm_env(0, 4, "n[1-2]", "2(x2)")}
    assert cluster_from_environment(environ).source == "TF_CONFIG"


# -- SLURM, against hard-coded expectations ----------------------------------------------------------


def slurm_env(procid, tasks, nodelist, per_node):
    return {"SLURM_PROCID": str(procid), "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_STEP_NODELIST": nodelist,
            "SLURM_STEP_TASKS_PER_NODE": per_node}


@pytest.mark.parametrize("text, hosts", [
    ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),  # TF's docstring
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
    ("single", ["single"]),
    ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_slurm_host_lists_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["", "n[1-2", "n1-2]", "n[a-b]", "n[3-1]", "a,,b", "n[[1]]", "a,"])
def test_a_bad_host_list_is_an_error_naming_the_variable(text):
    with pytest.raises(ClusterError) as caught:
        expand_hostlist(text, "SLURM_STEP_NODELIST")
    assert caught.value.key == "SLURM_STEP_NODELIST"


def test_tasks_per_node_expand():
    assert expand_tasks_per_node("3(x2),2,1") == [3, 3, 2, 1]
    with pytest.raises(ClusterError):
        expand_tasks_per_node("2x3")


def test_an_srun_step_is_a_cluster_on_sorted_hosts_from_port_8888():
    cluster = cluster_from_environment(slurm_env(3, 4, "node02,node01", "3,1"))
    # Hosts sorted (node01 before node02); a host's tasks on 8888, 8889, ...
    assert cluster.workers == ("node01:8888", "node02:8888", "node02:8889", "node02:8890")
    assert (cluster.task_index, cluster.source, cluster.is_chief) == (3, "SLURM", False)
    assert (cluster.local_index, cluster.local_size) == (2, 3)
    assert cluster.tf_config() == {"cluster": {"worker": list(cluster.workers)}, "task": {"type": "worker", "index": 3}}


def test_the_batch_script_itself_is_no_cluster():
    # sbatch sets SLURM_PROCID and SLURM_NTASKS for the one process running the script; only srun sets SLURM_STEP_*.
    assert cluster_from_environment({"SLURM_PROCID": "0", "SLURM_NTASKS": "4",
                                     "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}) is None


def test_the_job_variables_stand_in_for_missing_step_ones():
    environ = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]",
               "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert cluster_from_environment(environ).workers == ("n1:8888", "n2:8888")


@pytest.mark.parametrize("environ, key, code", [
    (slurm_env(4, 4, "n[1-2]", "2(x2)"), "SLURM_PROCID", OUT_OF_RANGE),
    (slurm_env("x", 4, "n[1-2]", "2(x2)"), "SLURM_PROCID", "wrong_type"),
    (slurm_env(0, 5, "n[1-2]", "2(x2)"), "SLURM_STEP_NUM_TASKS", CONFLICT),
    (slurm_env(0, 4, "n[1-2]", "2,1,1"), "SLURM_STEP_TASKS_PER_NODE", CONFLICT),
    (slurm_env(0, 4, "n[1-2", "2(x2)"), "SLURM_STEP_NODELIST", "wrong_type"),
])
def test_a_bad_srun_environment_names_the_variable(environ, key, code):
    with pytest.raises(ClusterError) as caught:
        cluster_from_environment(environ)
    assert (caught.value.key, caught.value.code) == (key, code)
    assert str(caught.value).startswith(f"{key}: ")


# -- the launcher's clusters ------------------------------------------------------------------------


def test_launched_workers_read_their_tf_config_back():
    addresses = ["localhost:4001", "localhost:4002", "far:8888"]
    clusters = launch_clusters(addresses)
    for index, cluster in enumerate(clusters):
        back = cluster_from_environment({"TF_CONFIG": json.dumps(cluster.tf_config())})
        assert back.workers == tuple(addresses) and back.task_index == index
        assert back.is_chief == (index == 0)
    assert [(c.local_index, c.local_size) for c in clusters] == [(0, 2), (1, 2), (0, 1)]


# -- TensorFlow's own resolvers as the reference ---------------------------------------------------------

TF_CONFIGS = [
    tf_config(TWO_WORKERS, index=0),
    tf_config(TWO_WORKERS, index=1),
    tf_config(CHIEF_AND_TWO, "chief", 0),
    tf_config(CHIEF_AND_TWO, "worker", 1),
    tf_config({"worker": ["a:1", "b:2", "c:3", "d:4"]}, index="3"),
]


@pytest.mark.parametrize("text", TF_CONFIGS)
def test_tf_config_as_tensorflows_resolver_reads_it(text, monkeypatch):
    pytest.importorskip("tensorflow")
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver

    monkeypatch.setenv("TF_CONFIG", text)
    resolver = TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    task_type, task_id = resolver.task_type, resolver.task_id
    mine = cluster_from_environment({"TF_CONFIG": text})
    assert mine.tf_config()["cluster"] == spec.as_dict()
    assert (mine.task_type, mine.task_id) == (task_type, task_id)
    assert mine.task_index == multi_worker_util.id_in_cluster(spec, task_type, task_id)
    assert mine.is_chief == multi_worker_util.is_chief(spec, task_type, task_id)
    assert mine.num_workers == multi_worker_util.worker_count(spec, task_type)
    assert mine.address == spec.task_address(task_type, task_id)


SLURM_STEPS = [
    slurm_env(0, 1, "solo", "1"),
    slurm_env(1, 2, "n[1-2]", "1(x2)"),
    slurm_env(3, 4, "node02,node01", "3,1"),
    slurm_env(5, 8, "gpu[08-11]", "2(x4)"),
    slurm_env(2, 6, "n[1-2],m5,o[3-4,6,7-9]", "1(x3),1,1,1,0(x3)"),
]


@pytest.mark.parametrize("environ", SLURM_STEPS)
def test_an_srun_step_as_tensorflows_slurm_resolver_reads_it(environ, monkeypatch):
    pytest.importorskip("tensorflow")
    from tensorflow.python.distribute.cluster_resolver import SlurmClusterResolver

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    most = max(expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"]))
    # One GPU per task, so TF places every task (it pairs tasks with GPUs); none set here.
    resolver = SlurmClusterResolver(gpus_per_node=most, gpus_per_task=1, auto_set_gpu=False)
    spec = resolver.cluster_spec().as_dict()
    mine = cluster_from_environment(environ)
    assert list(mine.workers) == spec["worker"]
    assert ("worker", mine.task_index) == resolver.get_task_info()


@pytest.mark.parametrize("text", ["n[1-2],m5,o[3-4,6,7-9]", "node[01-03,07]", "gpu[098-101]", "single", "a,b,c"])
def test_host_lists_as_tensorflow_expands_them(text):
    pytest.importorskip("tensorflow")
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm

    assert expand_hostlist(text) == slurm.expand_hostlist(text)
    assert expand_tasks_per_node("3(x2),2,1") == slurm.expand_tasks_per_node("3(x2),2,1")


def test_cluster_is_a_plain_value():
    assert Cluster(("a:1",), 0) == Cluster(("a:1",), 0)
