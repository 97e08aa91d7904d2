"""`opt-train convert`: exit codes, --out, no TensorFlow, and a config file that is never run."""

import pathlib

import yaml

from tests.support import main_code, run_python

FIXTURES = pathlib.Path(__file__).parents[1] / "compat"


def test_convert_writes_yaml_that_validates(tmp_path, cli):
    out = tmp_path / "resnet.yaml"
    result = cli("convert", "openseq2seq", FIXTURES / "openseq2seq" / "image2label__resnet-50-v2.py", "--out", out)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(out.read_text())
    assert data["optimizer_params"] == {"momentum": 0.9, "learning_rate": 0.1}
    assert data["regularizer"] == "tf1_l2"
    # The model and data are OpenSeq2Seq classes: left to fill in, and validate says so in one line.
    assert (data["model"], data["data"]) == ("(fill in)", "(fill in)")
    refused = cli("validate", "--config", out, "--set", "num_gpus=1")
    assert refused.exit_code == 2
    assert f"{out}:" in refused.output and "model: is to be filled in" in refused.output
    assert "data: is to be filled in" in refused.output and "Traceback" not in refused.output
    filled = cli("validate", "--config", out, "--set", "num_gpus=1", "--set", "model=cnn", "--set", "data=digits")
    assert filled.exit_code == 0, filled.output


def test_convert_never_runs_the_config_and_imports_no_tensorflow(tmp_path):
    marker = tmp_path / "ran"
    config = tmp_path / "evil.py"
    config.write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "import tensorflow as tf\n"
        "base_params = {'max_steps': 10, 'dtype': tf.float32, 'logdir': __import__('os').getcwd()}\n"
    )
    done = run_python(main_code(["convert", "openseq2seq", config], on_exit="assert not stop.code, stop.code"))
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert "dtype: float32" in done.stdout
    # What needed the config to run is listed, not guessed.
    assert "#   logdir: __import__('os').getcwd()" in done.stdout


def test_not_python_is_exit_2_with_the_line(tmp_path, cli):
    config = tmp_path / "broken.py"
    config.write_text("base_params = {\n  'max_steps': 10,\n  oops oops\n}\n")
    result = cli("convert", "openseq2seq", config)
    assert result.exit_code == 2
    assert f"{config}:3: not valid Python" in result.output
    assert "Traceback" not in result.output


def test_no_base_params_is_exit_2(tmp_path, cli):
    config = tmp_path / "other.py"
    config.write_text("params = {}\n")
    result = cli("convert", "openseq2seq", config)
    assert result.exit_code == 2
    assert "no `base_params" in result.output


def test_missing_file_is_exit_2(tmp_path, cli):
    assert cli("convert", "returnn", tmp_path / "nothing.config").exit_code == 2
