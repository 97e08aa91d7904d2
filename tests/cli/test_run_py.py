"""OpenSeq2Seq's run.py command line (`--config_file=x --mode=train --key=value ...`) on opt-train."""

import click
import pytest
import yaml

from opt_train.cli.run_py import is_run_py, translate, translate_train
from tests.support import main_code, read_json, read_jsonl, run_python

RUN = {
    "model": "mlp", "model_params": {"hidden_units": [8]}, "data": "digits", "max_steps": 4,
    "print_loss_steps": 2, "eval_steps": 2, "save_summaries_steps": None,
    "optimizer": "Momentum", "optimizer_params": {"momentum": 0.9}, "lr_policy_params": {"learning_rate": 0.01},
}


def test_run_py_forms_become_opt_train_s():
    argv = ["--config_file=x.yaml", "--mode", "train_eval", "--batch_size_per_gpu=64",
            "--optimizer_params/learning_rate", "0.1", "--use_horovod=True", "--continue_learning"]
    assert is_run_py(argv) and not is_run_py(["--config", "x.yaml"])
    command, notes = translate(argv)
    assert command == ["--config", "x.yaml", "--mode", "train_eval", "--set", "batch_size_per_gpu=64",
                       "--set", "optimizer_params.learning_rate=0.1", "--set", "use_horovod=True"]
    assert [note.split(":")[0] for note in notes] == ["--continue_learning"]


def test_bare_use_horovod_is_true():
    assert translate(["--config_file=x.yaml", "--use_horovod"])[0][-2:] == ["--set", "use_horovod=true"]


def test_run_py_default_mode_is_train():
    """run.py's --mode defaults to train (no evaluation)."""
    assert translate(["--config_file", "x.yaml"])[0] == ["--config", "x.yaml", "--mode", "train"]


def test_benchmark_is_train_benchmark_for_bench_steps():
    command, _ = translate(["--config_file=x.yaml", "--benchmark", "--bench_steps=7", "--bench_start=3"])
    assert command == ["train", "--config", "x.yaml", "--benchmark", "--set", "max_steps=7", "--set",
                       "num_epochs=null", "--set", "bench_start=3", "--set", "eval_steps=null"]


@pytest.mark.parametrize("flag, noted", [
    ("--enable_logs", "stdout and stderr are not copied"), ("--no_dir_check", "<logdir>-N"),
    ("--use_xla_jit", "jit_compile=true"), ("--debug_port=6064", "ignored"),
])
def test_flags_that_differ_are_named_in_one_line(flag, noted):
    _, notes = translate(["--config_file=x.yaml", flag])
    assert len(notes) == 1 and notes[0].startswith(flag.split("=")[0] + ": ") and noted in notes[0]


def _main(*args):
    return run_python(main_code(list(args), on_exit="print('exit', stop.code)", then=""))


@pytest.mark.parametrize("args, fragment", [
    (["--mode=infer"], "opt-train predict"),
    (["--mode=interactive_infer"], "run.py refuses it too"),
    (["--mode=serve"], "has to be one of train, eval, train_eval, infer, interactive_infer"),
])
def test_modes_opt_train_does_not_run_exit_2_in_one_line(args, fragment, write_config):
    config = write_config(RUN)
    done = _main(f"--config_file={config}", *args)
    assert "exit 2" in done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and fragment in errors[0] and "Traceback" not in done.stderr


