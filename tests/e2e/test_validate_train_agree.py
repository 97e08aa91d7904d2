"""`opt-train validate` reaches the verdict `train` would: a corpus of bad configs, each refused by both
commands with exit 2 at the same key and code, before TensorFlow builds anything.

The reference for each verdict is the library itself: building that part directly (the
optimizer class through `registry.get`, the lr policy through `get_lr_policy`, the gradient
pipeline through `optimize_loss`, the dataset through `build_data`) raises a `ParamError`
with the same parameter and code.
"""

import re

import pytest

from opt_train.config.schema import join_key
from tests.support import main_code, run_python

BASE = {
    "max_steps": 2,
    "batch_size_per_gpu": 8,
    "data": "synthetic_classification",
    "data_params": {"num_examples": 64, "num_features": 4, "num_classes": 2},
    "model_params": {"hidden_units": [4]},
    "print_loss_steps": 1,
}

# (id, config keys over BASE, expected key, expected code, which library part builds it)
CORPUS = [
    # optimizer parameters: the optimizer's TF-free table, the same one its __init__ checks with
    ("adam_beta_1_high", {"optimizer": "Adam", "optimizer_params": {"beta_1": 1.5}}, "optimizer_params.beta_1", "out_of_range", "optimizer"),
    ("adam_beta1_tf1_spelling", {"optimizer": "AdamOptimizer", "optimizer_params": {"beta1": 1.0}}, "optimizer_params.beta_1", "out_of_range", "optimizer"),
    ("adam_beta_2_negative", {"optimizer": "Adam", "optimizer_params": {"beta_2": -0.1}}, "optimizer_params.beta_2", "out_of_range", "optimizer"),
    ("adam_epsilon_word", {"optimizer": "Adam", "optimizer_params": {"epsilon": "tiny"}}, "optimizer_params.epsilon", "wrong_type", "optimizer"),
    ("adam_unknown_param", {"optimizer": "Adam", "optimizer_params": {"bta1": 0.9}}, "optimizer_params.bta1", "unknown_key", "optimizer"),
    ("adam_two_spellings", {"optimizer": "Adam", "optimizer_params": {"beta1": 0.9, "beta_1": 0.8}}, "optimizer_params.beta1", "conflict", "optimizer"),
    ("momentum_missing", {"optimizer": "Momentum", "optimizer_params": {"learning_rate": 0.1}}, "optimizer_params.momentum", "missing", "optimizer"),
    ("momentum_negative", {"optimizer": "Momentum", "optimizer_params": {"momentum": -0.5}}, "optimizer_params.momentum", "out_of_range", "optimizer"),
    ("momentum_nesterov_word", {"optimizer": "Momentum", "optimizer_params": {"momentum": 0.9, "use_nesterov": "yes"}}, "optimizer_params.use_nesterov", "wrong_type", "optimizer"),
    ("adagrad_accumulator_zero", {"optimizer": "Adagrad", "optimizer_params": {"initial_accumulator_value": 0.0}}, "optimizer_params.initial_accumulator_value", "out_of_range", "optimizer"),
    ("ftrl_power_positive", {"optimizer": "Ftrl", "optimizer_params": {"learning_rate_power": 0.5}}, "optimizer_params.learning_rate_power", "out_of_range", "optimizer"),
    ("ftrl_l1_negative", {"optimizer": "Ftrl", "optimizer_params": {"l1_regularization_strength": -1.0}}, "optimizer_params.l1_regularization_strength", "out_of_range", "optimizer"),
    ("rmsprop_rho_high", {"optimizer": "RMSProp", "optimizer_params": {"rho": 1.5}}, "optimizer_params.rho", "out_of_range", "optimizer"),
    ("adadelta_rho_negative", {"optimizer": "Adadelta", "optimizer_params": {"rho": -0.1}}, "optimizer_params.rho", "out_of_range", "optimizer"),
    ("novograd_beta_2_high", {"optimizer": "NovoGrad", "optimizer_params": {"beta_2": 2.0}}, "optimizer_params.beta_2", "out_of_range", "optimizer"),
    ("sgd_momentum_high", {"optimizer": "SGD", "optimizer_params": {"momentum": 1.5}}, "optimizer_params.momentum", "out_of_range", "optimizer"),
    ("lion_beta_1_zero", {"optimizer": "Lion", "optimizer_params": {"beta_1": 0.0}}, "optimizer_params.beta_1", "out_of_range", "optimizer"),
    ("adamw_weight_decay_negative", {"optimizer": "AdamW", "optimizer_params": {"weight_decay": -0.1}}, "optimizer_params.weight_decay", "out_of_range", "optimizer"),
    ("keras_ftrl_l2_negative", {"optimizer": "KerasFtrl", "optimizer_params": {"l2_regularization_strength": -1.0}}, "optimizer_params.l2_regularization_strength", "out_of_range", "optimizer"),
    ("two_clip_arguments", {"optimizer": "Adam", "optimizer_params": {"clipnorm": 1.0, "global_clipnorm": 1.0}}, "optimizer_params.global_clipnorm", "conflict", "optimizer"),
    ("ema_momentum_high", {"optimizer": "Adam", "optimizer_params": {"use_ema": True, "ema_momentum": 1.5}}, "optimizer_params.ema_momentum", "out_of_range", "optimizer"),
    ("keras_accumulation_argument", {"optimizer": "Adam", "optimizer_params": {"gradient_accumulation_steps": 4}}, "optimizer_params.gradient_accumulation_steps", "conflict", "optimizer"),
    ("custom_sgd_no_learning_rate", {"optimizer": "CustomGradientDescent"}, "optimizer_params.learning_rate", "missing", "optimizer"),
    ("learning_rate_negative", {"optimizer": "Adam", "optimizer_params": {"learning_rate": -1.0}}, "optimizer_params.learning_rate", "out_of_range", "optimizer"),
    # lr policy parameters
    ("exp_decay_rate_missing", {"lr_policy": "exp", "lr_policy_params": {"decay_steps": 10}}, "lr_policy_params.decay_rate", "missing", "lr_policy"),
    ("poly_power_zero", {"lr_policy": "poly", "lr_policy_params": {"power": 0}}, "lr_policy_params.power", "out_of_range", "lr_policy"),
    ("poly_unknown_param", {"lr_policy": "poly", "lr_policy_params": {"decay_stepz": 5}}, "lr_policy_params.decay_stepz", "unknown_key", "lr_policy"),
    ("cosine_min_lr_high", {"lr_policy": "cosine", "lr_policy_params": {"min_lr": 2.0}}, "lr_policy_params.min_lr", "out_of_range", "lr_policy"),
    ("piecewise_lengths", {"lr_policy": "piecewise", "lr_policy_params": {"boundaries": [1, 2], "decay_rates": [0.5]}}, "lr_policy_params.decay_rates", "out_of_range", "lr_policy"),
    ("piecewise_not_increasing", {"lr_policy": "piecewise", "lr_policy_params": {"boundaries": [2, 1], "decay_rates": [1, 1]}}, "lr_policy_params.boundaries", "out_of_range", "lr_policy"),
    ("transformer_d_model_missing", {"lr_policy": "transformer", "lr_policy_params": {"warmup_steps": 4}}, "lr_policy_params.d_model", "missing", "lr_policy"),
    ("poly_begin_after_end", {"lr_policy": "poly", "lr_policy_params": {"begin_decay_at": 5}}, "lr_policy_params.decay_steps", "out_of_range", "lr_policy"),
    ("staircase_word", {"lr_policy": "exp", "lr_policy_params": {"decay_steps": 2, "decay_rate": 0.5, "use_staircase_decay": "on"}}, "lr_policy_params.use_staircase_decay", "wrong_type", "lr_policy"),
    # the gradient pipeline's keys
    ("group_regex_bad", {"optimizer_groups": [{"variables": "("}]}, "optimizer_groups[0].variables", "wrong_type", "pipeline"),
    ("group_lr_multiplier_zero", {"optimizer_groups": [{"variables": "x", "lr_multiplier": 0}]}, "optimizer_groups[0].lr_multiplier", "out_of_range", "pipeline"),
    ("group_optimizer_unknown", {"optimizer_groups": [{"variables": "x", "optimizer": "Adamm"}]}, "optimizer_groups[0].optimizer", "unknown_name", "pipeline"),
    ("group_key_unknown", {"optimizer_groups": [{"variables": "x", "lr_mult": 2}]}, "optimizer_groups[0].lr_mult", "unknown_key", "pipeline"),
    ("group_param_out_of_range", {"optimizer_groups": [{"variables": "x", "optimizer": "KerasAdam", "optimizer_params": {"beta_1": 1.5}}]}, "optimizer_groups[0].optimizer_params.beta_1", "out_of_range", "pipeline"),
    ("group_own_rate", {"optimizer_groups": [{"variables": "x", "optimizer_params": {"learning_rate": 0.1}}]}, "optimizer_groups[0].optimizer_params.learning_rate", "conflict", "pipeline"),
    ("iter_size_zero", {"iter_size": 0}, "iter_size", "out_of_range", "pipeline"),
    ("iter_size_fraction", {"iter_size": 1.5}, "iter_size", "wrong_type", "pipeline"),
    ("max_grad_norm_negative", {"max_grad_norm": -1.0}, "max_grad_norm", "out_of_range", "pipeline"),
    ("larc_eta_missing", {"larc_params": {"larc_mode": "scale"}}, "larc_params.larc_eta", "missing", "pipeline"),
    ("larc_mode_unknown", {"larc_params": {"larc_eta": 0.01, "larc_mode": "clamp"}}, "larc_params.larc_mode", "unknown_name", "pipeline"),
    ("larc_epsilon_zero", {"larc_params": {"larc_eta": 0.01, "epsilon": 0}}, "larc_params.epsilon", "out_of_range", "pipeline"),
    ("dtype_unknown", {"dtype": "float61"}, "dtype", "unknown_name", "pipeline"),
    ("on_nonfinite_unknown", {"on_nonfinite": "ignore"}, "on_nonfinite", "unknown_name", "pipeline"),
    ("max_overflows_zero", {"max_consecutive_overflows": 0}, "max_consecutive_overflows", "out_of_range", "pipeline"),
    ("loss_scale_negative", {"loss_scaling": -4.0}, "loss_scaling", "out_of_range", "pipeline"),
    ("loss_scaler_unknown", {"loss_scaling": "Backof"}, "loss_scaling", "unknown_name", "pipeline"),
    ("static_scale_with_params", {"loss_scaling": 8.0, "loss_scaling_params": {"step_window": 4}}, "loss_scaling_params", "conflict", "pipeline"),
    ("backoff_step_factor", {"loss_scaling": "Backoff", "loss_scaling_params": {"step_factor": 0.5}}, "loss_scaling_params.step_factor", "out_of_range", "pipeline"),
    ("backoff_bounds", {"loss_scaling": "Backoff", "loss_scaling_params": {"scale_min": 8.0, "scale_max": 2.0}}, "loss_scaling_params.scale_max", "out_of_range", "pipeline"),
    ("dynamic_unknown_param", {"loss_scaling": "Dynamic", "loss_scaling_params": {"step_window": 4}}, "loss_scaling_params.step_window", "unknown_key", "pipeline"),
    ("summary_unknown", {"summaries": ["gradient_norms"]}, "summaries[0]", "unknown_name", "pipeline"),
    ("freeze_regex_invalid", {"freeze_variables_regex": "("}, "freeze_variables_regex", "wrong_type", "pipeline"),
    # data parameters
    ("data_param_unknown", {"data_params": {"num_exampels": 64}}, "data_params.num_exampels", "unknown_key", "data"),
    ("data_classes_one", {"data_params": {"num_classes": 1}}, "data_params.num_classes", "out_of_range", "data"),
    ("data_eval_fraction_one", {"data_params": {"eval_fraction": 1.0}}, "data_params.eval_fraction", "out_of_range", "data"),
    ("data_noise_word", {"data_params": {"noise": "loud"}}, "data_params.noise", "wrong_type", "data"),
    ("npz_path_missing", {"data": "npz", "data_params": {}}, "data_params.path", "missing", "data"),
    ("csv_delimiter_long", {"data": "csv", "data_params": {"path": "x.csv", "delimiter": ";;"}}, "data_params.delimiter", "wrong_type", "data"),
]

