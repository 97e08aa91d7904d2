"""`distributed`, `use_horovod` and `num_gpus` resolved together; `validate` gives train's verdict on the launch."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import yaml

from opt_train.config import ConfigError, load_config
from tests.support import LAUNCH_VARIABLES

OPENSEQ2SEQ = pathlib.Path(__file__).parents[1] / "compat" / "openseq2seq"
LITERAL = sorted(OPENSEQ2SEQ.glob("*.yaml"))
# Launch variables of the machine running the tests must not leak into the verdicts.
CLEAN = dict.fromkeys(LAUNCH_VARIABLES)


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text("max_steps: 10\n" + text)
    return path


def run_cli(*args, env=None):
    from click.testing import CliRunner

    from opt_train.cli.main import cli as group

    return CliRunner().invoke(group, [str(a) for a in args], env={**CLEAN, **(env or {})}, catch_exceptions=False)


@pytest.mark.parametrize("text, expected", [
    ("", ("none", False, None)),
    ("distributed: tf\n", ("tf", False, None)),
    ("distributed: horovod\n", ("horovod", True, None)),
    ("use_horovod: true\n", ("horovod", True, None)),
    ("use_horovod: true\ndistributed: horovod\n", ("horovod", True, None)),
    ("use_horovod: true\ndistributed: none\n", ("horovod", True, None)),
    # OpenSeq2Seq's num_gpus: N replicas in this process, i.e. the tf backend.
    ("num_gpus: 4\n", ("tf", False, 4)),
    ("num_gpus: 1\n", ("none", False, 1)),
    ("distributed: tf\nnum_gpus: 2\n", ("tf", False, 2)),
    # Under Horovod, OpenSeq2Seq ignores num_gpus (one GPU per rank).
    ("use_horovod: true\nnum_gpus: 8\n", ("horovod", True, None)),
    ("distributed: horovod\nnum_gpus: 1\n", ("horovod", True, None)),
])
def test_the_three_keys_resolve_together(tmp_path, text, expected):
    config = load_config([write(tmp_path, text)])
    assert (config.distributed, config.use_horovod, config.num_gpus) == expected


def test_an_override_of_distributed_wins_over_use_horovod_false(tmp_path):
    config = load_config([write(tmp_path, "use_horovod: false\n")], ["distributed=horovod"])
    assert (config.distributed, config.use_horovod) == ("horovod", True)


def test_use_horovod_with_distributed_tf_is_a_conflict_naming_both(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config([write(tmp_path, "use_horovod: true\ndistributed: tf\n")])
    [issue] = caught.value.issues
    assert (issue.key, issue.code, issue.line) == ("distributed", "conflict", 3)
    assert "use_horovod" in issue.message and "distributed" in issue.message


def test_an_unknown_backend_suggests_the_closest(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config([write(tmp_path, "distributed: horovd\n")])
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == ("distributed", "unknown_name")
    assert "did you mean 'horovod'?" in issue.message


def test_num_gpus_under_horovod_is_one_note_naming_it(tmp_path):
    path = write(tmp_path, "use_horovod: true\nnum_gpus: 8\n")
    [note] = [line for line in load_config([path]).notes if "num_gpus" in line]
    assert note.startswith(f"{path}:3: num_gpus: 8 is ignored under Horovod")
    assert not [line for line in load_config([write(tmp_path, "use_horovod: true\nnum_gpus: 1\n", "one.yaml")]).notes
                if "num_gpus" in line]


def test_the_backend_is_not_run_defining():
    from opt_train.config.schema import NOT_RUN_KEYS

    assert {"distributed", "use_horovod"} <= NOT_RUN_KEYS


# -- validate: the literal OpenSeq2Seq configs --------------------------------------------------------


@pytest.mark.parametrize("path", LITERAL, ids=lambda path: path.stem)
def test_every_literal_openseq2seq_config_validates(path):
    """num_gpus used to refuse 14 of these (`horovodrun -np N`); now it means what it meant there."""
    raw = yaml.safe_load(path.read_text())
    result = run_cli("validate", "--config", path)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note:") and "num_gpus" in line]
    figures = yaml.safe_load(result.output.split("# derived")[1])
    batch = raw["batch_size_per_gpu"] * raw.get("iter_size", 1)
    if raw.get("use_horovod"):
        assert figures["distributed"] == "horovod"
        assert len(notes) == (1 if raw["num_gpus"] > 1 else 0), result.output
        assert figures["global_batch"] == batch
    else:
        assert figures["distributed"] == ("tf" if raw["num_gpus"] > 1 else "none")
        assert not notes
        # OpenSeq2Seq's global batch: batch_size_per_gpu on each of num_gpus GPUs.
        assert figures["replicas_per_worker"] == raw["num_gpus"]
        assert figures["global_batch"] == batch * raw["num_gpus"]


def test_the_literal_configs_cover_every_combination():
    seen = {(bool(yaml.safe_load(p.read_text()).get("use_horovod")), yaml.safe_load(p.read_text())["num_gpus"] > 1)
            for p in LITERAL}
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


# -- validate: how the job is started --------------------------------------------------------------


def test_np_with_replicas_gives_the_global_batch(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, "num_gpus: 4\nbatch_size_per_gpu: 8\niter_size: 2\n"),
                     "--np", 2)
    assert result.exit_code == 0, result.output
    figures = yaml.safe_load(result.output.split("# derived")[1])
    # digits: 1,438 train examples, each worker's half in batches of its 4 replicas' 8 (tests/data/test_counts.py
    # holds validate's count equal to train's); 22 micro-batches, iter_size 2 of them an update.
    assert figures == {"distributed": "tf", "world_size": 2, "replicas_per_worker": 4, "global_batch": 2 * 4 * 8 * 2,
                       "steps_per_epoch": 11, "micro_batches_per_epoch": (1438 // 2) // (4 * 8)}


def test_np_without_a_backend_is_tf_workers(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, ""), "--np", 3)
    assert result.exit_code == 0, result.output
    figures = yaml.safe_load(result.output.split("# derived")[1])
    assert (figures["distributed"], figures["world_size"]) == ("tf", 3)


def test_a_tf_config_job_counts_its_workers(tmp_path):
    tf_config = json.dumps({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 2}})
    result = run_cli("validate", "--config", write(tmp_path, "distributed: tf\n"), env={"TF_CONFIG": tf_config})
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output.split("# derived")[1])["world_size"] == 3


@pytest.mark.parametrize("command", ["validate", "train"])
def test_tf_config_workers_without_distributed_tf_are_refused_naming_the_key(tmp_path, command):
    tf_config = json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})
    result = run_cli(command, "--config", write(tmp_path, f"logdir: {tmp_path / 'run'}\n"),
                     env={"TF_CONFIG": tf_config})
    assert result.exit_code == 2, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert "distributed" in line and "TF_CONFIG describes 2 workers" in line and "distributed: tf" in line
    assert not (tmp_path / "run").exists()


def test_an_srun_step_without_distributed_tf_is_refused(tmp_path):
    env = {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n[1-2]",
           "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}
    result = run_cli("validate", "--config", write(tmp_path, ""), env=env)
    assert result.exit_code == 2 and "SLURM step (srun) has 2 workers" in result.output


@pytest.mark.parametrize("command", ["validate", "train"])
def test_a_malformed_tf_config_is_one_line_exit_2(tmp_path, command):
    result = run_cli(command, "--config", write(tmp_path, f"distributed: tf\nlogdir: {tmp_path / 'run'}\n"),
                     env={"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}}'})
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("Error: TF_CONFIG: `task.index` 5 is out of range")
    assert "Traceback" not in result.output


def test_horovodrun_ranks_without_horovod_are_refused_naming_use_horovod(tmp_path):
    result = run_cli("validate", "--config", write(tmp_path, ""), env={"HOROVOD_SIZE": "2", "HOROVOD_RANK": "0"})
    assert result.exit_code == 2
    assert "use_horovod" in result.output and "2 ranks" in result.output


def test_np_with_horovod_not_installed_is_train_s_verdict(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "horovod", None)  # as on a machine without Horovod
    result = run_cli("validate", "--config", write(tmp_path, "distributed: horovod\n"), "--np", 2)
    assert result.exit_code == 2
    assert result.output.startswith("Error: use_horovod: Horovod is not installed")