def test_a_python_config_is_never_run_and_points_at_convert(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "jasper.py"
    config.write_text(f"open({str(marker)!r}, 'w')\nbase_params = {{'num_epochs': 1}}\n")
    for args in (["--config_file", config], ["validate", "--config", config], ["--config", config]):
        done = _main(*args)
        assert "exit 2" in done.stdout, (args, done.stdout, done.stderr)
        assert f"opt-train convert openseq2seq {config} -o" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()


@pytest.fixture
def main_here(capsys):
    """`opt_train.cli.main.main(args)` in this process: `(exit code, stdout, stderr)`.

    main() silences TensorFlow's and absl's loggers (opt_train.quiet); their levels are put back.
    """
    import logging

    from absl import logging as absl_logging

    from opt_train.cli.main import main

    loggers = [logging.getLogger(name) for name in ("tensorflow", "absl")]
    levels, verbosity = [logger.level for logger in loggers], absl_logging.get_verbosity()

    def run(*args):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            main([str(arg) for arg in args])
        out, err = capsys.readouterr()
        return stop.value.code, out, err

    yield run
    for logger, level in zip(loggers, levels):
        logger.setLevel(level)
    absl_logging.set_verbosity(verbosity)


@pytest.mark.slow
def test_run_py_command_line_trains_with_its_overrides(main_here, tmp_path, write_config):
    config = write_config(RUN)
    code, _, stderr = main_here(f"--config_file={config}", "--mode=train", "--optimizer_params/momentum=0.5",
                                "--use_horovod=False", "--enable_logs")
    assert code == 0, stderr
    assert "note: --enable_logs: " in stderr
    run = tmp_path / "run"
    assert yaml.safe_load((run / "config.yaml").read_text())["optimizer_params"]["momentum"] == 0.5
    final = read_json(run / "final_metrics.json")
    # --mode=train: no evaluation, as run.py's train mode.
    assert final["global_step"] == 4 and not any(key.startswith("eval/") for key in final)
    assert not any(key.startswith("eval/") for row in read_jsonl(run / "metrics.jsonl") for key in row)


def test_help_still_leaves_tensorflow_out():
    done = run_python(main_code(["--help"], on_exit="assert stop.code == 0"))
    assert done.returncode == 0, done.stderr
    assert "--config_file" in done.stdout


# What a migrating user types: run.py's flags and opt-train's options together, in either order.
MIXED = [
    (["--config_file=x.yaml", "--mode=train", "--set", "max_steps=5"],
     ["--config", "x.yaml", "--mode", "train", "--set", "max_steps=5"]),
    (["--set", "max_steps=5", "--config_file=x.yaml", "--mode=train"],
     ["--config", "x.yaml", "--mode", "train", "--set", "max_steps=5"]),
    (["--config_file", "x.yaml", "-s", "max_steps=5", "--set=logdir=/tmp/r", "--batch_size_per_gpu=64"],
     ["--config", "x.yaml", "--mode", "train", "--set", "max_steps=5", "--set", "logdir=/tmp/r",
      "--set", "batch_size_per_gpu=64"]),
    # opt-train's --config: opt-train's default mode (train_eval), run.py's flags read as run.py's.
    (["--config", "x.yaml", "--enable_logs"], ["--config", "x.yaml", "--mode", "train_eval"]),
    (["--enable_logs", "-c", "x.yaml"], ["--config", "x.yaml", "--mode", "train_eval"]),
    (["--config", "x.yaml", "--mode", "train", "--batch_size_per_gpu=64", "--optimizer_params/learning_rate", "0.1"],
     ["--config", "x.yaml", "--mode", "train", "--set", "batch_size_per_gpu=64",
      "--set", "optimizer_params.learning_rate=0.1"]),
    (["-c", "base.yaml", "-c", "x.yaml", "--use_horovod", "-s", "iter_size=2"],
     ["--config", "base.yaml", "--config", "x.yaml", "--mode", "train_eval", "--set", "use_horovod=true",
      "--set", "iter_size=2"]),
    (["--verbose", "--config_file=x.yaml", "--continue_learning"],
     ["--verbose", "--config", "x.yaml", "--mode", "train"]),
    (["--config", "x.yaml", "--benchmark", "--bench_steps=3", "--set", "iter_size=2"],
     ["train", "--config", "x.yaml", "--benchmark", "--set", "iter_size=2", "--set", "max_steps=3",
      "--set", "num_epochs=null"]),
]


@pytest.mark.parametrize("argv, command", MIXED, ids=[" ".join(argv) for argv, _ in MIXED])
def test_run_py_flags_and_opt_train_options_mix_in_either_order(argv, command):
    """Failed before: `--set` became run.py's override of a key `set`, and `--config` with
    `--enable_logs` was not read as run.py's form (click: No such option)."""
    assert is_run_py(argv)
    assert translate(argv)[0] == command


@pytest.mark.parametrize("argv", [
    ["--config", "x.yaml"], ["--config", "x.yaml", "--mode", "eval", "--set", "max_steps=5"],
    ["-c", "x.yaml", "-s", "max_steps=5"], ["--verbose", "train", "--config", "x.yaml"],
    ["train", "--config", "x.yaml", "--enable_logs"], ["--config", "x.yaml", "train"], ["--help"],
])
def test_opt_train_s_own_command_lines_stay_click_s(argv):
    assert not is_run_py(argv)


def test_a_mixed_command_line_without_a_config_names_both_flags():
    with pytest.raises(click.UsageError, match="--config_file: required .*--config CONFIG"):
        translate(["--set", "max_steps=5", "--enable_logs"])


def test_mixed_forms_train_with_every_override(main_here, tmp_path, write_config):
    config = write_config(RUN)
    code, _, stderr = main_here("--set", "max_steps=2", f"--config_file={config}", "--mode=train",
                                "--optimizer_params/momentum=0.5", "-s", "print_loss_steps=1", "--enable_logs")
    assert code == 0, stderr
    assert "note: --enable_logs: " in stderr
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["max_steps"], saved["optimizer_params"]["momentum"], saved["print_loss_steps"]) == (2, 0.5, 1)
    assert read_json(tmp_path / "run" / "final_metrics.json")["global_step"] == 2


