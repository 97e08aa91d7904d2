"""How the processes of one host share its GPUs and cores (`opt_train.distributed.placement`)."""

from __future__ import annotations

import json
import os

import pytest

from opt_train.distributed.placement import worker_gpus
from opt_train.errors import ParamError
from tests.support import END_WITHOUT_TEARDOWN, run_python


@pytest.mark.parametrize(("found", "per_worker", "local_index", "local_size", "expected"), [
    (4, 4, 0, 1, [0, 1, 2, 3]),  # a pod given its own 4 GPUs
    (8, 2, 0, 1, [0, 1]),  # one worker of 2 replicas on an 8-GPU host: the first two
    (2, 1, 0, 2, [0]),  # --np 2 on a 2-GPU host: one each...
    (2, 1, 1, 2, [1]),  # ... the second worker the second GPU
    (8, 2, 3, 4, [6, 7]),  # 4 workers x 2 replicas on an 8-GPU host: worker 3 takes the last block
    (1, 1, 3, 4, [0]),  # srun --gpus-per-task=1: each task sees its own GPU alone
    (2, 2, 1, 2, [0, 1]),  # the environment gave this worker its 2 GPUs already
])
def test_each_worker_of_a_host_takes_a_block_of_its_own(found, per_worker, local_index, local_size, expected):
    assert worker_gpus(found, per_worker, local_index, local_size) == expected


@pytest.mark.parametrize(("found", "per_worker", "local_size"), [(3, 2, 2), (1, 2, 1), (6, 4, 2)])
def test_too_few_gpus_for_the_workers_of_a_host_is_an_error_at_num_gpus(found, per_worker, local_size):
    with pytest.raises(ParamError) as caught:
        worker_gpus(found, per_worker, 0, local_size)
    assert caught.value.key == "num_gpus" and caught.value.code == "out_of_range"
    assert f"{per_worker * local_size} in all, but this process sees {found}" in str(caught.value)


# One fresh process (the test's own TensorFlow runtime has started, so its pools are fixed);
# the pools are put back to TensorFlow's default (0) before each case, which is allowed until
# the runtime starts.
CPU_SHARE = """
import json, os
from opt_train.distributed.placement import share_cpu_threads
import tensorflow as tf
threading = tf.config.threading

def case(local_size, intra_op_variable=None):
    threading.set_intra_op_parallelism_threads(0)
    threading.set_inter_op_parallelism_threads(0)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        os.environ.pop(name, None)
    if intra_op_variable:
        os.environ["TF_NUM_INTRAOP_THREADS"] = intra_op_variable
    share_cpu_threads(local_size)
    return [threading.get_intra_op_parallelism_threads(), threading.get_inter_op_parallelism_threads()]

print(json.dumps({"shared": case(2), "alone": case(1), "chosen": case(2, "7")}))
""" + END_WITHOUT_TEARDOWN


@pytest.mark.slow
def test_processes_of_one_host_split_its_cores_and_the_users_choice_stays():
    share = max(1, os.cpu_count() // 2)
    done = run_python(CPU_SHARE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "shared": [share, share],
        "alone": [0, 0],  # TensorFlow's own default
        "chosen": [0, share],  # TF_NUM_INTRAOP_THREADS set: the intra-op pool is the user's
    }
