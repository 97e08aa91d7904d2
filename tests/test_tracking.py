"""MLflow tracking against a real `mlflow server` (SQLite backend, a free port on 127.0.0.1), read back with MlflowClient."""

import importlib.util
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from tests.support import SMALL_RUN, main_code, read_json, read_jsonl, run_python, write_run

# Found, not imported: importing mlflow costs 1.5 s at every xdist worker's collection, fast subset included.
pytestmark = [pytest.mark.slow,  # a server start, a sweep of two trials and several training runs
              pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="needs the [mlflow] extra")]


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    # Without MLflow's job execution: its runner and seven huey consumer processes (each importing
    # mlflow, about 20 s of CPU in all, left running after the server stops) serve nothing a run logs.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder}/store.db", "--default-artifact-root", str(folder / "artifacts"),
         "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"), env=env, start_new_session=True,
    )

    def stop(signum):  # the server and its uvicorn child (its own process group)
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass

    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop(signal.SIGKILL)
                pytest.fail("mlflow server did not start: " + (folder / "server.log").read_text()[-2000:])
            time.sleep(0.2)
    yield uri
    stop(signal.SIGKILL)  # nothing of the server's is read afterwards; SIGTERM waits 3 s for uvicorn
    process.wait()


@pytest.fixture(scope="module")
def sweep(server, tmp_path_factory):
    """The folder of a sweep of two trials tracked on the server, experiment 'observe-sweep'.

    Its trials are the runs the tests read back: each an `opt-train train` process of its own, as
    always, here two at a time (the suite's sweep of real trials side by side, both logging to the
    server at once), with an evaluation and an export.
    """
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    folder = tmp_path_factory.mktemp("tracked-sweep")
    config = write_run(folder, {**SMALL_RUN, "max_steps": 6, "print_loss_steps": 2, "eval_steps": 3,
                                "tracking": {"mlflow": {"uri": server, "experiment": "observe-sweep"}}})
    out = folder / "sweep"
    done = CliRunner().invoke(cli, ["sweep", "-c", str(config), "--grid", "optimizer_params.learning_rate=0.1,0.01",
                                    "--metric", "eval/accuracy", "--mode", "max", "--out", str(out),
                                    "--parallel", "2"], prog_name="opt-train")
    assert done.exit_code == 0, done.output[-3000:] + repr(done.exception)
    return out


def test_a_run_logs_params_figures_final_metrics_and_artifacts(server, sweep):
    from mlflow.tracking import MlflowClient

    # One of the sweep's trials: a run as `opt-train train` makes it, the sweep's child in MLflow.
    out = sweep
    trials = read_jsonl(out / "results.jsonl")
    (record,) = [r for r in trials if r["overrides"]["optimizer_params.learning_rate"] == 0.01]
    logdir = pathlib.Path(record["logdir"])
    run_id = read_json(logdir / "mlflow_run.json")["run_id"]
    assert f"MLflow: run {run_id} in experiment 'observe-sweep' at {server}" in (logdir / "train.log").read_text()

    client = MlflowClient(tracking_uri=server)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == logdir.name
    resolved = yaml.safe_load((logdir / "config.yaml").read_text())
    params = run.data.params
    assert params["optimizer"] == "Adam" and params["optimizer_params.learning_rate"] == "0.01"
    assert params["batch_size_per_gpu"] == str(resolved["batch_size_per_gpu"])
    assert params["model_params.hidden_units"] == "[8]"
    # Every figure of metrics.jsonl at its step, to the float.
    records = read_jsonl(logdir / "metrics.jsonl")
    expected = [(r["step"], r["loss"]) for r in records if "loss" in r]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == expected
    assert [m.step for m in client.get_metric_history(run_id, "learning_rate")] == [2, 4, 6]
    evaluations = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
    history = [(m.step, m.value) for m in client.get_metric_history(run_id, "eval/accuracy")]
    assert history[:len(evaluations)] == evaluations
    final = read_json(logdir / "final_metrics.json")
    assert history[-1] == (6, final["eval/accuracy"])  # the final metrics, at the last step
    assert run.data.metrics["train/loss"] == pytest.approx(final["train/loss"])
    artifacts = {item.path for item in client.list_artifacts(run_id)}
    assert {"config.yaml", "export"} <= artifacts
    assert "export/model.keras" in {item.path for item in client.list_artifacts(run_id, "export")}


def test_a_resumed_run_continues_its_mlflow_run(server, cli, write_config, tmp_path):
    from mlflow.tracking import MlflowClient

    run = {**SMALL_RUN, "max_steps": 4, "print_loss_steps": 2, "export": False, "tracking": {"mlflow": {"uri": server}}}
    assert cli("train", "--config", write_config(run)).exit_code == 0
    first = read_json(tmp_path / "run" / "mlflow_run.json")["run_id"]
    assert cli("train", "--config", write_config({**run, "max_steps": 6})).exit_code == 0
    assert read_json(tmp_path / "run" / "mlflow_run.json")["run_id"] == first
    history = MlflowClient(tracking_uri=server).get_metric_history(first, "loss")
    assert [m.step for m in history] == [2, 4, 6]


