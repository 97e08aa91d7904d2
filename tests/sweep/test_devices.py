"""Trials on devices: which GPUs a sweep worker finds, each running trial's own block of them through
CUDA_VISIBLE_DEVICES (seen by the trial process itself), and the refusals of --gpus and --parallel.

A real trial on a GPU this machine lacks: tests/sweep/test_heartbeats.py, beside the uninterrupted real trial it
is compared with.
"""

import os
import traceback

import pytest

from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from opt_train.sweep.devices import GpuPool, find_gpus
from tests.support import CONFIGS, read_json
from tests.sweep.fake_plan import running

# Writes the CUDA_VISIBLE_DEVICES it was started with, then waits until every trial of the sweep has
# written its own: a trial that did not run at the same time as the others never sees them all and fails.
BARRIER_TRAINER = """
import glob, json, os, sys, time
sets = dict(a.split("=", 1) for a in sys.argv[sys.argv.index("train") + 1:] if "=" in a)
logdir = sets["logdir"]
os.makedirs(logdir, exist_ok=True)
json.dump({"seen": os.environ.get("CUDA_VISIBLE_DEVICES")}, open(os.path.join(logdir, "env.json"), "w"))
expected = int(os.environ["BARRIER_SIZE"])
deadline = time.monotonic() + 120
while len(glob.glob(os.path.join(os.path.dirname(logdir), "trial-*", "env.json"))) < expected:
    if time.monotonic() > deadline:
        sys.exit("the other trials never ran alongside this one")
    time.sleep(0.05)
json.dump({"eval/accuracy": float(sets["optimizer_params.learning_rate"]), "global_step": 1},
          open(os.path.join(logdir, "final_metrics.json"), "w"))
"""


def fake_plan(tmp_path, rates, overrides=(), np=1):
    script = tmp_path / "barrier_train.py"
    script.write_text(BARRIER_TRAINER)
    config = str(CONFIGS / "default.yaml")
    grid = ("optimizer_params.learning_rate=" + ",".join(map(str, rates)),)
    plan = plan_sweep([config], list(overrides), load_config([config], list(overrides)),
                      SweepOptions(grids=grid, metric="eval/accuracy"), tmp_path / "out", np=np)
    return running(plan, script)


@pytest.mark.slow  # four processes at once on 2 cores; the fast subset keeps the two-trial case below
def test_four_trials_on_four_gpus_run_at_once_each_on_its_own_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("BARRIER_SIZE", "4")
    plan = fake_plan(tmp_path, [0.1, 0.2, 0.3, 0.4])
    result = run_sweep(plan, 4, gpus=find_gpus("0,1,2,3"))
    assert [row["status"] for row in result.rows] == ["ok"] * 4, result.table
    given = []
    for row in result.rows:
        record = read_json(os.path.join(row["logdir"], "trial.json"))
        seen = read_json(os.path.join(row["logdir"], "env.json"))["seen"]
        assert len(record["gpus"]) == 1 and seen == record["gpus"][0]
        given.append(seen)
    assert sorted(given) == ["0", "1", "2", "3"]


def test_a_trial_of_np_workers_with_num_gpus_takes_a_block_of_both(tmp_path, monkeypatch):
    # num_gpus 2 under tf x --np 2: four GPUs a trial, two trials on eight GPUs, their blocks apart.
    monkeypatch.setenv("BARRIER_SIZE", "2")
    plan = fake_plan(tmp_path, [0.1, 0.2], overrides=["num_gpus=2", "distributed=tf"], np=2)
    assert plan.gpus_per_trial == 4
    result = run_sweep(plan, 2, gpus=find_gpus("0,1,2,3,4,5,6,7"))
    blocks = sorted(read_json(os.path.join(row["logdir"], "env.json"))["seen"] for row in result.rows)
    assert blocks == ["0,1,2,3", "4,5,6,7"]
    assert sorted(",".join(row["gpus"]) for row in result.rows) == blocks


def test_without_gpus_nothing_is_set(tmp_path, monkeypatch):
    monkeypatch.setenv("BARRIER_SIZE", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = run_sweep(fake_plan(tmp_path, [0.1, 0.2]), 2, gpus=((), None))
    for row in result.rows:
        assert read_json(os.path.join(row["logdir"], "env.json"))["seen"] is None
        assert "gpus" not in read_json(os.path.join(row["logdir"], "trial.json"))


def test_gpus_come_from_the_option_then_cuda_visible_devices_then_nvidia_smi(tmp_path, monkeypatch):
    assert find_gpus("2,3", {"CUDA_VISIBLE_DEVICES": "0"}) == (("2", "3"), "--gpus 2,3")
    assert find_gpus(None, {"CUDA_VISIBLE_DEVICES": "1,0"}) == (("1", "0"), "CUDA_VISIBLE_DEVICES=1,0")
    # CUDA reads the list up to its first invalid entry: -1 hides every GPU.
    assert find_gpus(None, {"CUDA_VISIBLE_DEVICES": "-1"}) == ((), None)
    assert find_gpus(None, {"CUDA_VISIBLE_DEVICES": "3,-1,2"})[0] == ("3",)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi (as on this machine)
    assert find_gpus(None, {}) == ((), None)
    # A stand-in for nvidia-smi prints what the real one prints for two GPUs.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0c6e)'\n"
                   "echo 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-7a1b)'\n")
    smi.chmod(0o755)
    assert find_gpus(None, {}) == (("0", "1"), "nvidia-smi -L")


