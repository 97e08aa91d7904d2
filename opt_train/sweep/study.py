"""The sweep's Optuna study: storage, sampler and search space by name, the planned queue, and handing out trials.

Every `opt-train sweep` process on the same storage and study name is a worker: the
study holds the queue of WAITING trials, and a worker takes one by moving it to
RUNNING, which succeeds for exactly one worker. Optuna is imported here only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time

from opt_train.atomic import read_json, write_json
from opt_train.config import ConfigError, ConfigIssue
from opt_train.sweep.plan import render
from opt_train.errors import TrainingFailed

STUDY_FILE = "study.db"
# Beside an SQLite study file: the lock workers take in turn to claim a trial.
CLAIM_LOCK_SUFFIX = ".claim-lock"
# User attributes on each trial and the study: the base config's digest (a trial of
# another digest is stale), the trial's folder, and the sweep's record of it.
GENERATION = "generation"
FOLDER = "folder"
RECORD = "record"
REPEAT = "repeat"
RETRY_OF = "retry_of"
# How many times the trial was queued again after its worker stopped sending heartbeats.
STALE_RETRIES = "stale_retries"
# Seconds a worker that did not create the study waits for its creator to queue the trials.
PLAN_WAIT_SECONDS = 120
# Study user attribute: the last run's base digest, metric, mode and swept keys (for --status alone).
CURRENT = "sweep:current"
# In the sweep folder: where its study is (`storage`: None for DIR/study.db, else the URL without
# its password; `study`: the name), so `--status` needs the folder alone.
WHERE_FILE = "sweep.json"
STORAGE_ATTEMPTS = 5


def optuna_module():
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Optuna marks its heartbeat (RDBStorage's heartbeat_interval, fail_stale_trials) experimental since 2.9;
    # the sweep relies on what it means, not on its interface staying, and the user can do nothing about it.
    warnings.filterwarnings("ignore", r".*(heartbeat_interval|fail_stale_trials)",
                            optuna.exceptions.ExperimentalWarning)
    return optuna


def storage_url(spec, out):
    """`--storage` / `sweep.storage`, else an SQLite file in the sweep folder."""
    return spec.storage or f"sqlite:///{os.path.abspath(os.path.join(out, STUDY_FILE))}"


def study_name(spec, out):
    """`--study` / `sweep.study`, else the sweep folder's name."""
    return spec.study or os.path.basename(os.path.normpath(os.path.abspath(out)))


class StorageUnavailable(TrainingFailed):
    """The study's database did not answer (exit 1: the sweep could not run, the config is fine)."""


def make_storage(url, heartbeat=None):
    """Optuna's RDB storage for `url`; SQLite waits for a locked database instead of failing at once.

    `heartbeat`: `(seconds, callback)`: a RUNNING trial without a heartbeat for twice
    `seconds` is stale; `optuna.storages.fail_stale_trials` fails it and calls
    `callback(study, frozen trial)` (Optuna's `heartbeat_interval`, `grace_period` and
    `heartbeat_stale_trial_callback`). A URL SQLAlchemy cannot read, or whose driver is
    not installed, is a `ConfigError` naming --storage; a server that does not answer is
    `StorageUnavailable`.
    """
    import sqlalchemy.exc

    optuna = optuna_module()
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite:") else None
    beats = {}
    if heartbeat is not None:
        beats = {"heartbeat_interval": heartbeat[0], "grace_period": 2 * heartbeat[0],
                 "heartbeat_stale_trial_callback": heartbeat[1]}
    for attempt in range(STORAGE_ATTEMPTS):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=engine, **beats)
        except (sqlalchemy.exc.ArgumentError, ImportError) as error:
            hint = " (pip install -e '.[postgres]' for postgresql://)" if isinstance(error, ImportError) else ""
            message = f"cannot open the study's database: {str(error).splitlines()[0]}{hint}"
            raise ConfigError([ConfigIssue("--storage", 0, "", "wrong_type", message, url)]) from None
        except sqlalchemy.exc.SQLAlchemyError as error:
            # Workers started together on a new database race to create its tables; the
            # loser finds them made on the next attempt.
            if attempt == STORAGE_ATTEMPTS - 1:
                reason = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
                raise StorageUnavailable(f"the study's database did not answer: {reason}") from None
            time.sleep(1.0 + attempt)


