"""Bad configs and the issue each one produces: code, dotted key and file line (the spec is the reference)."""

import textwrap

import pytest

from opt_train.config import CODES, ConfigError, ConfigIssue, load_config

# (id, YAML text, code, key, line). Every snippet but the "missing" one sets
# max_steps, so each yields exactly the one issue under test.
BAD_CONFIGS = [
    ("unknown_key", "max_steps: 10\nlogdiir: runs/x\n", "unknown_key", "logdiir", 2),
    ("int_gets_fraction", "max_steps: 10\nbatch_size_per_gpu: 2.5\n", "wrong_type", "batch_size_per_gpu", 2),
    ("int_gets_bool", "max_steps: 10\niter_size: true\n", "wrong_type", "iter_size", 2),
    ("int_gets_string", "max_steps: ten\n", "wrong_type", "max_steps", 1),
    ("bool_gets_int", "max_steps: 10\nuse_horovod: 1\n", "wrong_type", "use_horovod", 2),
    ("bool_gets_string", "max_steps: 10\njit_compile: 'yes'\n", "wrong_type", "jit_compile", 2),
    ("float_gets_word", "num_epochs: many\n", "wrong_type", "num_epochs", 1),
    ("int_below_one", "max_steps: 10\nbatch_size_per_gpu: 0\n", "out_of_range", "batch_size_per_gpu", 2),
    ("epochs_zero", "num_epochs: 0\n", "out_of_range", "num_epochs", 1),
    ("eval_steps_fraction", "max_steps: 10\neval_steps: 1.5\n", "wrong_type", "eval_steps", 2),
    ("checkpoints_zero", "max_steps: 10\nnum_checkpoints: 0\n", "out_of_range", "num_checkpoints", 2),
    ("overflows_zero", "max_steps: 10\nmax_consecutive_overflows: 0\n", "out_of_range", "max_consecutive_overflows", 2),
    ("steps_and_epochs", "max_steps: 10\nnum_epochs: 2\n", "conflict", "num_epochs", 2),
    ("larc_eta_negative", "max_steps: 10\nlarc_params:\n  larc_mode: scale\n  larc_eta: -0.1\n", "out_of_range", "larc_params.larc_eta", 4),
    ("larc_mode_unknown", "max_steps: 10\nlarc_params:\n  larc_mode: clamp\n  larc_eta: 0.1\n", "unknown_name", "larc_params.larc_mode", 3),
    ("larc_key_unknown", "max_steps: 10\nlarc_params:\n  larc_etta: 0.1\n", "unknown_key", "larc_params.larc_etta", 3),
    ("model_cannot_serve_task", "max_steps: 10\nmodel: transformer\n", "out_of_range", "model", 2),
    ("model_cannot_serve_data", "max_steps: 10\nmodel: cnn\ndata: reversal\n", "out_of_range", "model", 2),
    ("larc_eta_missing", "max_steps: 10\nlarc_params:\n  larc_mode: clip\n", "missing", "larc_params.larc_eta", 2),
    ("larc_min_update_negative", "max_steps: 10\nlarc_params: {min_update: -1, larc_eta: 0.1}\n", "out_of_range", "larc_params.min_update", 2),
    ("max_grad_norm_zero", "max_steps: 10\nmax_grad_norm: 0\n", "out_of_range", "max_grad_norm", 2),
    ("optimizer_unknown", "max_steps: 10\noptimizer: Adamm\n", "unknown_name", "optimizer", 2),
    ("learning_rate_zero", "max_steps: 10\noptimizer_params:\n  learning_rate: 0\n", "out_of_range", "optimizer_params.learning_rate", 3),
    ("learning_rate_word", "max_steps: 10\noptimizer_params:\n  learning_rate: fast\n", "wrong_type", "optimizer_params.learning_rate", 3),
    ("optimizer_params_list", "max_steps: 10\noptimizer_params: [1, 2]\n", "wrong_type", "optimizer_params", 2),
    ("lr_policy_unknown", "max_steps: 10\nlr_policy: polyy\n", "unknown_name", "lr_policy", 2),
    ("lr_param_unknown", "max_steps: 10\nlr_policy: poly\nlr_policy_params:\n  decay_stepz: 5\n", "unknown_key", "lr_policy_params.decay_stepz", 4),
    ("lr_param_range", "max_steps: 10\nlr_policy: poly\nlr_policy_params:\n  power: 0\n", "out_of_range", "lr_policy_params.power", 4),
    ("warmup_steps_negative", "max_steps: 10\nwarmup:\n  steps: -5\n", "out_of_range", "warmup.steps", 3),
    ("model_unknown", "max_steps: 10\nmodel: mlpp\n", "unknown_name", "model", 2),
    ("model_param_unknown", "max_steps: 10\nmodel: mlp\nmodel_params:\n  hiden_units: [3]\n", "unknown_key", "model_params.hiden_units", 4),
    ("model_factory_shape", "max_steps: 10\nmodel:\n  factory: no_colon_here\n", "wrong_type", "model.factory", 3),
    ("model_factory_key", "max_steps: 10\nmodel:\n  factroy: a.b:c\n", "unknown_key", "model.factroy", 3),
    ("data_unknown", "max_steps: 10\ndata: digitz\n", "unknown_name", "data", 2),
    ("dtype_unknown", "max_steps: 10\ndtype: float64\n", "unknown_name", "dtype", 2),
    ("loss_scaler_unknown", "max_steps: 10\nloss_scaling: Backof\n", "unknown_name", "loss_scaling", 2),
    ("loss_scale_negative", "max_steps: 10\nloss_scaling: -1\n", "out_of_range", "loss_scaling", 2),
    ("loss_scale_negative_string", "max_steps: 10\nloss_scaling: '-1e3'\n", "out_of_range", "loss_scaling", 2),
    ("loss_scale_bool", "max_steps: 10\nloss_scaling: true\n", "wrong_type", "loss_scaling", 2),
    ("static_scale_with_params", "max_steps: 10\nloss_scaling: 128\nloss_scaling_params:\n  step_factor: 2\n", "conflict", "loss_scaling_params", 3),
    ("scaler_param_unknown", "max_steps: 10\nloss_scaling: backoff\nloss_scaling_params:\n  step_windw: 10\n", "unknown_key", "loss_scaling_params.step_windw", 4),
    ("scaler_param_range", "max_steps: 10\nloss_scaling: Backoff\nloss_scaling_params:\n  step_factor: 0.5\n", "out_of_range", "loss_scaling_params.step_factor", 4),
    ("summary_unknown", "max_steps: 10\nsummaries:\n  - learning_rate\n  - gradiens\n", "unknown_name", "summaries[1]", 4),
    ("summaries_not_list", "max_steps: 10\nsummaries: 3\n", "wrong_type", "summaries", 2),
    ("on_nonfinite_unknown", "max_steps: 10\non_nonfinite: ignore\n", "unknown_name", "on_nonfinite", 2),
    ("regularizer_unknown", "max_steps: 10\nregularizer: l3\n", "unknown_name", "regularizer", 2),
    ("regularizer_params_alone", "max_steps: 10\nregularizer_params:\n  scale: 0.1\n", "conflict", "regularizer_params", 2),
    ("regularizer_scale_negative", "max_steps: 10\nregularizer: l2\nregularizer_params:\n  scale: -1\n", "out_of_range", "regularizer_params.scale", 4),
    ("regularizer_param_unknown", "max_steps: 10\nregularizer: l1\nregularizer_params:\n  l2: 0.1\n", "unknown_key", "regularizer_params.l2", 4),
    ("regex_invalid", "max_steps: 10\nfreeze_variables_regex: '('\n", "wrong_type", "freeze_variables_regex", 2),
    ("logdir_empty", "max_steps: 10\nlogdir: ''\n", "wrong_type", "logdir", 2),
    ("mlflow_uri_not_string", "max_steps: 10\ntracking:\n  mlflow:\n    uri: 5\n", "wrong_type", "tracking.mlflow.uri", 4),
    ("mlflow_key_unknown", "max_steps: 10\ntracking:\n  mlflow:\n    url: x\n", "unknown_key", "tracking.mlflow.url", 4),
    ("mlflow_experiment_list", "max_steps: 10\ntracking:\n  mlflow:\n    experiment: [a]\n", "wrong_type",
     "tracking.mlflow.experiment", 4),
    ("mlflow_not_mapping", "max_steps: 10\ntracking:\n  mlflow: 3\n", "wrong_type", "tracking.mlflow", 3),
    ("tracker_unknown", "max_steps: 10\ntracking:\n  wandb: {}\n", "unknown_key", "tracking.wandb", 3),
    ("sweep_not_mapping", "max_steps: 10\nsweep: [1]\n", "wrong_type", "sweep", 2),
    ("seed_fraction", "max_steps: 10\nrandom_seed: 0.5\n", "wrong_type", "random_seed", 2),
    ("duplicate_top_key", "max_steps: 10\nmax_steps: 20\n", "duplicate_key", "max_steps", 2),
    ("duplicate_nested_key", "max_steps: 10\nlarc_params:\n  larc_eta: 0.1\n  larc_eta: 0.2\n", "duplicate_key", "larc_params.larc_eta", 4),
    ("yaml_syntax", "max_steps: 10\nsummaries: [learning_rate\nlogdir: x\n", "yaml_syntax", "", 3),
    ("not_a_mapping", "- max_steps\n- 10\n", "wrong_type", "", 1),
    ("missing_length", "batch_size_per_gpu: 8\n", "missing", "max_steps", None),
]


