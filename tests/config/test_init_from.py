"""`init_from` in the config layer: every problem `validate` can know (all but variable paths), located, TF-free."""

import textwrap

import pytest

from opt_train.config import ConfigError, load_config
from tests.support import NO_TENSORFLOW, main_code, run_python

HEAD = "max_steps: 1\n"


def _load(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + textwrap.dedent(text))
    return load_config([str(path)])


@pytest.fixture
def checkpoint(tmp_path):
    """A folder `source/checkpoints` holding what TF's reader looks for first (`ckpt-3.index`)."""
    folder = tmp_path / "source" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "ckpt-3.index").write_bytes(b"")
    return tmp_path / "source"


def test_a_checkpoint_folder_relative_to_the_config_is_accepted_with_defaults(tmp_path, checkpoint):
    config = _load(tmp_path, "init_from: {path: source}\n")
    assert config.init_from == {"path": str(checkpoint), "variables": {}, "skip_mismatch": False}


@pytest.mark.parametrize("text, key, code, words", [
    ("init_from: {path: nowhere}\n", "init_from.path", "file_not_found", "no such checkpoint"),
    ("init_from: {path: empty}\n", "init_from.path", "file_not_found", "a folder with no checkpoint"),
    ("init_from: {path: model.h5}\n", "init_from.path", "out_of_range", "Keras 2"),
    ("init_from: {path: gone.keras}\n", "init_from.path", "file_not_found", "no such file"),
    ("init_from: {variables: {a: b}}\n", "init_from.path", "missing", "required"),
    ("init_from: {path: source, skip_mismatches: true}\n", "init_from.skip_mismatches", "unknown_key", "skip_mismatch"),
    ("init_from: {path: source, skip_mismatch: 'yes'}\n", "init_from.skip_mismatch", "wrong_type", "true or false"),
    ("init_from: {path: source, variables: [a]}\n", "init_from.variables", "wrong_type", "mapping"),
    ("init_from: {path: source, variables: {'enc(': x}}\n", "init_from.variables", "wrong_type", "regular expression"),
    ("init_from: {path: source, variables: {'^enc/(.*)': 'b/\\2'}}\n", "init_from.variables", "wrong_type",
     "invalid group reference 2"),
    ("init_from: {path: source, variables: {'^enc/': 3}}\n", "init_from.variables", "wrong_type", "template"),
    ("init_from: source\n", "init_from", "wrong_type", "mapping"),
    ("init_from: {path: source}\nload_model: source\n", "init_from", "conflict", "load_model"),
])
def test_bad_init_from_is_located(tmp_path, checkpoint, text, key, code, words):
    (tmp_path / "empty").mkdir()
    (tmp_path / "model.h5").write_bytes(b"")
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    [issue] = caught.value.issues
    assert (issue.key, issue.code) == (key, code), issue
    assert issue.line in (2, 3) and words in issue.message, issue


def test_a_source_gone_is_no_problem_for_a_logdir_that_resumes(tmp_path):
    """A resumed run (and eval, export, predict) reads its own checkpoints, never init_from's source."""
    logdir = tmp_path / "run"
    (logdir / "checkpoints").mkdir(parents=True)
    text = f"init_from: {{path: gone}}\nlogdir: {logdir}\n"
    with pytest.raises(ConfigError):
        _load(tmp_path, text)
    (logdir / "checkpoints" / "ckpt-5.index").write_bytes(b"")
    assert _load(tmp_path, text).init_from["path"] == str(tmp_path / "gone")


def test_validate_gives_the_verdict_without_tensorflow(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(HEAD + "init_from:\n  path: nowhere\n")
    done = run_python(main_code(["validate", "--config", path], on_exit="print('exit', stop.code)", then=NO_TENSORFLOW))
    assert done.returncode == 0, done.stderr
    assert "exit 2" in done.stdout
    [line] = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert line.startswith(f"Error: {path}:3: init_from.path: ") and "[file_not_found]" in line, line


def test_application_weights_resolve_relative_to_the_config_and_imagenet_stays(tmp_path):
    (tmp_path / "backbone.weights.h5").write_bytes(b"")
    config = _load(tmp_path, """\
        model: {keras_application: MobileNet}
        model_params: {weights: backbone.weights.h5}
        data: synthetic_images
    """)
    assert config.model_params["weights"] == str(tmp_path / "backbone.weights.h5")
    config = _load(tmp_path, """\
        model: {keras_application: MobileNet}
        model_params: {weights: imagenet}
        data: synthetic_images
    """)
    assert config.model_params["weights"] == "imagenet"
