"""Seeded workers of one study split the work: no point is proposed twice, and the study stays repeatable.

Two real workers on one SQLite file or one PostgreSQL server, one a process of its own, the other in the
test's process (the stand-in trainer of test_driver.py, each trial a fraction of a second), both with `seed: 1`,
running a study of each sampler (random, TPE) one after the other.
"""

import os
import subprocess
import sys

import pytest

from tests.support import CONFIGS, REPO, read_jsonl, rest_of_output
from tests.sweep.fake_plan import running
from tests.sweep.test_driver import FAKE_TRAINER, opened_study

# lr in (100, 200): the stand-in trainer sleeps lr - 100 s, so the two workers overlap.
SWEEP_BLOCK = "sweep:\n  random:\n    optimizer_params.learning_rate: {uniform: [100.2, 100.4]}\n"

DRIVER = """
import sys
from opt_train.config import load_config
from opt_train.sweep import SweepOptions, plan_sweep, run_sweep
from tests.sweep.fake_plan import running

script, out, samplers, trials, *study = sys.argv[1:]

storage, name = study or (None, None)
configs = [{default!r}, {block!r}]
for sampler in samplers.split(","):  # a study of each, one after the other, in OUT-SAMPLER (and NAME-SAMPLER)
    options = SweepOptions(random_trials=int(trials), seed=1, sampler=sampler, metric="eval/accuracy",
                           storage=storage, study=name and f"{{name}}-{{sampler}}")
    plan = plan_sweep(configs, [], load_config(configs), options, f"{{out}}-{{sampler}}")
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


def _worker(tmp_path, out, samplers, trials, study=()):
    argv = [sys.executable, str(_driver(tmp_path)), str(tmp_path / "fake_train.py"), str(tmp_path / out),
            ",".join(samplers), str(trials), *study]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _plan(tmp_path, out, sampler, trials, study=(), script=None):
    """In this process, the plan a DRIVER process builds from the same arguments (no shared study without `study`).

    Alone, its stand-in trainer does not sleep: no worker needs to overlap another.
    """
    from opt_train.config import load_config
    from opt_train.sweep import SweepOptions, plan_sweep

    _driver(tmp_path)
    if script is None:
        script = tmp_path / "fake_train_alone.py"
        script.write_text(FAKE_TRAINER.replace("time.sleep(lr - 100)", "pass"))
    configs = [str(CONFIGS / "default.yaml"), str(tmp_path / "sweep.yaml")]
    storage, name = study or (None, None)
    options = SweepOptions(random_trials=trials, seed=1, sampler=sampler, metric="eval/accuracy",
                           storage=storage, study=name)
    plan = plan_sweep(configs, [], load_config(configs), options, str(tmp_path / out))
    return running(plan, script)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """`alone(sampler)`: the rates one worker alone runs for six trials, and those `preview_trials` lists (once a
    sampler, whatever the storage the shared study is on)."""
    from opt_train.sweep import preview_trials, run_sweep

    found = {}

    def rates(sampler):
        if sampler not in found:
            folder = tmp_path_factory.mktemp(f"alone-{sampler}")
            assert run_sweep(_plan(folder, "alone", sampler, 6), 1).rows
            listed = sorted(trial.values["optimizer_params.learning_rate"]
                            for trial in preview_trials(_plan(folder, "unused", sampler, 6)))
            found[sampler] = _rates(folder / "alone"), listed
        return found[sampler]

    return rates


def _rates(out):
    return sorted(r["overrides"]["optimizer_params.learning_rate"] for r in read_jsonl(out / "results.jsonl"))


SAMPLERS = ("random", "tpe")


@pytest.mark.slow
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_seeded_workers_never_propose_the_same_point(tmp_path, database, request, alone):
    from opt_train.sweep import run_sweep

    storage = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    # The same two workers run a study of each sampler, one after the other: one worker in its own
    # process; the other in this one, from the moment the first has opened that sampler's study.
    worker = _worker(tmp_path, "out", SAMPLERS, 6, study=(storage, "shared") if storage else ())
    theirs, ours = {}, {}
    opened = list(opened_study(worker))
    for index, sampler in enumerate(SAMPLERS):
        if index:  # the first worker's share of the last study, up to its opening of this one
            opened = list(opened_study(worker))
            theirs[SAMPLERS[index - 1]] = "".join(opened[:-1])
        study = (storage, f"shared-{sampler}") if storage else ()
        lines = []
        run_sweep(_plan(tmp_path, f"out-{sampler}", sampler, 6, study, script=tmp_path / "fake_train.py"), 1,
                  report=lines.append)
        ours[sampler] = "\n".join(lines)
    theirs[SAMPLERS[-1]] = rest_of_output(worker, timeout=600)
    assert worker.returncode == 0, (theirs, ours)
    for sampler in SAMPLERS:
        assert " started: " in theirs[sampler] and " started: " in ours[sampler], (theirs, ours)  # both took a share
        rates = _rates(tmp_path / f"out-{sampler}")
        assert len(rates) == 6 and len(set(rates)) == 6, rates

        # Repeatable: the points are a function of the seed and the trial number, whoever ran them
        # (one worker alone, in this process: no other process shares its study).
        # Six trials are within TPE's ten random start-up trials, so two workers also draw what one does.
        alone_rates, listed = alone(sampler)
        assert rates == alone_rates == listed, sampler


CLAIMER = """
import sys
import optuna
from opt_train.sweep import study as studies

url = sys.argv[1]
study = optuna.load_study(study_name="claims", storage=studies.make_storage(url))
print("ready", flush=True)
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

    from opt_train.sweep import study as studies

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="claims", storage=url)
    for number in range(120):  # queued here; the two claimers race for them
        study.enqueue_trial({"x": float(number)}, user_attrs={studies.GENERATION: "g"})
    script = tmp_path / "claim.py"
    script.write_text(CLAIMER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # One claimer in its own process, the other in this one, from the moment the first has the study.
    claimer = subprocess.Popen([sys.executable, str(script), url], stdout=subprocess.PIPE, text=True, env=env)
    assert claimer.stdout.readline() == "ready\n"
    here = optuna.load_study(study_name="claims", storage=studies.make_storage(url))
    mine = []
    while (trial_id := studies.claim_waiting(here, "g")) is not None:
        mine.append(str(trial_id))
    claimed = [rest_of_output(claimer, timeout=300).split(), mine]
    assert claimer.returncode == 0
    assert all(claimed), claimed  # both took a share
    assert sorted(claimed[0] + claimed[1]) == sorted(set(claimed[0] + claimed[1])), claimed
    assert len(claimed[0]) + len(claimed[1]) == 120