def encode(value):
    """A swept value as an Optuna categorical choice: scalars as they are, lists and mappings as YAML text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return render(value)


def search_space(spec, queue):
    """Optuna distributions by key: grid keys (and a repeated `random_seed`) are categorical, ranges map onto
    Float / Int / Categorical distributions."""
    optuna = optuna_module()
    distributions = optuna.distributions
    space = {}
    for entry in queue:
        for key, value in entry.fixed:
            choices = space.setdefault(key, [])
            if encode(value) not in choices:
                choices.append(encode(value))
    space = {key: distributions.CategoricalDistribution(choices) for key, choices in space.items()}
    for key, distribution in spec.random.items():
        kind, args = distribution.kind, distribution.args
        if kind == "choice":
            choices = []
            for choice in args:
                if encode(choice) not in choices:
                    choices.append(encode(choice))
            space[key] = distributions.CategoricalDistribution(choices)
        elif kind == "int_uniform":
            space[key] = distributions.IntDistribution(args[0], args[1])
        else:
            space[key] = distributions.FloatDistribution(float(args[0]), float(args[1]), log=kind == "log_uniform")
    return space


def decoder(spec, queue):
    """`decode(key, stored) -> value`: the swept value behind a stored categorical choice."""
    originals = {}
    for entry in queue:
        for key, value in entry.fixed:
            originals.setdefault(key, {})[encode(value)] = value
    for key, distribution in spec.random.items():
        if distribution.kind == "choice":
            originals[key] = {encode(choice): choice for choice in distribution.args}

    def decode(key, stored):
        return originals.get(key, {}).get(stored, stored) if isinstance(stored, str) else stored

    return decode


def trial_seed(seed, number):
    """The seed of trial `number` of a study seeded `seed`: distinct per trial, the same for every worker.

    Workers seeded alike would otherwise draw the same sequence and propose the same
    points; the trial number is handed out by the study, once, so it is each proposal's identity.
    """
    import numpy as np

    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


def make_sampler(spec, queue, number=None):
    """Optuna's sampler for `spec.sampler`, seeded with `spec.seed`; for trial `number`, with `trial_seed`.

    QMC keeps the study's seed: its points are one scrambled sequence that the study
    numbers itself, so each worker already takes the next point of it.
    """
    from opt_train.config.sweep_block import SAMPLER_TABLE

    optuna_module()  # says what to install when Optuna is missing
    seed = spec.seed
    if seed is not None and number is not None and spec.sampler != "qmc":
        seed = trial_seed(seed, number)
    return SAMPLER_TABLE.load(spec.sampler)(seed=seed)


def direction(spec):
    return "maximize" if spec.mode == "max" else "minimize"


def load(plan, storage=None):
    """The existing study of `plan`, or None when there is none yet."""
    optuna = optuna_module()
    url = storage_url(plan.spec, plan.out)
    if url.startswith("sqlite:") and not os.path.exists(os.path.join(plan.out, STUDY_FILE)) and not plan.spec.storage:
        return None
    try:
        return optuna.load_study(
            study_name=study_name(plan.spec, plan.out), storage=storage or make_storage(url),
            sampler=make_sampler(plan.spec, plan.queue),
        )
    except KeyError:
        return None


def open_study(plan, pruner, heartbeat=None):
    """The study of `plan`, created if needed; the worker that creates it (or meets a new base config) queues the trials.

    Returns `(study, queued)`: `queued` is how many trials this call added. `heartbeat`: as `make_storage`'s.
    """
    optuna = optuna_module()
    os.makedirs(plan.out, exist_ok=True)
    storage = make_storage(storage_url(plan.spec, plan.out), heartbeat)
    name = study_name(plan.spec, plan.out)
    sampler = make_sampler(plan.spec, plan.queue)
    try:
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, pruner=pruner, direction=direction(plan.spec)
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
        created = False
    planned_key = f"planned:{plan.base_digest}"
    if not created and planned_key not in study.user_attrs:
        # The worker that created the study (or met this base config first) may be queueing
        # right now; give it the time to finish. A study whose trials are all of other base
        # configs has nobody queueing: this worker queues.
        trials = study.get_trials(deepcopy=False)
        being_planned = not trials or any(t.user_attrs.get(GENERATION) == plan.base_digest for t in trials)
        deadline = time.monotonic() + (PLAN_WAIT_SECONDS if being_planned else 0)
        while planned_key not in study.user_attrs and time.monotonic() < deadline:
            time.sleep(0.5)
    queued = top_up(study, plan)
    if planned_key not in study.user_attrs:
        study.set_user_attr(planned_key, len(plan.queue))
    # What `sweep --status` needs without the command that ran the sweep: the folder says
    # where the study is, the study what its last run was.
    write_json(os.path.join(plan.out, WHERE_FILE),
               {"storage": _without_password(plan.spec.storage) if plan.spec.storage else None, "study": name})
    study.set_user_attr(CURRENT, {
        "generation": plan.base_digest, "metric": plan.spec.metric, "mode": plan.spec.mode,
        "columns": list(plan.spec.swept_keys) + (
            ["random_seed"] if plan.spec.repeats > 1 and "random_seed" not in plan.spec.swept_keys else []),
    })
    return study, queued


def load_recorded(out=None, storage=None, name=None):
    """`(study, current)` for `sweep --status` from the folder or storage alone; (None, None) when there is none.

    Without `storage`, the folder's `sweep.json` says where the study is (a folder from before
    it was written: `DIR/study.db`, the study named after the folder). `current` is what the
    last run of the sweep recorded: its base config's digest, metric, mode and swept keys
    (None for a study written before it was recorded).
    """
    optuna = optuna_module()
    if storage is None and out is not None:
        where = read_json(os.path.join(out, WHERE_FILE)) or {}
        storage, name = where.get("storage"), name or where.get("study")
    if storage is None:
        if out is None or not os.path.exists(os.path.join(out, STUDY_FILE)):
            return None, None
        storage = f"sqlite:///{os.path.abspath(os.path.join(out, STUDY_FILE))}"
    if name is None:
        name = os.path.basename(os.path.normpath(os.path.abspath(out)))
    try:
        study = optuna.load_study(study_name=name, storage=make_storage(storage))
    except KeyError:
        return None, None
    return study, study.user_attrs.get(CURRENT)


def _without_password(url):
    """`url` with no password (`postgresql://user@host/db`): a driver reads it from its own place (`~/.pgpass`)."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1@", url)


