"""Experiment tracking beside the logdir: `tracking: {mlflow: {uri, experiment}}` logs the run to MLflow.

What goes there: the resolved config as params (dotted keys), every figure written to
`metrics.jsonl` as a metric at its step (`loss`, `learning_rate`, `eval/accuracy`, ...),
the final metrics, and `config.yaml` plus `export/` as artifacts. A sweep's trial is a
child run of the study's run (`mlflow.parentRunId`, from `OPT_TRAIN_MLFLOW_PARENT_RUN`,
which the sweep sets). A resumed run continues its MLflow run (`logdir/mlflow_run.json`).

The store is `tracking.mlflow.uri`, else `MLFLOW_TRACKING_URI`, else SQLite beside the
logdir; a relative `sqlite:///` path is the current folder's, as MLflow reads it, and an
experiment opt-train creates there keeps its artifacts where MLflow's own client would
started in the database's folder (`mlruns/<experiment id>` beside the database).

The tracker never fails a run: the first error (the `mlflow` package missing, a server
that is down or refuses) is one whole warning line, and the run goes on untracked. A store
the installed MLflow refuses outright (its file store) is a config error instead
(`refusal`, called by the config rule). `mlflow` is imported only here, when a run starts
with tracking on.
"""

from __future__ import annotations

import math
import os
import time
from urllib.parse import urlparse

from opt_train.atomic import read_json, write_json
from opt_train.board import leaves

PARENT_RUN_VARIABLE = "OPT_TRAIN_MLFLOW_PARENT_RUN"
# MLflow's own variable for the store, read when `tracking.mlflow.uri` is not set.
URI_VARIABLE = "MLFLOW_TRACKING_URI"
# MLflow 3.13 turned its file store's deprecation warning into an exception (FileStore.__init__;
# mlflow/mlflow#23634): a `file:` URI or a bare path fails unless MLflow's opt-out is set.
_FILE_STORE_REFUSED_FROM = (3, 13)
_FILE_STORE_OPT_OUT = "MLFLOW_ALLOW_FILE_STORE"
# Where MLflow's client puts a new experiment's artifacts in a database store: `./mlruns/<id>`.
_ARTIFACT_FOLDER = "mlruns"
RUN_FILE = "mlflow_run.json"
# MLflow retries an unreachable server with back-off for minutes by default: a tracker
# that is down must cost a run seconds, not minutes (a user's own setting wins).
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
# MLflow's limit on a param value's length.
_PARAM_LENGTH = 6000


def default_uri(logdir):
    """The local store when no `uri` is given: `mlflow.db` (SQLite) in the logdir's parent folder."""
    parent = os.path.dirname(os.path.abspath(logdir))
    return "sqlite:///" + os.path.join(parent, "mlflow.db")


def store_uri(settings, logdir):
    """The store a run logs to: `uri`, else `MLFLOW_TRACKING_URI`, else `default_uri(logdir)`.

    A relative SQLite path is made absolute (from the current folder, as MLflow reads it).
    """
    uri = settings.get("uri") or os.environ.get(URI_VARIABLE) or default_uri(logdir)
    path = _sqlite_path(uri)
    if path not in (None, "", ":memory:") and not os.path.isabs(path):
        # MLflow opens it from the current folder; written absolute, a resumed run or a
        # sweep's trial started elsewhere finds the same database.
        return "sqlite:///" + os.path.abspath(path) + uri[len("sqlite:///") + len(path):]
    return uri


def refusal(uri):
    """Why the installed MLflow refuses store `uri` outright (None: it takes it, as far as can be known beforehand)."""
    if urlparse(uri).scheme not in ("", "file"):
        return None
    if os.environ.get(_FILE_STORE_OPT_OUT, "").strip().lower() in ("true", "1"):
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("mlflow")
    except PackageNotFoundError:
        return None  # the run says `mlflow` is missing, whatever the store
    numbers = tuple(int(part) for part in installed.split(".")[:2] if part.isdigit())
    if numbers < _FILE_STORE_REFUSED_FROM:
        return None
    return (f"is MLflow's file store, which MLflow {installed} refuses: use a database such as "
            f"sqlite:///mlflow.db, or set {_FILE_STORE_OPT_OUT}=true (MLflow's opt-out)")


def _sqlite_path(uri):
    """The database path of a `sqlite:///path` URI (its query left off), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return uri[len("sqlite:///"):].split("?", 1)[0]


def _warning(what, uri, error):
    """One whole line: MLflow's message unwrapped, never cut (its last sentence is often the opt-out)."""
    text = " ".join(str(error).split())
    return f"warning: MLflow tracking off for this {what} ({uri}): {type(error).__name__}: {text}"


def start_tracker(config, say, enabled=True):
    """The run's tracker: MLflow when `tracking.mlflow` is set (and `enabled`: the chief), else one that does nothing."""
    settings = (config.tracking or {}).get("mlflow") if enabled else None
    if settings is None:
        return NullTracker()
    return MlflowTracker(config, settings, say)


class NullTracker:
    """No tracking: every call does nothing."""

    def log_figures(self, record):
        pass

    def finish(self, final):
        pass

    def close(self):
        pass


