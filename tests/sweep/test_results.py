"""Sweep results (TF-free): failure reasons, results.jsonl and the ranked table."""

import json
import signal

from opt_train.sweep.plan import Trial
from opt_train.sweep.results import append_result, format_table, make_record, sort_rows
from opt_train.sweep.status import FAILED, OK, PENDING, failure_reason
from opt_train.trial import clear_failure, read_failure, write_failure, write_launch_failure
from tests.support import read_jsonl


def row(name, status, accuracy=None, reason=None, lr=0.1):
    metrics = {} if accuracy is None else {"eval/accuracy": accuracy, "train/loss": 1.0 - accuracy, "global_step": 60}
    return {"trial": name, "status": status, "reason": reason, "overrides": {"lr": lr}, "metrics": metrics}


ROWS = [
    row("t1", OK, 0.80, lr=0.1),
    row("t2", FAILED, reason="stopped at step 30: 3 consecutive non-finite steps", lr=1e6),
    row("t3", PENDING, lr=0.5),
    row("t4", OK, 0.95, lr=0.01),
    row("t5", OK, None, lr=0.2),
    row("t6", OK, 0.90, lr=0.03),
]


def test_rows_rank_by_metric_then_ok_without_it_then_failed_then_pending():
    assert [r["trial"] for r in sort_rows(ROWS, "eval/accuracy", "max")] == ["t4", "t6", "t1", "t5", "t2", "t3"]
    assert [r["trial"] for r in sort_rows(ROWS, "eval/accuracy", "min")] == ["t1", "t6", "t4", "t5", "t2", "t3"]


def test_table_columns_align_and_failed_trials_show_their_reason_last():
    lines = format_table(ROWS, ["lr"], "eval/accuracy", "max").splitlines()
    assert lines[0].split() == ["trial", "lr", "eval/accuracy", "train/loss", "global_step", "status"]
    assert [line.split()[0] for line in lines[1:]] == ["t4", "t6", "t1", "t5", "t2", "t3"]
    assert lines[1].split() == ["t4", "0.01", "0.95", "0.05", "60", "ok"]
    assert lines[5].endswith("failed: stopped at step 30: 3 consecutive non-finite steps")
    assert lines[5].split()[1:5] == ["1e+06", "-", "-", "-"]
    starts = {line.index(line.split()[2]) for line in lines[:5]}
    assert len(starts) == 1  # the metric column starts at the same place on every line


def test_failure_reason_is_the_runs_own_stopped_record_of_this_attempt(tmp_path):
    records = tmp_path / "metrics.jsonl"
    records.write_text('{"step": 10, "stopped": "old attempt"}\n')
    start = records.stat().st_size
    with open(records, "a") as handle:
        handle.write('{"step": 20, "loss": 2.0}\n{"step": 30, "stopped": "3 consecutive non-finite updates"}\n')
    log = tmp_path / "train.log"
    log.write_text("Error: stopped at step 30: 3 consecutive non-finite updates (and more words)\n")
    assert failure_reason(log, 1, 0, str(tmp_path), start) == "stopped at step 30: 3 consecutive non-finite updates"
    assert failure_reason(log, 1, 0, str(tmp_path), records.stat().st_size).startswith("stopped at step 30: 3 consecutive non-finite updates (and")


def test_failure_reason_is_the_trials_failure_record_before_its_log_or_records(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 30, "stopped": "3 consecutive non-finite updates"}\n')
    log = tmp_path / "train.log"
    log.write_text("Error: what the log says\n")
    message = "c.yaml:3: data_params.label_column: must name a column. Received: 'nope' [unknown_name]\nsecond"
    write_failure(str(tmp_path), 2, "ConfigError", message, key="data_params.label_column", code="unknown_name")
    assert read_failure(str(tmp_path)) == {"exit_code": 2, "error": "ConfigError", "key": "data_params.label_column",
                                           "code": "unknown_name", "message": message}
    assert failure_reason(log, 2, 0, str(tmp_path)) == message.replace("\n", "; ")
    # A process killed by a signal wrote nothing this attempt: the signal, not an old record.
    assert failure_reason(log, -signal.SIGKILL, 0, str(tmp_path)) == "killed by SIGKILL"
    clear_failure(str(tmp_path))
    clear_failure(str(tmp_path))  # nothing left to remove is fine
    assert read_failure(str(tmp_path)) is None
    assert failure_reason(log, 1, 0, str(tmp_path)) == "stopped at step 30: 3 consecutive non-finite updates"


def test_the_launchers_verdict_keeps_the_key_and_code_of_the_record_it_quotes(tmp_path):
    message = "c.yaml:1: model.factory: importing 'm' failed: RuntimeError: no [user_code]"
    write_failure(str(tmp_path), 2, "ConfigError", message, key="model.factory", code="user_code")
    write_launch_failure(str(tmp_path), 2, f"worker 1 failed (exit code 2): Error: {message}")
    assert read_failure(str(tmp_path)) == {"exit_code": 2, "error": "ConfigError", "key": "model.factory",
                                           "code": "user_code",
                                           "message": f"worker 1 failed (exit code 2): Error: {message}"}
    assert failure_reason(tmp_path / "no.log", 2, 0, str(tmp_path)).startswith("worker 1 failed")


def test_pruned_trials_rank_after_ok_ones_and_show_the_step_they_reached():
    rows = ROWS + [{"trial": "t7", "status": "pruned", "reason": "stopped at step 20", "overrides": {"lr": 1e-7},
                    "metrics": {"eval/accuracy": 0.1, "global_step": 20}}]
    lines = format_table(rows, ["lr"], "eval/accuracy", "max").splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["t4", "t6", "t1", "t5", "t7", "t2", "t3"]
    assert lines[5].endswith("pruned: stopped at step 20")


def test_failure_reason_is_the_last_error_line_of_this_attempt(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Error: old attempt\n")
    start = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("step 10/60 loss 3.2\rstep 20/60 loss nan\nError: stopped at step 30: diverged\nwarning: bye\n")
    assert failure_reason(log, 1, start) == "stopped at step 30: diverged"
    with open(log, "a") as handle:
        handle.write("Traceback (most recent call last):\nTypeError: bad\n")
    assert failure_reason(log, 1, log.stat().st_size - 30) == "TypeError: bad"
    assert failure_reason(log, -signal.SIGKILL, start) == "killed by SIGKILL"
    assert failure_reason(tmp_path / "missing.log", 3) == "exit code 3"


def test_results_jsonl_gets_one_line_per_record_with_overrides_and_metrics(tmp_path):
    trial = Trial(number=1, point=(("optimizer", "SGD"), ("random_seed", 8)), digest="0123abcd", repeat=1)
    record = make_record(trial, "logs/x", OK, exit_code=0, wall_time=1.23456, metrics={"eval/loss": float("inf")})
    append_result(str(tmp_path), record)
    append_result(str(tmp_path), record)
    lines = read_jsonl(tmp_path / "results.jsonl")
    assert len(lines) == 2
    assert lines[0]["trial"] == trial.name and lines[0]["overrides"] == {"optimizer": "SGD", "random_seed": 8}
    assert lines[0]["metrics"] == {"eval/loss": "inf"} and lines[0]["wall_time"] == 1.235
    json.dumps(lines[0], allow_nan=False)