def top_up(study, plan):
    """Queues the entries of `plan.queue` the study does not have yet for this base config; returns how many."""
    have = {}
    for trial in study.get_trials(deepcopy=False):
        if trial.user_attrs.get(GENERATION) == plan.base_digest and RETRY_OF not in trial.user_attrs:
            fixed = trial.system_attrs.get("fixed_params", {})
            key = render(sorted([k, v] for k, v in fixed.items()))
            have[key] = have.get(key, 0) + 1
    added = 0
    for entry in plan.queue:
        params = {key: encode(value) for key, value in entry.fixed}
        key = render(sorted([k, v] for k, v in params.items()))
        if have.get(key, 0):
            have[key] -= 1
            continue
        study.enqueue_trial(params, user_attrs={GENERATION: plan.base_digest, REPEAT: entry.repeat})
        added += 1
    return added


def requeue_failed(study, plan):
    """Queues every failed trial of this base config again, with its values and folder; returns how many."""
    optuna = optuna_module()
    trials = study.get_trials(deepcopy=False)
    retried = {trial.user_attrs.get(RETRY_OF) for trial in trials}
    count = 0
    for trial in trials:
        if (trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs.get(GENERATION) == plan.base_digest
                and trial.number not in retried):
            attrs = {GENERATION: plan.base_digest, REPEAT: trial.user_attrs.get(REPEAT, 0), RETRY_OF: trial.number}
            if FOLDER in trial.user_attrs:
                attrs[FOLDER] = trial.user_attrs[FOLDER]
            study.enqueue_trial(dict(trial.params), user_attrs=attrs)
            count += 1
    return count


def requeue_stale(study, frozen, retries, drop=(), record=None):
    """Queues trial `frozen` (failed for want of heartbeats) again with its values, folder and attributes (but its
    record and the `drop` ones), as retry number `retries`; with `record`, adds it failed with that record instead
    (a finished trial takes no attribute, and the study lists the last attempt of a trial)."""
    optuna = optuna_module()
    attrs = {key: value for key, value in frozen.user_attrs.items() if key not in (RECORD, *drop)}
    attrs.update({RETRY_OF: frozen.number, STALE_RETRIES: retries})
    if record is None:
        study.enqueue_trial(dict(frozen.params), user_attrs=attrs)
        return
    study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.FAIL, params=frozen.params, distributions=frozen.distributions,
        user_attrs={**attrs, RECORD: record}))


def fail_stale(study):
    """Fails the RUNNING trials of the study whose worker stopped sending heartbeats, and calls the storage's callback
    for each (Optuna's `fail_stale_trials`)."""
    optuna = optuna_module()
    # Serialized as claims are: on SQLite two workers could both fail the trial, and both queue it again.
    with _claims_serialized(study._storage):
        optuna.storages.fail_stale_trials(study)