class MlflowTracker(NullTracker):
    """One MLflow run per opt-train run, written with `MlflowClient` (no global active run)."""

    def __init__(self, config, settings, say):
        self.config = config
        self.uri = store_uri(settings, config.logdir)
        self.experiment = settings.get("experiment") or "opt-train"
        self.say = say
        self.client = None
        self.run_id = None
        self.failed = False
        self.finished = False

    def guarded(self, action, *args):
        """Runs `action`; the first failure is one warning line and turns tracking off for this run.

        The MLflow run starts at the first figure, once the run has restored and owns its logdir.
        """
        if self.failed:
            return
        try:
            if self.client is None:
                self.start()
            action(*args)
        except Exception as error:  # noqa: BLE001 - any tracker failure must leave the run alone
            self.failed = True
            self.say(_warning("run", self.uri, error))

    def start(self):
        for name, value in _HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.uri)
        os.makedirs(self.config.logdir, exist_ok=True)
        known = read_json(os.path.join(self.config.logdir, RUN_FILE)) or {}
        if known.get("uri") == self.uri and known.get("run_id"):
            self.run_id = known["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            self.say(f"MLflow: continuing run {self.run_id} at {self.uri}")
            return
        experiment_id = _experiment_id(self.client, self.experiment, self.uri)
        tags = {"opt_train.logdir": os.path.abspath(self.config.logdir)}
        parent = os.environ.get(PARENT_RUN_VARIABLE)
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(
            experiment_id, run_name=os.path.basename(os.path.normpath(self.config.logdir)), tags=tags
        )
        self.run_id = run.info.run_id
        write_json(os.path.join(self.config.logdir, RUN_FILE), {"uri": self.uri, "run_id": self.run_id})
        from mlflow.entities import Param

        params = [Param(key, _param_text(value)) for key, value in leaves(self.config.to_dict())]
        for first in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[first:first + 100])
        self.say(f"MLflow: run {self.run_id} in experiment '{self.experiment}' at {self.uri}")

    def log_figures(self, record):
        """A `metrics.jsonl` record: its numbers as metrics at its step (NaN/inf and text left out)."""
        self.guarded(self._log, record)

    def _log(self, record, step=None):
        if self.run_id is None:
            return
        from mlflow.entities import Metric

        step = int(record.get("step", 0)) if step is None else step
        now = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), now, step)
            for key, value in record.items()
            if key != "step" and _finite_number(value)
        ]
        if metrics:
            self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, final):
        """The final metrics, config.yaml and export/ as artifacts; the run marked finished."""
        self.guarded(self._finish, final)

    def _finish(self, final):
        if self.run_id is None:
            return
        figures = {key: value for key, value in final.items() if key != "global_step"}
        self._log(figures, step=int(final.get("global_step", 0)))
        logdir = self.config.logdir
        self.client.log_artifact(self.run_id, os.path.join(logdir, "config.yaml"))
        export = os.path.join(logdir, "export")
        if self.config.export and os.path.isdir(export):  # not an earlier end's export
            self.client.log_artifacts(self.run_id, export, artifact_path="export")
        self.client.set_terminated(self.run_id, status="FINISHED")
        self.finished = True

    def close(self):
        """A run that ends any other way (failed, stopped, interrupted) is marked FAILED, not left RUNNING."""
        if self.run_id is not None and not self.finished:
            self.guarded(self.client.set_terminated, self.run_id, "FAILED")


def _experiment_id(client, name, uri):
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    path = _sqlite_path(uri)
    if path is None:
        return client.create_experiment(name)  # the store's own default, as MLflow's client
    # MLflow's client would put it in `mlruns/<id>` of the folder the run was started from;
    # beside the database instead (the same folder for `sqlite:///mlflow.db`), so a run
    # started elsewhere does not scatter a store's artifacts.
    from mlflow.exceptions import MlflowException
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    root = os.path.join(os.path.dirname(os.path.abspath(path)), _ARTIFACT_FOLDER)  # a path, as MLflow's own
    try:
        return SqlAlchemyStore(uri, root).create_experiment(name)
    except MlflowException:  # a trial of the same sweep created it meanwhile
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class StudyRun:
    """A sweep's parent MLflow run (its trials are its children); `environment` hands its id to the trial processes.

    Kept in `DIR/mlflow_run.json`, so a resumed sweep adds its trials to the same
    parent. Like a run's tracker, a failure is one line through `say` and no tracking.
    """

    def __init__(self, config, name, out, say):
        settings = (config.tracking or {}).get("mlflow")
        self.run_id = self.client = None
        if settings is None:
            return
        # The trials' default store is beside their logdirs, i.e. in DIR: the study's too.
        uri = store_uri(settings, os.path.join(out, "trial"))
        try:
            for variable, value in _HTTP_DEFAULTS.items():
                os.environ.setdefault(variable, value)
            from mlflow.tracking import MlflowClient

            self.client = MlflowClient(tracking_uri=uri)
            path = os.path.join(out, RUN_FILE)
            known = read_json(path) or {}
            if known.get("uri") == uri and known.get("run_id"):
                self.run_id = known["run_id"]
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                experiment_id = _experiment_id(self.client, settings.get("experiment") or "opt-train", uri)
                tags = {"opt_train.sweep": os.path.abspath(out)}
                self.run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
                os.makedirs(out, exist_ok=True)
                write_json(path, {"uri": uri, "run_id": self.run_id})
            say(f"MLflow: study run {self.run_id} at {uri}; each trial is a child run")
        except Exception as error:  # noqa: BLE001 - tracking never fails a sweep
            self.run_id = None
            say(_warning("sweep", uri, error))

    @property
    def environment(self):
        return {PARENT_RUN_VARIABLE: self.run_id} if self.run_id else {}

    def close(self, status="FINISHED"):
        if self.run_id:
            try:
                self.client.set_terminated(self.run_id, status=status)
            except Exception:  # noqa: BLE001 - the warning was given at the start, or the server went since
                pass


def _param_text(value):
    """As the config says it: `16`, `0.01`, `Adam`, a list in YAML flow style."""
    from opt_train.board import hparam_value

    text = hparam_value(value) if isinstance(value, (list, tuple, dict)) else str(value)
    return text[:_PARAM_LENGTH]


def _finite_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
