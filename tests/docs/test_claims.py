"""What the pages claim about configs, run: the README's example is the default config, the conflicts the
pages name are refused as conflicts, and `max_grad_norm` with `larc_params` trains (clipping, then LARC)."""

import pathlib
import re

import pytest
import yaml

from opt_train.config import ConfigError, load_config
from tests.support import read_json

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]


def test_the_readme_example_is_the_default_config():
    """Failed before: the README showed a Momentum/poly/clip/iter_size config; the first command runs Adam."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## The example\n", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)[1]
    assert example == (REPO / "configs" / "default.yaml").read_text()


# "`conflict` (e.g. `a` with `b`, ...)" and "`a` and `b` together are a config error".
CONFLICT_LIST = re.compile(r"`conflict`\s*\(e\.g\.([^)]*)\)")
PAIR = re.compile(r"`(\w+)` with `(\w+)`")
TOGETHER = re.compile(r"`(\w+)` and `(\w+)` together (?:are|is) a config error")
# A valid value for each key a claimed conflict names.
SAMPLES = {"max_steps": 10, "num_epochs": 1, "max_grad_norm": 1.0, "larc_params": {"larc_eta": 0.002}}


def claimed_conflicts():
    pairs = set()
    for page in PAGES:
        text = " ".join(page.read_text().split())
        for listed in CONFLICT_LIST.findall(text):
            pairs |= {(page.name, *pair) for pair in PAIR.findall(listed)}
        pairs |= {(page.name, *pair) for pair in TOGETHER.findall(text)}
    return sorted(pairs)


def test_the_pages_claim_some_conflict():
    assert claimed_conflicts()


@pytest.mark.parametrize("page, first, second", claimed_conflicts())
def test_each_conflict_a_page_names_is_refused_as_one(page, first, second, tmp_path):
    """Failed before: gradient-pipeline.md and config.md called `max_grad_norm` with `larc_params` one."""
    missing = {first, second} - set(SAMPLES)
    assert not missing, f"{page}: give SAMPLES a valid value for {sorted(missing)}"
    config = tmp_path / "x.yaml"
    config.write_text(yaml.safe_dump({"model": "mlp", "data": "digits", first: SAMPLES[first],
                                      second: SAMPLES[second]}))
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    assert any(issue.code == "conflict" and issue.key.split(".")[0] in (first, second)
               for issue in refused.value.issues), f"{page}: `{first}` with `{second}`: {refused.value}"


def test_max_grad_norm_with_larc_params_trains(cli, write_config, tmp_path):
    """What gradient-pipeline.md says: both act (tests/optimizers/test_optimize_loss.py holds the order,
    clipping then LARC, to a NumPy re-computation)."""
    config = write_config({"model": "mlp", "model_params": {"hidden_units": [8]}, "data": "digits",
                           "batch_size_per_gpu": 16, "max_steps": 2, "eval_steps": None,
                           "save_summaries_steps": None, "max_grad_norm": 0.01, "larc_params": {"larc_eta": 0.002}})
    result = cli("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert read_json(tmp_path / "run" / "final_metrics.json")["global_step"] == 2