ISSUE = re.compile(r"^(?:Error: )?(?:\S+?:(?:\d+:)? )?(?P<key>[^\s:]+): .* \[(?P<code>\w+)\]$")


def issues_in(output):
    """(key, code) of every issue line the command printed."""
    found = []
    for line in output.splitlines():
        match = ISSUE.match(line.strip())
        if match:
            found.append((match["key"], match["code"]))
    return found


def test_the_corpus_is_large_and_covers_every_part():
    parts = [case[4] for case in CORPUS]
    assert len(CORPUS) >= 40
    assert {part: parts.count(part) >= 5 for part in set(parts)} == dict.fromkeys(
        ("optimizer", "lr_policy", "pipeline", "data"), True
    )


@pytest.mark.parametrize(
    "overrides, key, code", [case[1:4] for case in CORPUS], ids=[case[0] for case in CORPUS]
)
def test_validate_and_train_refuse_alike(cli, write_config, overrides, key, code):
    config = write_config({**BASE, **overrides})
    verdicts = {}
    for command in ("validate", "train"):
        result = cli(command, "--config", config)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output
        verdicts[command] = issues_in(result.output)
    assert verdicts["validate"] == verdicts["train"] == [(key, code)], verdicts


def _build(part, config):
    """Builds `part` of `config` the way training does, with the library alone."""
    if part == "optimizer":
        from opt_train.optimizers import registry

        params = dict(config.get("optimizer_params", {}))
        return "optimizer_params", lambda: registry.get(config.get("optimizer", "Adam"), **params)
    if part == "lr_policy":
        from opt_train.lr_policies import get_lr_policy

        params = dict(config.get("lr_policy_params", {}))
        return "lr_policy_params", lambda: get_lr_policy(
            config["lr_policy"], learning_rate=0.1, max_steps=config["max_steps"], **params
        )
    if part == "data":
        from opt_train.data import build_data

        return "data_params", lambda: build_data(
            config["data"], dict(config["data_params"]), batch_size=8, seed=0
        )
    from opt_train.config.schema import FEEDS
    from opt_train.optimizers import optimize_loss

    # Each pipeline key as training passes it (config.pipeline_arguments), the raw YAML value here.
    arguments = {argument: config[key] for key, argument in FEEDS.items() if key in config and key != "optimizer"}
    return "", lambda: optimize_loss(
        lambda batch: 0.0, "SGD", {"learning_rate": 0.1}, **arguments,
    ).build([0.0])


