"""The compatibility pass: OpenSeq2Seq / RETURNN / TF1 spellings read as opt-train keys, conflicts located."""

import sys

import pytest

from opt_train.config import ConfigError, load_config


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def issues_of(path, overrides=()):
    with pytest.raises(ConfigError) as caught:
        load_config([path], overrides)
    return caught.value.issues


def test_learning_rate_in_the_policy_is_the_base_rate(tmp_path):
    path = write(tmp_path, "max_steps: 10\nlr_policy: poly_decay\nlr_policy_params:\n  learning_rate: 0.02\n  power: 2.0\n")
    config = load_config([path])
    assert config.optimizer_params["learning_rate"] == 0.02
    assert config.lr_policy_params == {"power": 2.0}
    assert config.locate("optimizer_params.learning_rate") == (str(path), 4)


def test_learning_rate_in_both_places_agreeing_is_one_rate(tmp_path):
    path = write(tmp_path, "max_steps: 10\noptimizer_params: {learning_rate: 0.1}\n"
                           "lr_policy: exp\nlr_policy_params: {learning_rate: 1e-1, decay_steps: 5, decay_rate: 0.5}\n")
    assert load_config([path]).optimizer_params["learning_rate"] == 0.1


def test_learning_rate_in_both_places_differing_is_a_conflict_naming_both(tmp_path):
    path = write(tmp_path, "max_steps: 10\noptimizer_params:\n  learning_rate: 0.1\n"
                           "lr_policy: exp\nlr_policy_params:\n  learning_rate: 0.2\n  decay_steps: 5\n  decay_rate: 0.5\n")
    [issue] = issues_of(path)
    assert (issue.key, issue.code, issue.line) == ("lr_policy_params.learning_rate", "conflict", 6)
    assert "optimizer_params.learning_rate" in issue.message and "0.1" in issue.message
    assert issue.value == 0.2


@pytest.mark.parametrize("written, dtype", [("tf.float32", "float32"), ("tf.float16", "float16"),
                                            ("tensorflow.bfloat16", "bfloat16"), ("mixed", "mixed")])
def test_tf_dtype_spellings(tmp_path, written, dtype):
    assert load_config([write(tmp_path, f"max_steps: 10\ndtype: {written}\n")]).dtype == dtype


@pytest.mark.parametrize("written, name", [
    ("open_seq2seq.optimizers.novograd.NovoGrad", "NovoGrad"),
    ("tf.train.MomentumOptimizer", "Momentum"),
    ("tf.contrib.opt.LazyAdamOptimizer", "LazyAdam"),
    ("tf.train.AdamOptimizer", "Adam"),
])
def test_dotted_optimizer_paths_reach_opt_trains_class(tmp_path, written, name):
    # Momentum has no default momentum (as in TF1): the config gives one.
    params = "optimizer_params: {momentum: 0.9}\n" if name == "Momentum" else ""
    assert load_config([write(tmp_path, f"max_steps: 10\noptimizer: {written}\n{params}")]).optimizer == name


def test_dotted_policy_path(tmp_path):
    path = write(tmp_path, "max_steps: 10\nlr_policy: open_seq2seq.optimizers.lr_policies.poly_decay\n"
                           "optimizer_params: {learning_rate: 0.1}\n")
    assert load_config([path]).lr_policy == "poly"


def test_tf1_l2_regularizer_is_its_own_name(tmp_path):
    path = write(tmp_path, "max_steps: 10\nregularizer: tf.contrib.layers.l2_regularizer\nregularizer_params: {scale: 0.001}\n")
    config = load_config([path])
    assert (config.regularizer, config.regularizer_params) == ("tf1_l2", {"scale": 0.001})
    assert any("scale * sum(w^2) / 2" in note for note in config.notes)
    # opt-train's own `l2` keeps Keras' meaning.
    assert load_config([write(tmp_path, "max_steps: 10\nregularizer: l2\n", "b.yaml")]).regularizer == "l2"


