"""optimizer_groups through `opt-train train`: the first lines say what each group took, a group taking no
variable is refused at its line before the first update, and a run stopped and re-run ends bit for bit
where an uninterrupted run ends (every group's slots in the checkpoint)."""

import numpy as np
import pytest

from tests.support import checkpoint_tensors, one_error_line
from tests.e2e.test_resume import RUN as RESUMED_RUN

# test_resume's run (dropout's RNG state, momentum slots, a decaying rate) with two groups: a second optimizer's
# slots and a multiplied rate have to come back too.
RUN = {
    **RESUMED_RUN,
    "optimizer_groups": [
        {"variables": "bias$", "optimizer": "Adam", "optimizer_params": {"beta_1": 0.8}},
        {"variables": "^logits/", "lr_multiplier": 0.1},
    ],
    "print_loss_steps": 1000,
}

pytestmark = pytest.mark.usefixtures("no_export")


def test_train_says_how_many_variables_each_group_took(write_config):
    """The lines `train` prints first (the run's notes), from the built run alone (nothing traced)."""
    from opt_train.config import load_config
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    run = build_run(load_config([str(write_config({**RUN, "max_steps": 2}))]), get_backend())
    assert run.notes[-3:] == (
        "optimizer_groups[0] ('bias$'): 2 variables, Adam",
        "optimizer_groups[1] ('^logits/'): 1 variable, Momentum, lr x 0.1",
        "the other variables: 1 variable, Momentum",
    )


@pytest.mark.parametrize("groups, frozen, index, fragment", [
    ([{"variables": "^encoder/"}], None, 0, "matches no trainable variable (their paths: dense_0/kernel"),
    ([{"variables": "bias$"}, {"variables": "^logits/bias"}], None, 1, "go to optimizer_groups[0]"),
    ([{"variables": "^dense_0/"}], "^dense_0/", 0, "matches only variables freeze_variables_regex freezes"),
])
def test_a_group_taking_no_variable_is_refused_at_its_line_before_the_first_update(
        cli, write_config, tmp_path, groups, frozen, index, fragment):
    config = write_config({**RUN, "max_steps": 2, "optimizer_groups": groups, "freeze_variables_regex": frozen})
    result = cli("train", "--config", config)
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    where = next(n for n, text in enumerate(config.read_text().splitlines(), 1) if "- variables:" in text) + index
    assert line.startswith(f"Error: {config}:{where}: optimizer_groups[{index}].variables: "), line
    assert fragment in line and line.endswith("[out_of_range]"), line
    assert not (tmp_path / "run" / "checkpoints").exists()


# The first leg ends at its max_steps, not by SIGKILL: what a kill adds (the newest checkpoint that restores,
# an index never naming a half-written one) does not depend on the optimizers, and is
# tests/e2e/test_resume.py's run killed while saving. Every group's slots coming back is this test's. The legs
# save at 7, 10 and 13, the whole run at 10 and 13, so the loop's compiled calls split the steps differently
# (1-6, 7 | 8-10 against 1-10): the carried report_interval's loss sum must not depend on the split (it did,
# by a float32 rounding, when each call returned its mean).
@pytest.mark.slow  # three runs
def test_a_run_stopped_and_rerun_equals_an_uninterrupted_run(cli, write_config, tmp_path):
    legs = write_config({**RUN, "max_steps": 7, "logdir": str(tmp_path / "legs")}, "legs.yaml")
    assert cli("train", "--config", legs).exit_code == 0
    target = 13  # past a decay boundary of the rate (every 10)

    resumed = cli("train", "--config", legs, "--set", f"max_steps={target}")
    assert resumed.exit_code == 0, resumed.output[-2000:]
    assert "resumed from" in resumed.output and "at step 7" in resumed.output, resumed.output[-2000:]
    whole = write_config({**RUN, "max_steps": target, "logdir": str(tmp_path / "whole")}, "whole.yaml")
    assert cli("train", "--config", whole).exit_code == 0

    expected, actual = checkpoint_tensors(tmp_path / "whole"), checkpoint_tensors(tmp_path / "legs")
    assert expected.keys() == actual.keys()
    # Every group's own slots are in the checkpoint, by shape: Adam's two moments of each bias (16,) and (10,),
    # the head's momentum (16, 10), the other kernel's (64, 16).
    shapes = {i: sorted(expected[name].shape for name in expected
                        if name.startswith(f"optimizer/optimizers/{i}/_variables/") and expected[name].ndim)
              for i in range(3)}
    assert shapes == {0: [(10,), (10,), (16,), (16,)], 1: [(16, 10)], 2: [(64, 16)]}, shapes
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)