def load_text(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def issues_of(paths, overrides=()):
    with pytest.raises(ConfigError) as caught:
        load_config([str(path) for path in paths], overrides)
    return caught.value.issues


@pytest.mark.parametrize(
    "text, code, key, line", [case[1:] for case in BAD_CONFIGS], ids=[case[0] for case in BAD_CONFIGS]
)
def test_bad_config_gives_one_located_issue(tmp_path, text, code, key, line):
    path = load_text(tmp_path, text)
    issues = issues_of([path])
    assert [(issue.code, issue.key, issue.line) for issue in issues] == [(code, key, line)]
    assert issues[0].file == str(path)
    assert issues[0].code in CODES


@pytest.mark.parametrize(
    "text, suggestion",
    [
        ("max_steps: 10\nlogdiir: x\n", "did you mean 'logdir'?"),
        ("max_steps: 10\noptimizer: Adamm\n", "did you mean 'Adam'?"),
        ("max_steps: 10\nlr_policy: poly_decy\n", "did you mean 'poly_decay'?"),
        ("max_steps: 10\ndtype: mixd\n", "did you mean 'mixed'?"),
        ("max_steps: 10\nloss_scaling: LogMx\n", "did you mean 'LogMax'?"),
        ("max_steps: 10\nsummaries: [gradient_nrm]\n", "did you mean 'gradient_norm'?"),
        ("max_steps: 10\nlarc_params: {larc_mod: clip, larc_eta: 0.1}\n", "did you mean 'larc_mode'?"),
    ],
)
def test_unknown_names_and_keys_suggest_the_closest(tmp_path, text, suggestion):
    (issue,) = issues_of([load_text(tmp_path, text)])
    assert suggestion in issue.message


def test_issue_line_reads_like_the_spec(tmp_path):
    text = "max_steps: 10\n" + "\n" * 12 + "larc_params:\n  larc_eta: -0.1\n"
    path = load_text(tmp_path, text, "base.yaml")
    (issue,) = issues_of([path])
    assert issue.format() == f"{path}:15: larc_params.larc_eta: must be > 0. Received: -0.1 [out_of_range]"


def test_every_problem_is_reported_at_once_in_file_order(tmp_path):
    path = load_text(
        tmp_path,
        "optimizer: Adamm\nmax_steps: 0\nlogdiir: x\ndtype: float64\n",
    )
    error = None
    try:
        load_config([str(path)], ["iter_size=0"])
    except ConfigError as caught:
        error = caught
    assert [(issue.key, issue.line) for issue in error.issues] == [
        ("optimizer", 1),
        ("max_steps", 2),
        ("logdiir", 3),
        ("dtype", 4),
        ("iter_size", 0),
    ]
    lines = str(error).splitlines()
    assert len(lines) == 5
    assert lines[0] == error.issues[0].format()
    assert lines[-1] == "--set: iter_size: must be >= 1. Received: 0 [out_of_range]"


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    (issue,) = issues_of([missing])
    assert (issue.code, issue.file) == ("file_not_found", str(missing))


def test_a_broken_file_does_not_also_claim_max_steps_is_missing(tmp_path):
    broken = load_text(tmp_path, "max_steps: [10\n")
    assert [issue.code for issue in issues_of([broken])] == ["yaml_syntax"]


def test_issue_format_leaves_out_what_is_unknown():
    assert ConfigIssue(None, None, "max_steps", "missing", "required").format() == "max_steps: required [missing]"
    assert (
        ConfigIssue("a.yaml", None, "", "file_not_found", "no such file").format()
        == "a.yaml: no such file [file_not_found]"
    )
    assert (
        ConfigIssue("--set", 0, "dtype", "unknown_name", "unknown dtype", "f64").format()
        == "--set: dtype: unknown dtype. Received: 'f64' [unknown_name]"
    )


def test_config_error_is_a_value_error_listing_issues():
    issues = [ConfigIssue("a.yaml", 1, "x", "unknown_key", "unknown key")] * 2
    error = ConfigError(issues)
    assert isinstance(error, ValueError)
    assert error.issues == issues
    assert str(error) == "a.yaml:1: x: unknown key [unknown_key]\na.yaml:1: x: unknown key [unknown_key]"


def test_every_bad_model_parameter_is_reported(tmp_path):
    path = load_text(tmp_path, "max_steps: 10\nmodel_params:\n  hiden: 3\n  dropout: 2\n")
    issues = issues_of([path])
    assert sorted((issue.key, issue.code, issue.line) for issue in issues) == [
        ("model_params.dropout", "out_of_range", 4),
        ("model_params.hiden", "unknown_key", 3),
    ]