@pytest.mark.parametrize("written, params, name, expected", [
    ("tf.contrib.layers.xavier_initializer", "", "variance_scaling",
     {"scale": 1.0, "mode": "fan_avg", "distribution": "uniform"}),
    ("tf.contrib.layers.xavier_initializer", "initializer_params: {uniform: false}\n", "variance_scaling",
     {"scale": 1.0, "mode": "fan_avg", "distribution": "truncated_normal"}),
    ("tf.variance_scaling_initializer", "", "variance_scaling",
     {"scale": 1.0, "mode": "fan_in", "distribution": "truncated_normal"}),
    ("tf.contrib.layers.variance_scaling_initializer", "initializer_params: {factor: 1.0, mode: FAN_AVG}\n",
     "variance_scaling", {"scale": 1.0, "mode": "fan_avg", "distribution": "truncated_normal"}),
    ("tf.random_uniform_initializer", "", "random_uniform", {"minval": 0.0, "maxval": 1.0}),
    ("glorot_uniform", "", "glorot_uniform", {}),
])
def test_tf1_initializers_become_keras_ones(tmp_path, written, params, name, expected):
    config = load_config([write(tmp_path, f"max_steps: 10\ninitializer: {written}\n{params}")])
    assert (config.initializer, config.initializer_params) == (name, expected)


def test_eval_batch_size_per_gpu(tmp_path):
    assert load_config([write(tmp_path, "max_steps: 10\neval_batch_size_per_gpu: 7\n")]).eval_batch_size == 7
    [issue] = issues_of(write(tmp_path, "max_steps: 10\neval_batch_size_per_gpu: 7\neval_batch_size: 8\n", "b.yaml"))
    assert (issue.key, issue.code, issue.line) == ("eval_batch_size_per_gpu", "conflict", 2)


def test_returnn_optimizer_block(tmp_path):
    path = write(tmp_path, "max_steps: 10\noptimizer:\n  class: adam\n  epsilon: 1.0e-8\n"
                           "optimizer_params: {learning_rate: 0.001}\n")
    config = load_config([path])
    assert config.optimizer == "Adam"
    assert config.optimizer_params == {"learning_rate": 0.001, "epsilon": 1e-8}
    assert config.locate("optimizer_params.epsilon") == (str(path), 4)


def test_openseq2seq_defaults(tmp_path):
    config = load_config([write(tmp_path, "max_steps: 10\n")])
    assert config.num_checkpoints == 5
    assert config.summaries == ("learning_rate", "global_gradient_norm", "loss_scale")


def test_print_samples_steps_is_accepted_with_a_note(tmp_path):
    config = load_config([write(tmp_path, "max_steps: 10\nprint_samples_steps: 100\n")])
    assert config.print_samples_steps == 100
    [note] = config.notes
    assert note.startswith(f"{tmp_path / 'run.yaml'}:2: print_samples_steps:")


@pytest.mark.parametrize("typed, suggested", [
    ("lr", "optimizer_params.learning_rate"), ("batch_size", "batch_size_per_gpu"),
    ("gradient_clip_val", "max_grad_norm"), ("clipnorm", "max_grad_norm"), ("gpus", "num_gpus"),
    ("epochs", "num_epochs"), ("accum_grad_multiple_step", "iter_size"), ("seed", "random_seed"),
    ("model_dir", "logdir"), ("keep_checkpoint_max", "num_checkpoints"),
])
def test_unknown_keys_suggest_what_other_tools_call_them(tmp_path, typed, suggested):
    [issue] = issues_of(write(tmp_path, f"max_steps: 10\n{typed}: 1\n"))
    assert issue.code == "unknown_key"
    assert f"did you mean '{suggested}'?" in issue.message


def test_nearest_spelling_still_suggested_without_a_synonym(tmp_path):
    [issue] = issues_of(write(tmp_path, "max_steps: 10\nlogdri: x\n"))
    assert "did you mean 'logdir'?" in issue.message


def test_the_compat_pass_imports_no_tensorflow(tmp_path):
    path = write(tmp_path, "max_steps: 10\noptimizer: open_seq2seq.optimizers.novograd.NovoGrad\ndtype: tf.float32\n")
    import subprocess

    code = ("import sys; from opt_train.config import load_config; load_config([sys.argv[1]]); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)


def test_validate_prints_the_notes(tmp_path, cli):
    path = write(tmp_path, "max_steps: 10\nregularizer: tf.contrib.layers.l2_regularizer\n")
    result = cli("validate", "--config", path)
    assert result.exit_code == 0
    assert f"note: {path}:2: regularizer: tf.contrib.layers.l2_regularizer is TF1's" in result.output
    assert "regularizer: tf1_l2" in result.output
