"""`opt-train configs list|copy`: the example configs ship in the wheel and come out of an installed package."""

import shutil
import subprocess
import sys
import zipfile

import pytest

from opt_train.config import load_config
from tests.support import CONFIGS, NO_TENSORFLOW, REPO, main_code, one_error_line, run_python


def test_list_names_every_example_config_without_importing_tensorflow():
    done = run_python(main_code(["configs", "list"]))
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()]
    assert listed == sorted(path.stem for path in CONFIGS.glob("*.yaml"))
    by_name = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert "The default example" in by_name["default"]
    assert "examples/my_data.py" in by_name["my_data"] and "examples/" not in by_name["default"]


def test_copy_brings_the_config_and_its_base_chain_and_validates_like_the_original(cli, tmp_path):
    result = cli("configs", "copy", "Sweep.yaml", tmp_path / "mine")
    assert result.exit_code == 0, result.output
    for name in ("sweep.yaml", "default.yaml"):  # sweep.yaml says `base: default.yaml`
        assert (tmp_path / "mine" / name).read_bytes() == (CONFIGS / name).read_bytes()
    copied = load_config([str(tmp_path / "mine" / "sweep.yaml")])
    original = load_config([str(CONFIGS / "sweep.yaml")])
    assert copied == original
    assert cli("validate", "--config", tmp_path / "mine" / "sweep.yaml").exit_code == 0


def test_copy_brings_the_files_a_config_reads_next_to_it(cli, tmp_path):
    result = cli("configs", "copy", "fine_tuning", tmp_path)
    assert result.exit_code == 0, result.output
    copied = tmp_path / "fine_tuning" / "digits_cnn.keras"
    assert copied.read_bytes() == (CONFIGS / "fine_tuning" / "digits_cnn.keras").read_bytes()
    assert load_config([str(tmp_path / "fine_tuning.yaml")]).init_from["path"] == str(copied)


def test_copy_into_the_current_folder_by_default(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("configs", "copy", "default")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "default.yaml").read_bytes() == (CONFIGS / "default.yaml").read_bytes()


def test_copy_never_overwrites_and_copies_nothing_then(cli, tmp_path):
    (tmp_path / "default.yaml").write_text("mine: true\n")
    result = cli("configs", "copy", "iter_size", tmp_path)
    assert result.exit_code == 2
    assert "default.yaml: already exists" in one_error_line(result)
    assert (tmp_path / "default.yaml").read_text() == "mine: true\n"
    assert not (tmp_path / "iter_size.yaml").exists()


def test_unknown_name_is_one_line_with_the_closest_name(cli, tmp_path):
    result = cli("configs", "copy", "defualt", tmp_path)
    assert result.exit_code == 2
    assert "did you mean 'default'?" in one_error_line(result)
    assert not list(tmp_path.iterdir())


def test_help_lists_the_configs_command_without_tensorflow():
    done = run_python(main_code(["--help"], ["configs", "--help"], ["configs", "copy", "--help"]))
    assert done.returncode == 0, done.stderr
    assert "configs" in done.stdout and "DEST" in done.stdout


@pytest.mark.slow  # a wheel build: about 15 s on 2 cores
def test_the_wheel_ships_every_example_config(tmp_path):
    # Built from a copy (links kept as links, as git checks them out), so that the build's
    # own folders do not land in the checkout.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("opt_train", "configs"):
        shutil.copytree(REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    assert (source / "opt_train" / "configs").is_symlink()
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path)], capture_output=True, text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("opt_train-*.whl")
    shipped = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("opt_train/configs/")}
    files = [*CONFIGS.glob("*.yaml"), *CONFIGS.glob("*/*")]  # a config's own files in the folder named like it
    assert shipped == {f"opt_train/configs/{path.relative_to(CONFIGS)}" for path in files}
    for path in files:
        assert zipfile.ZipFile(wheel).read(f"opt_train/configs/{path.relative_to(CONFIGS)}") == path.read_bytes()