def trial_for(study, spec, queue, trial_id):
    """The Optuna trial `trial_id` with the study's sampler seeded for it (see `trial_seed`)."""
    optuna = optuna_module()
    number = study._storage.get_trial_number_from_id(trial_id)
    study.sampler = make_sampler(spec, queue, number)
    return optuna.trial.Trial(study, trial_id)


def claim_waiting(study, generation):
    """Takes one WAITING trial of `generation` for this worker (WAITING -> RUNNING); its id, or None."""
    optuna = optuna_module()
    storage = study._storage
    with _claims_serialized(storage):
        for trial in storage.get_all_trials(study._study_id, deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            if trial.user_attrs.get(GENERATION) != generation:
                continue
            try:
                # Succeeds for one worker only: the storage checks the trial is still WAITING.
                if storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.RUNNING):
                    return trial._trial_id
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
    return None


@contextlib.contextmanager
def _claims_serialized(storage):
    """Holds a lock file beside an SQLite study while a worker claims a trial; does nothing for a server.

    Optuna's WAITING -> RUNNING check reads the trial `FOR UPDATE`, which SQLite ignores, and
    pysqlite opens its transaction only at the write: two workers could both read WAITING
    and both take the trial. PostgreSQL and MySQL lock the row.
    """
    engine = getattr(getattr(storage, "_backend", storage), "engine", None)
    if engine is None or engine.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        yield
        return
    with open(f"{engine.url.database}{CLAIM_LOCK_SUFFIX}", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def running_trials(study, generation):
    """The RUNNING trials of `generation` (frozen)."""
    optuna = optuna_module()
    states = (optuna.trial.TrialState.RUNNING,)
    return [t for t in study.get_trials(deepcopy=False, states=states) if t.user_attrs.get(GENERATION) == generation]


def importances(study, generation, minimum=4):
    """Optuna's parameter importances over the finished trials of `generation`, or {} with fewer than `minimum`.

    The keys whose value differs between those trials are ranked; a single one gets 1.0,
    what Optuna's normalized importances give it, without loading Optuna's evaluators.
    """
    optuna = optuna_module()
    complete = [
        trial for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if trial.user_attrs.get(GENERATION) == generation
    ]
    varied = {key for trial in complete for key in trial.params if len({render(t.params.get(key)) for t in complete}) > 1}
    if len(complete) < minimum or not varied:
        return {}
    if len(varied) == 1:
        # Optuna normalizes the importances to sum to 1: one varied key holds all of it.
        # Its importance module imports scikit-learn and SciPy (3 s of CPU) to say so.
        return {varied.pop(): 1.0}
    # Only the trials of this base config, on a throwaway in-memory copy of the study.
    copy = optuna.create_study(direction=study.direction)
    copy.add_trials(complete)
    try:
        return optuna.importance.get_param_importances(copy, params=sorted(varied))
    except (RuntimeError, ValueError):
        return {}


def preview(plan, count=None):
    """The values the sampler would propose for the queue on a fresh study (for --dry-run / --print-commands)."""
    optuna = optuna_module()
    study = optuna.create_study(sampler=make_sampler(plan.spec, plan.queue), direction=direction(plan.spec))
    space = search_space(plan.spec, plan.queue)
    decode = decoder(plan.spec, plan.queue)
    points = []
    for number, entry in enumerate(plan.queue[:count]):
        study.enqueue_trial({key: encode(value) for key, value in entry.fixed})
        # A fresh study numbers its trials as the queue: each is proposed as a worker would.
        study.sampler = make_sampler(plan.spec, plan.queue, number)
        trial = study.ask()
        values = suggest(trial, space, decode)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        points.append((values, entry.repeat))
    return points


def suggest(trial, space, decode):
    """The trial's value for every key of the search space, in the space's order, decoded."""
    distributions = optuna_module().distributions
    values = []
    for key, distribution in space.items():
        if isinstance(distribution, distributions.CategoricalDistribution):
            stored = trial.suggest_categorical(key, distribution.choices)
        elif isinstance(distribution, distributions.IntDistribution):
            stored = trial.suggest_int(key, distribution.low, distribution.high)
        else:
            stored = trial.suggest_float(key, distribution.low, distribution.high, log=distribution.log)
        values.append((key, decode(key, stored)))
    return tuple(values)
