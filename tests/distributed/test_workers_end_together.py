"""Workers of a cluster end together: none exits while a peer still fetches its part of the last collective.

Two real `opt-train train` workers, each started as a cluster launcher starts them (its
own TF_CONFIG, no `--np`), with the chief's link to worker 1 slowed (`SlowLink`): what
the chief sends worker 1 arrives 0.3 s late. A collective ends on worker 1 as soon as it
has the chief's part; the chief's request for worker 1's part is then still on the
way. Before `Backend.leave()`, worker 1 exited right there and the chief failed on its
last all-reduce ("Socket closed"), as it did at random in 1 of ~10 `--np 2 --benchmark`
runs on a loaded machine.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.processes import free_ports, run_tf_workers, tf_config
from tests.distributed.slow_link import SlowLink
from tests.support import read_json

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("opt_train.distributed.tfdist") is None,
                       reason="the tf.distribute backend is not in this checkout"),
]

DELAY = 0.3  # seconds; far longer than a worker takes from its last collective to its exit
BATCH = 16
RUN = f"""\
model: mlp
model_params: {{hidden_units: [8]}}
data: digits
distributed: tf
batch_size_per_gpu: {BATCH}
optimizer: Adam
max_steps: 8
print_loss_steps: 4
save_summaries_steps: null
save_checkpoint_steps: null
eval_steps: null
export: false
rank_timeout_secs: 60
"""


@pytest.mark.parametrize("extra", [["--benchmark"], []], ids=["benchmark", "train"])
def test_the_chief_ends_well_when_its_link_to_a_worker_is_slow(tmp_path, extra):
    config = tmp_path / "run.yaml"
    config.write_text(RUN)
    logdir = tmp_path / "run"
    command = [sys.executable, "-m", "opt_train", "train", "--config", str(config), "--set", f"logdir={logdir}", *extra]
    chief, worker = free_ports(2)
    with SlowLink(worker, DELAY) as link:
        # The chief reaches worker 1 through the link; worker 1 listens on its own port.
        jobs = run_tf_workers(command, tf_configs=[tf_config([chief, link.port], 0), tf_config([chief, worker], 1)])
    for index, (code, output) in enumerate(jobs):
        assert code == 0, f"worker {index}:\n{output[-3000:]}"
    final = read_json(logdir / "final_metrics.json")
    assert final["global_step"] == 8
    if extra:
        # Both workers' samples: the figures are the chief's last all-reduces.
        assert final["benchmark/samples_timed"] == 2 * BATCH * final["benchmark/updates_timed"]
        assert "benchmark:" in jobs[0][1]
    assert "done: step 8" in jobs[0][1]
