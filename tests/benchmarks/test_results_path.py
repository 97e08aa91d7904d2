"""The harness writes a dated results file per run and never replaces an earlier one's."""

import datetime

from benchmarks import results_path


def test_a_run_gets_a_dated_file_and_a_second_run_that_day_a_new_one(tmp_path):
    day = datetime.date(2026, 11, 25)
    first = results_path.dated("harness", folder=tmp_path, today=day)
    assert first == str(tmp_path / "2026-11-25-harness.json")
    (tmp_path / "2026-11-25-harness.json").write_text("{}")
    second = results_path.dated("harness", folder=tmp_path, today=day)
    assert second == str(tmp_path / "2026-11-25-harness-2.json")
    (tmp_path / "2026-11-25-harness-2.json").write_text("{}")
    assert results_path.dated("harness", folder=tmp_path, today=day).endswith("2026-11-25-harness-3.json")
    assert results_path.dated("harness", quick=True, folder=tmp_path, today=day).endswith("2026-11-25-harness-quick.json")

