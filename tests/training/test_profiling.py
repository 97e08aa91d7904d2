"""`train --profile START:END` / `profile_steps`: a TensorBoard profile of exactly those updates, read by the profile plugin."""

import collections
import glob
import json
import pathlib

import pytest
import yaml

from tests.support import SMALL_RUN

# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def test_profile_of_updates_3_to_5_is_written_with_a_step_marker_each_and_the_profile_plugin_reads_it(cli, write_config, tmp_path):
    config = write_config({**SMALL_RUN, "max_steps": 8, "print_loss_steps": 4})
    result = cli("train", "--config", config, "--profile", "3:5")
    assert result.exit_code == 0, result.output
    directory = tmp_path / "run" / "plugins" / "profile"
    assert f"profiling updates 3-5 into {directory}" in result.output
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["profile_steps"] == [3, 5]
    traces = glob.glob(str(directory / "*" / "*.xplane.pb"))
    assert len(traces) == 1

    # The Profile tab's own converter (tensorboard-plugin-profile / xprof).
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    assert "overview_page" in raw_to_tool_data.xspace_to_tool_names(traces)
    data, _ = raw_to_tool_data.xspace_to_tool_data(traces, "trace_viewer", {})
    events = collections.Counter(e.get("name") for e in json.loads(data)["traceEvents"] if e.get("ph") == "X")
    # One batch read per update traced: updates 3, 4 and 5, not the ones before or after.
    assert events["IteratorGetNextOp::DoCompute"] == 3, events.most_common(20)

    # TensorFlow's step marker (tf.profiler.experimental.Trace("train", step_num=N, _r=1)), one per update.
    # Before: none, and the Profile tab opened on "No step marker observed", 0.0 ms everywhere.
    assert step_markers(traces[0]) == [("train", 3), ("train", 4), ("train", 5)]
    # What the Overview page shows (the plugin's own converter): a step-time row per profiled update.
    data, _ = raw_to_tool_data.xspace_to_tool_data(traces, "overview_page", {})
    step_table = next(table for table in json.loads(data)
                      if isinstance(table, dict) and any(c["id"] == "stepnum" for c in table["cols"]))
    rows = [{col["id"]: cell["v"] for col, cell in zip(step_table["cols"], row["c"])} for row in step_table["rows"]]
    assert [row["stepnum"] for row in rows] == ["train 3", "train 4", "train 5"], step_table["p"]
    assert all(row["stepTimeMs"] > 0 for row in rows)
    assert float(step_table["p"]["steptime_ms_average"]) > 0


def step_markers(trace):
    """(name, step_num) of every root step marker in an `.xplane.pb` (read with TensorFlow's own protobuf classes)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    space.ParseFromString(pathlib.Path(trace).read_bytes())
    markers = []
    for plane in space.planes:
        stat_names = {key: value.name for key, value in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                stats = {stat_names.get(stat.metadata_id): stat.int64_value or stat.uint64_value
                         for stat in event.stats}
                if "step_num" in stats and stats.get("_r") == 1:
                    markers.append((plane.event_metadata[event.metadata_id].name, stats["step_num"]))
    return markers


@pytest.mark.parametrize("flag", ["3", "a:5", "3-5"])
def test_a_bad_profile_flag_names_it(cli, write_config, flag):
    result = cli("train", "--config", write_config(SMALL_RUN), "--profile", flag)
    assert result.exit_code == 2 and "--profile" in result.output and "START:END" in result.output


def test_a_profile_range_backwards_names_the_key(cli, write_config):
    result = cli("train", "--config", write_config(SMALL_RUN), "--profile", "5:3")
    assert result.exit_code == 2 and "profile_steps" in result.output and "[out_of_range]" in result.output
