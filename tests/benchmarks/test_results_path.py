"""The harness writes a dated results file per run and never replaces an earlier one's."""

import datetime
import re
from pathlib import Path

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



def test_every_kept_results_file_is_dated():
    # Figures quoted in the docs must name the run that produced them, not a file a later run overwrote.
    names = sorted(path.name for path in Path(results_path.FOLDER).glob("*.json"))
    assert names
    assert [name for name in names if not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[\w.-]+\.json", name)] == []
    for name in names:
        datetime.date.fromisoformat(name[:10])