def test_a_tracker_that_is_down_is_one_warning_line_and_the_run_succeeds(cli, write_config, tmp_path):
    down = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    config = write_config({**SMALL_RUN, "max_steps": 4, "print_loss_steps": 2, "export": False,
                           "tracking": {"mlflow": {"uri": down}}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "MLflow" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: MLflow tracking off for this run ({down})")
    assert (tmp_path / "run" / "final_metrics.json").exists()


def test_without_uri_the_store_is_sqlite_beside_the_logdir(cli, write_config, tmp_path):
    from mlflow.tracking import MlflowClient

    config = write_config({**SMALL_RUN, "max_steps": 2, "print_loss_steps": 2, "export": False,
                           "tracking": {"mlflow": {}}})
    assert cli("train", "--config", config).exit_code == 0
    store = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = read_json(tmp_path / "run" / "mlflow_run.json")["run_id"]
    client = MlflowClient(tracking_uri=store)
    assert client.get_run(run_id).info.status == "FINISHED"
    # Beside the database, where MLflow's own client started in that folder puts them.
    experiment = client.get_experiment_by_name("opt-train")
    assert experiment.artifact_location == f"{tmp_path}/mlruns/{experiment.experiment_id}"


def test_a_relative_sqlite_store_is_tracked_with_artifacts_where_mlflows_client_puts_them(
        cli, write_config, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    # The form MLflow's own messages recommend, from the folder the user works in.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = write_config({**SMALL_RUN, "max_steps": 2, "print_loss_steps": 2, "export": False,
                           "tracking": {"mlflow": {"uri": "sqlite:///mlflow.db", "experiment": "relative"}}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output, result.output
    run_id = read_json(tmp_path / "run" / "mlflow_run.json")["run_id"]

    client = MlflowClient(tracking_uri="sqlite:///mlflow.db")  # read back as the user would, from the same folder
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [2]
    assert {item.path for item in client.list_artifacts(run_id)} >= {"config.yaml"}
    # MLflow's own client, given the same store, puts a new experiment's artifacts in the same folder.
    ours = client.get_experiment_by_name("relative").artifact_location
    reference = client.get_experiment(client.create_experiment("reference")).artifact_location
    assert os.path.dirname(ours) == os.path.dirname(reference)
    assert os.path.isfile(os.path.join(run.info.artifact_uri, "config.yaml"))


def test_mlflow_tracking_uri_in_the_environment_is_the_store_when_no_uri_is_set(
        cli, write_config, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path}/elsewhere/env.db"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    config = write_config({**SMALL_RUN, "max_steps": 2, "print_loss_steps": 2, "export": False,
                           "tracking": {"mlflow": {}}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    run_id = read_json(tmp_path / "run" / "mlflow_run.json")["run_id"]
    assert f"at {store}" in result.output
    assert MlflowClient(tracking_uri=store).get_run(run_id).info.status == "FINISHED"
    assert not (tmp_path / "mlflow.db").exists()  # not the default store beside the logdir


@pytest.mark.parametrize("how", ["key", "environment"])
def test_a_file_store_the_installed_mlflow_refuses_is_a_config_error_naming_the_key_and_the_opt_out(
        cli, write_config, tmp_path, monkeypatch, how):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    store = (tmp_path / "mlruns").as_uri()
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(MlflowException, match="MLFLOW_ALLOW_FILE_STORE"):  # the installed MLflow refuses it
        MlflowClient(tracking_uri=store).search_experiments()
    settings = {"uri": store} if how == "key" else {}
    if how == "environment":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    config = write_config({**SMALL_RUN, "tracking": {"mlflow": settings}})
    result = cli("validate", "--config", config)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "tracking.mlflow.uri" in lines[0] and "MLFLOW_ALLOW_FILE_STORE=true" in lines[0]
    assert ("MLFLOW_TRACKING_URI" in lines[0]) == (how == "environment")
    # With MLflow's opt-out set, MLflow takes the store, and so does opt-train.
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert cli("validate", "--config", config).exit_code == 0
    MlflowClient(tracking_uri=store).search_experiments()


def test_a_tracker_error_is_one_whole_line_with_mlflows_last_sentence(cli, write_config, tmp_path):
    # A store MLflow refuses at the first call, not known beforehand: a Unity Catalog URI.
    config = write_config({**SMALL_RUN, "max_steps": 2, "print_loss_steps": 2, "export": False,
                           "tracking": {"mlflow": {"uri": "databricks-uc://profile"}}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if "MLflow" in line]
    assert len(warnings) == 1, result.output
    assert warnings[0].startswith("warning: MLflow tracking off for this run (databricks-uc://profile)")
    assert warnings[0].endswith("listed above.")  # MLflow's message to its end


def test_validate_and_help_do_not_import_mlflow(write_config):
    config = write_config({**SMALL_RUN, "tracking": {"mlflow": {"uri": "http://127.0.0.1:1"}}})
    done = run_python(main_code(["--help"], ["validate", "--config", config],
                                then="assert 'mlflow' not in sys.modules, 'mlflow imported'\n"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_sweep_is_one_run_with_a_child_run_per_trial(server, sweep):
    from mlflow.tracking import MlflowClient

    out = sweep
    parent = read_json(out / "mlflow_run.json")["run_id"]
    client = MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("observe-sweep")
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    records = read_jsonl(out / "results.jsonl")
    assert sorted(run.info.run_name for run in children) == sorted(r["trial"] for r in records)
    assert {run.data.params["optimizer_params.learning_rate"] for run in children} == {"0.1", "0.01"}
    assert all(run.info.status == "FINISHED" for run in children)
    assert client.get_run(parent).info.status == "FINISHED"
