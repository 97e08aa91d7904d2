"""The `--np` sections of docs/logdirs.md and docs/distribution.md say what the launcher does: tf workers without `use_horovod`.

The reference is `opt-train validate --np 2` itself (TF-free): a config that never names
Horovod runs as `distributed: tf`. Before, logdirs.md said `--np` refused a config
without `use_horovod: true`.
"""

import re

from tests.support import REPO


# Where each page's paragraph on what `--np` starts begins.
NP_PARAGRAPHS = {"logdirs.md": "**`opt-train train --np N", "distribution.md": "`--np` starts the backend"}


def np_section(page):
    """The paragraph of `page` that says what `opt-train train --np N` starts."""
    text = (REPO / "docs" / page).read_text()
    start = text.index(NP_PARAGRAPHS[page])
    return re.sub(r"\s+", " ", text[start:text.index("\n\n", start)])


def test_both_pages_say_np_starts_tf_workers_without_use_horovod(cli, write_config):
    result = cli("validate", "--config", write_config({"model": "mlp", "data": "digits", "max_steps": 5}), "--np", "2")
    assert result.exit_code == 0 and "distributed: tf" in result.output, result.output
    for page in NP_PARAGRAPHS:
        section = np_section(page)
        assert "`--set distributed=tf`" in section, (page, section)
        assert "without `use_horovod: true`" not in section, (page, section)