@pytest.mark.parametrize(
    "overrides, key, code, part", [case[1:] for case in CORPUS], ids=[case[0] for case in CORPUS]
)
def test_the_library_building_that_part_gives_the_same_key_and_code(overrides, key, code, part):
    from opt_train.errors import ParamError

    section, build = _build(part, {**BASE, **overrides})
    with pytest.raises(ParamError) as caught:
        build()
    error = caught.value
    where = error.key or join_key(section, error.param)
    if part == "pipeline" and key.startswith("summaries["):
        where = "summaries[0]"  # optimize_loss names the list item `summary`
    assert (where, error.code) == (key, code)


def test_train_refuses_a_bad_config_before_importing_tensorflow(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("max_steps: 2\noptimizer: Adam\noptimizer_params:\n  beta_1: 1.5\n")
    done = run_python(main_code(["train", "--config", config], on_exit="assert stop.code == 2, stop.code"))
    assert done.returncode == 0, done.stderr
    assert "optimizer_params.beta_1: must be in [0, 1). Received: 1.5 [out_of_range]" in done.stderr


# Files and user code: what `validate` knows without running anything (modules found, not
# imported; a factory's parameters read from its source), refused by `train` alike.
USER_MODELS = "import keras\n\ndef make(task, width=8):\n    return keras.Sequential([keras.Input(task.input_shape), keras.layers.Dense(task.output_dim)])\n"
USER_DATA = ("import numpy as np\n\ndef make(split, n, scale=1.0):\n    import tensorflow as tf\n"
             "    x = np.random.default_rng(0).normal(size=(n, 4)).astype('float32')\n"
             "    return tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype('int64')))\n")
USER_CORPUS = [
    ("csv_file_missing", {"data": "csv", "data_params": {"path": "none.csv"}}, "data_params.path", "file_not_found"),
    ("npz_eval_file_missing", {"data": "npz", "data_params": {"path": "ok.npz", "eval_path": "gone.npz"}},
     "data_params.eval_path", "file_not_found"),
    ("tfrecord_glob_matches_nothing", {"data": "tfrecord", "data_params": {
        "train_files": "shards/train-*.tfrecord", "features": {"x": {"dtype": "float32", "shape": [4]},
                                                              "y": {"dtype": "int64"}},
        "x": "x", "y": "y", "num_classes": 2}}, "data_params.train_files", "file_not_found"),
    ("saved_model_missing", {"model": {"path": "gone.keras"}, "model_params": {}}, "model.path", "file_not_found"),
    ("optimizer_module_missing", {"optimizer": "no.such.Module"}, "optimizer", "unknown_name"),
    ("model_factory_module_missing", {"model": {"factory": "nomod:make"}, "model_params": {}},
     "model.factory", "user_code"),
    ("model_factory_unknown_param", {"model": {"factory": "user_models:make"}, "model_params": {"widht": 3}},
     "model_params.widht", "unknown_key"),
    ("data_factory_module_missing", {"data": {"factory": "no_data_mod:make"}, "data_params": {"num_classes": 2}},
     "data.factory", "user_code"),
    ("data_factory_param_missing", {"data": {"factory": "user_data:make"}, "data_params": {"num_classes": 2}},
     "data_params.n", "missing"),
    ("data_factory_unknown_param", {"data": {"factory": "user_data:make"},
                                    "data_params": {"num_classes": 2, "n": 64, "sclae": 2}},
     "data_params.sclae", "unknown_key"),
]


@pytest.mark.parametrize("overrides, key, code", [case[1:] for case in USER_CORPUS],
                         ids=[case[0] for case in USER_CORPUS])
def test_validate_and_train_refuse_missing_files_and_user_code_alike(cli, write_config, tmp_path, overrides, key, code):
    import numpy as np

    (tmp_path / "user_models.py").write_text(USER_MODELS)
    (tmp_path / "user_data.py").write_text(USER_DATA)
    np.savez(tmp_path / "ok.npz", x=np.zeros((16, 4), np.float32), y=np.arange(16) % 2)
    # Relative paths are the config folder's (tmp_path), not the current directory's.
    config = write_config({**BASE, **overrides})
    verdicts = {}
    for command in ("validate", "train"):
        result = cli(command, "--config", config)
        assert result.exit_code == 2, (command, result.output)
        assert "Traceback" not in result.output
        verdicts[command] = issues_in(result.output)
    assert verdicts["validate"] == verdicts["train"] == [(key, code)], verdicts
    if code == "file_not_found":  # the message names the path as resolved, in the config's folder
        assert str(tmp_path) in result.output


def test_images_smaller_than_a_keras_application_takes_are_refused_by_both_in_keras_s_words(cli, write_config):
    """Failed before: validate passed MobileNetV2 on 8x8 digits; train refused it only once TensorFlow started."""
    import keras

    config = write_config({**BASE, "model": {"keras_application": "MobileNetV2"}, "model_params": {},
                           "data": "digits", "data_params": {}})
    errors = {}
    for command in ("validate", "train"):
        result = cli(command, "--config", config)
        assert result.exit_code == 2 and "Traceback" not in result.output, (command, result.output)
        [errors[command]] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert errors["validate"] == errors["train"]
    assert issues_in(errors["validate"]) == [("model", "out_of_range")]
    with pytest.raises(ValueError) as refused:
        keras.applications.MobileNetV2(input_shape=(8, 8, 1), weights=None, include_top=False)
    assert str(refused.value).splitlines()[0] in errors["validate"]
