"""`validate` judges the keys that name a built-in model's variables against the paths the model will have
(`config.memory.check_variables`, the rules `train` applies to the built model): a `freeze_variables_regex`
that leaves nothing to train or freezes nothing, and an optimizer group that takes no variable are one line at their key, exit 2,
before TensorFlow starts. (`tests/models/test_size.py` holds those paths to the built Keras models.)"""

import pytest

HEAD = "model: mlp\ndata: digits\nmax_steps: 2\nbatch_size_per_gpu: 16\n"

CASES = [
    ('freeze_variables_regex: "."\n', 5,
     "freeze_variables_regex: matches all 6 variables: no variable left to train. Received: '.' [out_of_range]"),
    # A typo in a fine-tuning config: it would train the layers it was written to hold still.
    ("freeze_variables_regex: '^dense_O'\n", 5,
     "freeze_variables_regex: matches no trainable variable (their paths: dense_0/kernel, dense_0/bias, "
     "dense_1/kernel, dense_1/bias, ... (6 in all)): nothing would be frozen. Received: '^dense_O' [out_of_range]"),
    ("optimizer_groups: [{variables: '^nothing', optimizer: SGD}]\n", 5,
     "optimizer_groups[0].variables: matches no trainable variable (their paths: dense_0/kernel, dense_0/bias, "
     "dense_1/kernel, dense_1/bias, ... (6 in all)). Received: '^nothing' [out_of_range]"),
    ("freeze_variables_regex: '^dense_0'\noptimizer_groups: [{variables: '^dense_0', optimizer: SGD}]\n", 6,
     "optimizer_groups[0].variables: matches only variables freeze_variables_regex freezes (dense_0/kernel, "
     "dense_0/bias): a frozen variable has no optimizer. Received: '^dense_0' [out_of_range]"),
]


def write(tmp_path, text):
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + f"logdir: {tmp_path}/run\n" + text)
    return path


@pytest.mark.parametrize("text, line, said", CASES)
def test_validate_refuses_what_train_would_refuse_of_the_models_variables(cli, tmp_path, text, line, said):
    path = write(tmp_path, text)
    result = cli("validate", "--config", path)
    assert result.exit_code == 2, result.output
    assert [row for row in result.output.splitlines() if row.startswith("Error:")] == [f"Error: {path}:{line + 1}: {said}"]
    assert "Traceback" not in result.output


def test_keys_that_leave_each_group_and_the_optimizer_variables_pass(cli, tmp_path):
    path = write(tmp_path, "freeze_variables_regex: '^dense_0'\noptimizer_groups: [{variables: '^dense_1', optimizer: SGD}]\n")
    assert cli("validate", "--config", path).exit_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("case", [0, 1])
def test_train_refuses_the_built_model_with_the_same_line(cli, tmp_path, case):
    """The reference: the rule `train` applies once the Keras model is built says the same, at the same key."""
    text, line, said = CASES[case]
    path = write(tmp_path, text)
    result = cli("train", "--config", path)
    assert result.exit_code == 2, result.output
    assert f"{path}:{line + 1}: {said}" in result.output
