"""`train --profile START:END` / `profile_steps`: a TensorBoard profile of exactly those updates, read by the profile plugin."""

import collections
import glob
import json

import pytest
import yaml

from tests.support import SMALL_RUN

# No test here looks at logdir/export: its runs skip the end-of-run export (conftest.py: no_export).
pytestmark = pytest.mark.usefixtures("no_export")


def test_profile_of_updates_3_to_5_is_written_and_the_profile_plugin_reads_it(cli, write_config, tmp_path):
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


@pytest.mark.parametrize("flag", ["3", "a:5", "3-5"])
def test_a_bad_profile_flag_names_it(cli, write_config, flag):
    result = cli("train", "--config", write_config(SMALL_RUN), "--profile", flag)
    assert result.exit_code == 2 and "--profile" in result.output and "START:END" in result.output


def test_a_profile_range_backwards_names_the_key(cli, write_config):
    result = cli("train", "--config", write_config(SMALL_RUN), "--profile", "5:3")
    assert result.exit_code == 2 and "profile_steps" in result.output and "[out_of_range]" in result.output
