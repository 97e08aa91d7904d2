"""`opt-train sweep` without running trials: --dry-run, --print-commands, config errors (no TensorFlow import)."""

import shlex
import subprocess
import sys

from tests.support import CONFIGS

DEFAULT = str(CONFIGS / "default.yaml")


def run_cli(*args):
    """Runs the CLI in a fresh interpreter and reports whether TensorFlow got imported."""
    code = (
        "import sys\nfrom opt_train.cli.main import main\n"
        f"try:\n    main({[str(a) for a in args]!r})\n"
        "except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
        "print('TF-IMPORTED' if 'tensorflow' in sys.modules else 'TF-FREE', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_dry_run_and_print_commands_list_every_trial_without_tensorflow(tmp_path):
    out = tmp_path / "sweep"
    # Every trial is checked up front as `train` would (Momentum would need `momentum`): Adam and SGD.
    grid = ["--grid", "optimizer_params.learning_rate=0.1,0.01", "--grid", "optimizer=Adam,SGD"]
    dry = run_cli("sweep", "-c", DEFAULT, *grid, "--out", out, "--set", "max_steps=5", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "TF-FREE" in dry.stderr
    lines = dry.stdout.splitlines()
    assert len(lines) == 4
    assert lines[1].split()[1:] == ["to", "run", "optimizer_params.learning_rate=0.1", "optimizer=SGD"]
    printed = run_cli("sweep", "-c", DEFAULT, *grid, "--out", out, "--set", "max_steps=5", "--print-commands")
    assert printed.returncode == 0, printed.stderr
    assert "TF-FREE" in printed.stderr
    commands = [shlex.split(line) for line in printed.stdout.splitlines()]
    assert len(commands) == 4
    first = commands[0]
    assert first[1:4] == ["-m", "opt_train", "train"]
    sets = [first[i + 1] for i, word in enumerate(first) if word == "--set"]
    name = lines[0].split()[0]
    assert sets == ["max_steps=5", "optimizer_params.learning_rate=0.1", "optimizer=Adam", f"logdir={out}/{name}"]
    assert not out.exists()  # planning writes nothing


def test_a_trial_whose_config_is_bad_stops_the_sweep_before_anything_runs(tmp_path):
    out = tmp_path / "sweep"
    done = run_cli(
        "sweep", "-c", DEFAULT, "--grid", "optimizer=Adam,Adamm", "--grid", "optimizer_params.learning_rate=0.1,-1",
        "--out", out,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "TF-FREE" in done.stderr
    errors = [line for line in done.stderr.splitlines() if "trial-" in line]
    assert any("optimizer=Adamm" in line and "did you mean 'Adam'" in line for line in errors)
    assert any("optimizer_params.learning_rate=-1" in line and "[out_of_range]" in line for line in errors)
    assert not out.exists()


def test_bad_sweep_options_exit_2_naming_the_option(tmp_path):
    done = run_cli("sweep", "-c", DEFAULT, "--grid", "optimizer", "--random", "3", "--out", tmp_path)
    assert done.returncode == 2
    assert "--grid: expected KEY=V1,V2" in done.stderr
    assert "--random: needs ranges" in done.stderr


def test_the_example_sweep_config_plans_seeded_samples_crossed_with_the_grid():
    # Behaviour replaced on purpose: Optuna's sampler proposes each trial's rate, so the
    # grid points no longer share the same draws; the same seed still proposes the same.
    done = run_cli("sweep", "-c", CONFIGS / "sweep.yaml", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "TF-FREE" in done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 8
    assert [line.split()[3] for line in lines] == ["optimizer=Adam"] * 4 + ["optimizer=SGD"] * 4
    rates = [float(line.split("optimizer_params.learning_rate=")[1].split()[0]) for line in lines]
    assert all(1e-4 <= rate <= 1e-1 for rate in rates)
    assert run_cli("sweep", "-c", CONFIGS / "sweep.yaml", "--dry-run").stdout == done.stdout


def test_a_storage_url_sqlalchemy_cannot_read_is_one_line_exit_2(tmp_path):
    done = run_cli("sweep", "-c", DEFAULT, "--grid", "optimizer_params.learning_rate=0.1", "--out", tmp_path / "s",
                   "--storage", "nonsense://x")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "Error: --storage: cannot open the study's database" in done.stderr


def test_status_without_a_study_says_so_and_creates_nothing(tmp_path):
    out = tmp_path / "s"
    done = run_cli("sweep", "-c", DEFAULT, "--grid", "optimizer_params.learning_rate=0.1", "--out", out, "--status")
    assert done.returncode == 0, done.stderr
    assert "no study yet" in done.stdout
    assert not out.exists()
