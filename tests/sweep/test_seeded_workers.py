"""Seeded workers of one study split the work: no point is proposed twice, and the study stays repeatable.

Two real worker processes on one SQLite file or one PostgreSQL server (the stand-in
trainer of test_driver.py, each trial a fraction of a second), both with `seed: 1`.
"""

import os
import subprocess
import sys

import pytest

from tests.support import CONFIGS, REPO, read_jsonl
from tests.sweep.fake_plan import running
from tests.sweep.test_driver import FAKE_TRAINER

# lr in (100, 200): the stand-in trainer sleeps lr - 100 s, so the two workers overlap.
SWEEP_BLOCK = "sweep:\n  random:\n    optimizer_params.learning_rate: {uniform: [100.2, 100.4]}\n"

DRIVER = """
import sys
from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from tests.sweep.fake_plan import running

script, out, sampler, trials, *study = sys.argv[1:]

storage, name = study or (None, None)
configs = [{default!r}, {block!r}]
options = SweepOptions(random_trials=int(trials), seed=1, sampler=sampler, metric="eval/accuracy",
                       storage=storage, study=name)
plan = plan_sweep(configs, [], load_config(configs), options, out)
run_sweep(running(plan, script), 1, report=lambda text: print(text, flush=True))
assert "tensorflow" not in sys.modules, "the sweep driver imported TensorFlow"
"""


def _driver(tmp_path):
    block = tmp_path / "sweep.yaml"
    block.write_text(SWEEP_BLOCK)
    (tmp_path / "fake_train.py").write_text(FAKE_TRAINER)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(default=str(CONFIGS / "default.yaml"), block=str(block)))
    return driver


def _worker(tmp_path, out, sampler, trials, study=()):
    argv = [sys.executable, str(_driver(tmp_path)), str(tmp_path / "fake_train.py"), str(tmp_path / out),
            sampler, str(trials), *study]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _plan(tmp_path, out, sampler, trials):
    """In this process, the plan a DRIVER process builds from the same arguments (no shared study).

    Its stand-in trainer does not sleep: alone, no worker needs to overlap another.
    """
    from opt_train.config import load_config
    from opt_train.sweep import SweepOptions, plan_sweep

    _driver(tmp_path)
    script = tmp_path / "fake_train_alone.py"
    script.write_text(FAKE_TRAINER.replace("time.sleep(lr - 100)", "pass"))
    configs = [str(CONFIGS / "default.yaml"), str(tmp_path / "sweep.yaml")]
    options = SweepOptions(random_trials=trials, seed=1, sampler=sampler, metric="eval/accuracy")
    plan = plan_sweep(configs, [], load_config(configs), options, str(tmp_path / out))
    return running(plan, script)


def _rates(out):
    return sorted(r["overrides"]["optimizer_params.learning_rate"] for r in read_jsonl(out / "results.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["random", "tpe"])
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_seeded_workers_never_propose_the_same_point(tmp_path, database, sampler, request):
    storage = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    study = (storage, "shared") if storage else ()
    workers = [_worker(tmp_path, "out", sampler, 6, study=study) for _ in range(2)]
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], "\n".join(outputs)
    assert all(" started: " in output for output in outputs), outputs  # both took a share
    rates = _rates(tmp_path / "out")
    assert len(rates) == 6 and len(set(rates)) == 6, rates

    # Repeatable: the points are a function of the seed and the trial number, whoever ran them
    # (here one worker alone, in this process: no other process shares its study).
    from opt_train.sweep import preview_trials, run_sweep

    assert run_sweep(_plan(tmp_path, "alone", sampler, 6), 1).rows
    listed = sorted(trial.values["optimizer_params.learning_rate"] for trial in preview_trials(
        _plan(tmp_path, "unused", sampler, 6)))
    # Six trials are within TPE's ten random start-up trials, so two workers also draw what one does.
    assert rates == _rates(tmp_path / "alone") == listed


CLAIMER = """
import sys
import optuna
from opt_train.sweep import study as studies

url, count = sys.argv[1], int(sys.argv[2])
study = optuna.load_study(study_name="claims", storage=studies.make_storage(url))
if count:
    for number in range(count):
        study.enqueue_trial({"x": float(number)}, user_attrs={studies.GENERATION: "g"})
    sys.exit(0)
claimed = []
while (trial_id := studies.claim_waiting(study, "g")) is not None:
    claimed.append(trial_id)
print(" ".join(map(str, claimed)))
"""


@pytest.mark.slow
def test_two_workers_on_one_sqlite_file_never_claim_the_same_trial(tmp_path):
    # Optuna's own WAITING -> RUNNING check does not hold on SQLite: before the claim lock,
    # two workers racing through 120 queued trials shared several (one then crashed
    # writing to a trial the other had finished).
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(study_name="claims", storage=url)
    script = tmp_path / "claim.py"
    script.write_text(CLAIMER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, str(script), url, "120"], check=True, env=env)
    claimers = [subprocess.Popen([sys.executable, str(script), url, "0"], stdout=subprocess.PIPE, text=True, env=env)
                for _ in range(2)]
    claimed = [claimer.communicate(timeout=300)[0].split() for claimer in claimers]
    assert [claimer.returncode for claimer in claimers] == [0, 0]
    assert all(claimed), claimed  # both took a share
    assert sorted(claimed[0] + claimed[1]) == sorted(set(claimed[0] + claimed[1])), claimed
    assert len(claimed[0]) + len(claimed[1]) == 120