# run.py's flags after `opt-train train`, among train's own options (click alone: "No such option").
AFTER_TRAIN = [
    (["train", "--config", "x.yaml", "--enable_logs"], ["train", "--config", "x.yaml"]),
    (["--verbose", "train", "-c", "x.yaml", "--np", "2", "--batch_size_per_gpu=64", "--optimizer_params/momentum", "0.5"],
     ["--verbose", "train", "-c", "x.yaml", "--np", "2", "--set", "batch_size_per_gpu=64",
      "--set", "optimizer_params.momentum=0.5"]),
    (["train", "--config_file=x.yaml", "--use_xla_jit", "--benchmark", "--bench_steps=3", "-s", "iter_size=2"],
     ["train", "--config", "x.yaml", "--benchmark", "-s", "iter_size=2", "--set", "jit_compile=true",
      "--set", "max_steps=3", "--set", "num_epochs=null"]),
]


@pytest.mark.parametrize("argv, command", AFTER_TRAIN, ids=[" ".join(argv) for argv, _ in AFTER_TRAIN])
def test_run_py_flags_after_train_are_read_as_train_s(argv, command):
    assert translate_train(argv)[0] == command


@pytest.mark.parametrize("argv", [["train", "--config", "x.yaml", "--np", "2"], ["validate", "-c", "x.yaml"],
                                  ["train", "--help"], ["--config", "x.yaml", "train"]])
def test_train_s_own_command_lines_are_left_to_click(argv):
    assert translate_train(argv) is None


def test_run_py_flags_after_train_train_with_every_override(main_here, tmp_path, write_config):
    """Failed before: `opt-train train --config x.yaml --enable_logs` was click's "No such option"."""
    config = write_config(RUN)
    code, _, stderr = main_here("train", "--config", config, "--enable_logs", "--optimizer_params/momentum=0.5",
                                "--set", "max_steps=2", "--set", "eval_steps=null")
    assert code == 0, stderr
    assert "note: --enable_logs: " in stderr
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["max_steps"], saved["optimizer_params"]["momentum"]) == (2, 0.5)
    assert read_json(tmp_path / "run" / "final_metrics.json")["global_step"] == 2


def test_mode_after_train_is_one_line_exit_2(main_here, write_config):
    code, _, stderr = main_here("train", "--config", write_config(RUN), "--mode", "eval")
    assert code == 2 and stderr.strip() == ("Error: --mode: only without a command (opt-train --config CONFIG "
                                            "--mode train); `opt-train train` is --mode train_eval")


def test_a_misspelt_train_option_is_not_read_as_a_run_py_override(main_here, write_config):
    """Only a config key's name is run.py's override after `train`: click refuses and suggests the option."""
    code, _, stderr = main_here("train", "--config", write_config(RUN), "--no_resume")
    assert code == 2 and "--no_resume" in stderr and "'--no-resume'" in stderr and "--set" not in stderr


@pytest.mark.parametrize("args, said", [
    (["--verbos"], "--verbos needs a value (run.py: --verbos=VALUE); did you mean '--verbose'?"),
    (["--enable_log"], "--enable_log needs a value (run.py: --enable_log=VALUE); did you mean '--enable_logs'?"),
])
def test_a_misspelt_flag_of_either_form_is_one_line_exit_2(main_here, write_config, args, said):
    """Asking whether the line is run.py's raises nothing: main() reports the translation's error, with a hint."""
    config = write_config(RUN)
    code, _, stderr = main_here("--config", config, *args)
    assert code == 2 and stderr.strip() == f"Error: {said}"


@pytest.mark.parametrize("argv", [["--np", "2"], ["--no-resume"], ["--hosts=a:2,b:2"], ["--profile"]])
def test_a_train_option_without_the_command_says_where_it_goes(argv):
    """Not read as run.py's override of a config key (`--set: np: unknown key`)."""
    flag = argv[0].partition("=")[0]
    with pytest.raises(click.UsageError, match=f"{flag} is an option of `opt-train train`.*opt-train train --config"):
        translate(["--config", "x.yaml", *argv])
