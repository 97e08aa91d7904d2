"""Smoke test of benchmarks/input_pipeline.py --quick: every figure is there; no timing is asserted."""

import json

import pytest

from benchmarks import input_pipeline


@pytest.mark.slow  # the peak-RSS figures come from one child process per reader
def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    input_pipeline.main(["--quick", "--out", str(out), "--workdir", str(tmp_path)])
    results = json.loads(out.read_text())
    speed, rss = results["throughput"], results["peak_rss"]
    assert set(speed["samples_per_sec"]) == {"in_memory", "tfrecord"} and speed["ratio_tfrecord_over_memory"] > 0
    assert rss["in_memory_peak_rss_mib"] > 0 and rss["tfrecord_peak_rss_mib"] > 0 and rss["tfrecord_bytes"] > 0
    assert speed["resume"]["iterator_checkpoint_bytes"] > 0
    assert "ratio" in input_pipeline.summary(results)