def test_a_pool_hands_out_free_blocks_and_takes_them_back():
    pool = GpuPool(["0", "1", "2", "3"])
    first, second = pool.take(2), pool.take(1)
    assert (first, second, pool.take(2)) == (("0", "1"), ("2",), None)
    pool.give(first)
    assert pool.take(3) == ("0", "1", "3")
    pool.give(("0", "1", "3"))
    # GPUs a trainer this pool did not start still uses (a dead driver's): neither counted nor handed out.
    assert pool.available(held={"0"}) == 2 and pool.take(2, held={"0"}) == ("1", "3")
    assert pool.take(1, held={"0"}) is None and pool.take(1) == ("0",)


def opt_sweep(*args, env=None):
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    result = CliRunner(env=env).invoke(cli, ["sweep", *map(str, args)], prog_name="opt-train")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return result.exit_code, result.stderr


@pytest.mark.parametrize("args, words", [
    (["--gpus", "0,1,2,3", "--parallel", "5"], ["--parallel", "5 trials at once need 5 GPUs", "4 are available",
                                                "--gpus 0,1,2,3", "--parallel 4 or fewer"]),
    (["--gpus", "0,0"], ["--gpus", "names a GPU twice"]),
    (["--gpus", "0,,1"], ["--gpus", "empty entry"]),
    (["--gpus", "cuda:0"], ["--gpus", "'cuda:0' is not a GPU index or UUID"]),
])
def test_bad_gpus_and_too_many_trials_are_one_line_exit_2(tmp_path, args, words):
    code, stderr = opt_sweep("-c", CONFIGS / "default.yaml", "--out", tmp_path / "out",
                             "--grid", "optimizer_params.learning_rate=0.1,0.2", *args)
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert all(word in stderr for word in words), stderr
    assert not (tmp_path / "out").exists()  # refused before the study was made


def test_cuda_visible_devices_of_the_worker_bounds_parallel(tmp_path):
    code, stderr = opt_sweep("-c", CONFIGS / "default.yaml", "--out", tmp_path / "out", "--parallel", "3",
                             "--grid", "optimizer_params.learning_rate=0.1,0.2", env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert code == 2 and "CUDA_VISIBLE_DEVICES=4,5" in stderr and "--parallel 2 or fewer" in stderr, stderr


@pytest.mark.parametrize("args, words", [
    # The block's GPUs bound --parallel as --gpus does, named as the key they came from.
    (["--set", "sweep.gpus=[0, 1, 2, 3]", "--parallel", "5"], ["(sweep.gpus 0,1,2,3)", "--parallel 4 or fewer"]),
    (["--set", "sweep.gpus=0,1,2,3", "--parallel", "5"], ["(sweep.gpus 0,1,2,3)", "--parallel 4 or fewer"]),
    # --gpus wins over the block.
    (["--set", "sweep.gpus=[0, 1, 2, 3]", "--gpus", "0,1", "--parallel", "3"], ["(--gpus 0,1)", "--parallel 2 or fewer"]),
    (["--set", "sweep.gpus=[0, 0]"], ["sweep.gpus: names a GPU twice", "[conflict]"]),
    (["--set", "sweep.heartbeat_secs=0"], ["sweep.heartbeat_secs: ", "[out_of_range]"]),
    (["--set", "sweep.max_trial_retries=-1"], ["sweep.max_trial_retries: ", "[out_of_range]"]),
    (["--set", "sweep.gpus=[0]", "--launcher", "slurm"], ["sweep.gpus: only with --launcher local"]),
])
def test_the_sweep_block_gives_the_workers_gpus_and_heartbeat_settings(tmp_path, args, words):
    code, stderr = opt_sweep("-c", CONFIGS / "default.yaml", "--out", tmp_path / "out",
                             "--grid", "optimizer_params.learning_rate=0.1,0.2", *args, env={"CUDA_VISIBLE_DEVICES": None})
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert all(word in stderr for word in words), stderr


def test_a_worker_setting_is_the_command_lines_else_the_blocks_else_the_default():
    from opt_train.config.sweep_block import HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES, worker_settings

    block = {"gpus": [2, 3], "heartbeat_secs": 30, "max_trial_retries": 0}
    assert worker_settings(None) == (None, HEARTBEAT_SECONDS, MAX_TRIAL_RETRIES)
    assert worker_settings(block) == (("2,3", "sweep.gpus"), 30, 0)
    assert worker_settings(block, "0", 5, 4) == (("0", "--gpus"), 5, 4)
