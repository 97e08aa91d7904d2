"""`opt-train --config x.yaml [--mode ...]` (OpenSeq2Seq's run.py): the same run as `opt-train train`."""

import json

import pytest

from tests.support import main_code, read_json, read_jsonl, run_python

RUN = {
    "model": "mlp",
    "model_params": {"hidden_units": [8]},
    "data": "digits",
    "max_steps": 10,
    "print_loss_steps": 5,
    "eval_steps": 5,
    "save_summaries_steps": None,
}


def test_root_help_and_the_new_commands_leave_tensorflow_out():
    code = main_code(["--help"], ["export", "--help"], ["predict", "--help"],
                     on_exit="assert stop.code == 0, (args, stop.code)")
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert "--mode" in done.stdout and "export" in done.stdout and "predict" in done.stdout


@pytest.mark.slow  # 5 s on 2 cores
def test_root_config_trains_exactly_like_the_train_command(cli, write_config, tmp_path):
    via_train = write_config({**RUN, "logdir": str(tmp_path / "train")}, name="a.yaml")
    via_root = write_config({**RUN, "logdir": str(tmp_path / "root")}, name="b.yaml")
    assert cli("train", "--config", via_train).exit_code == 0
    result = cli("--config", via_root, "--set", "print_loss_steps=5")
    assert result.exit_code == 0, result.output
    trained, rooted = (read_json(tmp_path / name / "final_metrics.json") for name in ("train", "root"))
    assert set(rooted) == set(trained) and any(key.startswith("eval/") for key in rooted)
    for key, value in trained.items():
        assert rooted[key] == pytest.approx(value, rel=1e-6), key
    # --mode eval: the latest checkpoint scores what the run's final evaluation did.
    evaluated = cli("--config", via_root, "--mode", "eval")
    assert evaluated.exit_code == 0, evaluated.output
    scores = json.loads(evaluated.stdout)  # stderr names the checkpoint evaluated
    assert scores["eval/accuracy"] == pytest.approx(rooted["eval/accuracy"], abs=1e-6)
    assert scores["eval/loss"] == pytest.approx(rooted["eval/loss"], rel=1e-6)


def test_mode_train_evaluates_nothing(cli, write_config, tmp_path):
    config = write_config(RUN)
    result = cli("--config", config, "--mode", "train")
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == f"done: step 10; logdir {tmp_path / 'run'}"  # no "eval ;"
    final = read_json(tmp_path / "run" / "final_metrics.json")
    assert final["global_step"] == 10 and not any(key.startswith("eval/") for key in final)
    assert not any(key.startswith("eval/") for row in read_jsonl(tmp_path / "run" / "metrics.jsonl") for key in row)
    assert (tmp_path / "run" / "export" / "saved_model" / "saved_model.pb").is_file()


def test_root_usage_errors_exit_2(cli, write_config):
    config = write_config({**RUN, "optimizer": "Adamm"})
    result = cli("--config", config)
    assert result.exit_code == 2 and "did you mean 'Adam'" in result.output
    assert "Traceback" not in result.output
    assert cli("--config", config, "train").exit_code == 2  # options of the root belong after a command
    assert cli("--mode", "eval").exit_code == 2  # nothing to run
    assert cli("--config", config, "--mode", "infer").exit_code == 2
