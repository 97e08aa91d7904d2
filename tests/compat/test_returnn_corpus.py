"""RETURNN constructs, one test each, on real configs (tests/compat/returnn/, training keys transcribed
from rwth-i6/returnn-experiments and rwth-i6/returnn) and on small ones written here.

Expected values are read off the source files by hand and recomputed with NumPy where the
source computes them (numpy.linspace warm-ups, sub-epoch boundaries).
"""

import math
import pathlib

import numpy as np
import pytest
import yaml

from opt_train.config import load_config
from opt_train.config.issues import ConfigError
from opt_train.convert import convert

HERE = pathlib.Path(__file__).parent / "returnn"
CORPUS = sorted(path.name for path in HERE.iterdir())
FILLED = ["model=mlp", "data=digits", "eval_steps=10"]
# Configs whose conversion asks for a value on purpose: key -> why (checked below).
ASKS = {
    "2023_chunked_aed_global_aed_baseline.config": ("lr_policy", "missing"),  # a cyclic dynamic_learning_rate
    "2019_asr_synthetic_dec640_enc256_enclstm512.config": ("max_steps", "missing"),  # num_epochs = config.int(...)
}


def converted(name_or_path, tmp_path, overrides=FILLED):
    source = name_or_path if isinstance(name_or_path, pathlib.Path) else HERE / name_or_path
    result = convert("returnn", str(source))
    out = tmp_path / "converted.yaml"
    out.write_text(result.to_yaml())
    return result, load_config([out], list(overrides))


def write(tmp_path, text, name="returnn.config"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_corpus_has_thirty_or_more_real_configs():
    assert len(CORPUS) >= 30
    sources = [(HERE / name).read_text().splitlines()[0] for name in CORPUS]
    from_upstream = [line for line in sources if "rwth-i6/returnn" in line or "RETURNN's demos" in line]
    assert len(from_upstream) >= 30


@pytest.mark.parametrize("name", CORPUS)
def test_every_config_converts_and_validates_once_model_and_data_are_named(name, tmp_path):
    if name in ASKS:
        with pytest.raises(ConfigError) as caught:
            converted(name, tmp_path)
        assert [(i.key, i.code) for i in caught.value.issues] == [ASKS[name]]
        return
    result, config = converted(name, tmp_path)
    assert config.num_epochs is not None
    text = (tmp_path / "converted.yaml").read_text()
    assert "model: (fill in)" in text and "data: (fill in)" in text


# -- learning rates: expressions, sub-epochs -----------------------------------------------


def test_linspace_warmup_in_sub_epochs(tmp_path):
    """2019-asr-e2e-trafo-vs-lstm ocd.scratch.specaug4.eos: partition_epoch 4 (through get_dataset),
    num_epochs 150, learning_rates = list(numpy.linspace(0.0003, learning_rate=0.0008, num=10))."""
    result, config = converted("2019_asr_e2e_scratch_specaug4_eos.config", tmp_path)
    assert config.num_epochs == 150 / 4
    rates = np.linspace(0.0003, 0.0008, num=10)
    params = config.lr_policy_params
    assert config.lr_policy == "piecewise" and params["switch_on_boundary"] is True
    assert params["boundaries"] == pytest.approx([k / 4 for k in range(1, 10)])
    assert config.optimizer_params["learning_rate"] == rates[0]
    np.testing.assert_allclose([rates[0] * r for r in params["decay_rates"]], rates[1:], rtol=1e-12)
    assert any("sub-epoch" in note and "partition_epoch 4" in note for note in result.notes)


def test_sub_epoch_k_trains_at_its_rate_from_its_first_update(tmp_path):
    from opt_train.training.builder import learning_rate_schedule

    _, config = converted("2019_asr_e2e_scratch_specaug4_eos.config", tmp_path)
    per_epoch = 40  # updates in one pass over the data: a sub-epoch is 10
    schedule, _ = learning_rate_schedule(config, int(config.num_epochs * per_epoch), per_epoch)
    rates = np.linspace(0.0003, 0.0008, num=10)
    steps = np.array([0, 9, 10, 19, 20, 89, 90, 1000])
    expected = [rates[0], rates[0], rates[1], rates[1], rates[2], rates[8], rates[9], rates[9]]
    np.testing.assert_allclose(np.asarray(schedule(steps), np.float64), expected, rtol=1e-6)


@pytest.mark.parametrize("expression, expected", [
    ("[0.0003] * 10 + list(numpy.linspace(0.0003, learning_rate, num=10))",
     [0.0003] * 10 + list(np.linspace(0.0003, 0.001, num=10))),
    ("[learning_rate * 0.5 ** (i // 3) for i in range(9) if i != 4]",
     [0.001 * 0.5 ** (i // 3) for i in range(9) if i != 4]),
    ("np.geomspace(1e-3, 1e-5, 5).tolist()", list(np.geomspace(1e-3, 1e-5, 5))),
    ("list(numpy.logspace(-3, -4, num=4))", list(np.logspace(-3, -4, num=4))),
    ("tuple(learning_rate / (k + 1) for k in range(6))", [0.001 / (k + 1) for k in range(6)]),
])
def test_learning_rate_expressions_are_evaluated_on_the_syntax_tree(expression, expected, tmp_path):
    path = write(tmp_path, f"import numpy\nimport numpy as np\nadam = True\nlearning_rate = 0.001\n"
                           f"num_epochs = 20\nlearning_rates = {expression}\n")
    _, config = converted(path, tmp_path)
    base = config.optimizer_params["learning_rate"]
    assert base == pytest.approx(expected[0], rel=1e-12)
    got = [base] + [base * rate for rate in config.lr_policy_params["decay_rates"]]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_the_evaluator_runs_nothing_and_bounds_sizes(tmp_path):
    marker = tmp_path / "ran"
    path = write(tmp_path, (
        "import os\nadam = True\nnum_epochs = 2\n"
        f"learning_rates = [__import__('os').system('touch {marker}')] + [0.1]\n"
        f"x = [open('{marker}', 'w') for _ in range(3)]\n"
        "big = [0.1] * 10**9\npower = 2 ** 10**9\n"
    ))
    result = convert("returnn", str(path))
    assert not marker.exists()
    dropped = {key: why for key, _, why in result.dropped}
    assert "learning_rates" in dropped and result.data["lr_policy"] == "(fill in)"
    assert "big" in dropped and "power" in dropped


def test_partition_epoch_in_a_dataset_dict(tmp_path):
    """2018-asr-attention librispeech LM: get_dataset returns a dict with partition_epoch epoch_split["train"] (4)."""
    result, config = converted("2018_asr_attention_newbobabs_d0_2.config", tmp_path)
    assert config.num_epochs == 30 / 4
    assert any(note.startswith("num_epochs: 30 of RETURNN's sub-epochs (partition_epoch 4)") for note in result.notes)


def test_partition_epoch_that_needs_the_config_to_run_is_named(tmp_path):
    result = convert("returnn", str(HERE / "2019_asr_synthetic_dec640_enc256_enclstm512.config"))
    assert any(note.startswith("train: its partition_epoch needs the config to run") for note in result.notes)


def test_unrecognised_dynamic_learning_rate_is_refused_not_a_constant_rate(tmp_path, cli):
    out = tmp_path / "aed.yaml"
    assert cli("convert", "returnn", HERE / "2023_chunked_aed_global_aed_baseline.config", "--out", out).exit_code == 0
    assert yaml.safe_load(out.read_text())["lr_policy"] == "(fill in)"
    result = cli("validate", "--config", out, "--set", "model=mlp", "--set", "data=digits")
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if "lr_policy" in line]
    assert len(lines) == 1 and "is to be filled in" in lines[0] and "Traceback" not in result.output


def test_unknown_learning_rate_control_is_refused(tmp_path):
    path = write(tmp_path, "adam = True\nnum_epochs = 3\nlearning_rate = 0.1\nlearning_rate_control = 'cosine'\n")
    with pytest.raises(ConfigError) as caught:
        converted(path, tmp_path)
    assert [(i.key, i.code) for i in caught.value.issues] == [("lr_control", "missing")]


def test_returnn_default_num_epochs_is_five(tmp_path):
    path = write(tmp_path, "adam = True\nlearning_rate = 0.1\n")
    result, config = converted(path, tmp_path)
    assert config.num_epochs == 5


# -- newbob ---------------------------------------------------------------------------------


def test_newbob_measure_and_min_epochs_are_named(tmp_path):
    """2021-swb-conformer-hybrid baseline_6l: newbob_multi_epoch on 'dev_error_output', min 3 epochs per rate,
    newbob_learning_rate_decay 0.9."""
    result, config = converted("2021_swb_conformer_layers_baseline_6l.config", tmp_path)
    assert config.lr_control["mode"] == "newbob" and config.lr_control["decay"] == 0.9
    assert config.lr_control["relative_error_relative_lr"] is True
    notes = "\n".join(result.notes)
    assert "learning_rate_control_error_measure: dev_error_output" in notes
    assert "learning_rate_control_min_num_epochs_per_new_lr: 3" in notes
    assert "newbob_multi_num_epochs (3)" in notes


@pytest.mark.parametrize("name, measure, fragment", [
    ("2019_asr_e2e_scratch_specaug4_eos.config", "dev_score_output", "is the dev loss"),
    ("2018_asr_attention_newbobabs_d0_2.config", "dev_score_output:exp", "perplexity"),
])
def test_newbob_measure_on_the_dev_score_is_eval_loss(name, measure, fragment, tmp_path):
    result, config = converted(name, tmp_path)
    assert config.lr_control["monitor"] == "loss"
    assert any(note.startswith(f"learning_rate_control_error_measure: {measure!r}") and fragment in note
               for note in result.notes)


def test_newbob_abs_reads_its_decay(tmp_path):
    _, config = converted("2018_attention_librispeech_newbobabs_d0_2.config", tmp_path)
    assert config.lr_control["mode"] == "newbob_abs" and config.lr_control["decay"] == 0.8
    assert config.max_grad_norm == 2.0  # gradient_clip_global_norm = 2.


# -- optimizer switches ----------------------------------------------------------------------


def test_rmsprop_float_is_its_decay_with_momentum(tmp_path):
    """2016-seqtrain-paper ce.lstm.3l.rmsprop.momentum: rmsprop = 0.9, momentum = 0.9, gradient_clip = 10."""
    _, config = converted("2016_seqtrain_paper_4_wpriors_wonp.config", tmp_path)
    assert config.optimizer == "RMSProp"
    assert config.optimizer_params == {"rho": 0.9, "momentum": 0.9, "clipvalue": 10, "learning_rate": 0.0001,
                                       "epsilon": 1e-16}


@pytest.mark.parametrize("switches, optimizer, params", [
    ("rmsprop = True\n", "RMSProp", {"epsilon": 1e-16}),
    ("rmsprop = 0.8\n", "RMSProp", {"rho": 0.8, "epsilon": 1e-16}),
    ("rmsprop = 0.8\nmomentum = 0.5\n", "RMSProp", {"rho": 0.8, "momentum": 0.5, "epsilon": 1e-16}),
    ("adagrad = True\n", "Adagrad", {}),
    ("adadelta = True\n", "Adadelta", {"epsilon": 1e-16}),
    ("nadam = True\n", "ReturnnNadam", {"epsilon": 1e-16}),
    ("adam = True\n", "Adam", {"epsilon": 1e-16}),
    ("momentum = 0.9\n", "Momentum", {"momentum": 0.9}),
    ("", "GradientDescent", {}),
    # RETURNN's updater tests adam before rmsprop, rmsprop before momentum.
    ("rmsprop = True\nadam = True\n", "Adam", {"epsilon": 1e-16}),
    ("adagrad = True\nadadelta = True\n", "Adadelta", {"epsilon": 1e-16}),
])
def test_every_optimizer_switch(switches, optimizer, params, tmp_path):
    path = write(tmp_path, f"learning_rate = 0.01\nnum_epochs = 2\n{switches}")
    _, config = converted(path, tmp_path)
    assert config.optimizer == optimizer
    assert config.optimizer_params == {"learning_rate": 0.01, **params}


def test_momentum_alone_is_momentum_sgd_in_a_real_config(tmp_path):
    """2019-asr-resnet-lace-cnn lace_lr1e-5_mom0.99: momentum = 0.99, no optimizer switch, learning_rate 1e-5."""
    _, config = converted("2019_asr_resnet_5_mom0_99.config", tmp_path)
    assert (config.optimizer, config.optimizer_params) == ("Momentum", {"momentum": 0.99, "learning_rate": 1e-05})


def test_momentum_with_adam_is_named_as_returnn_refuses_it(tmp_path):
    path = write(tmp_path, "adam = True\nmomentum = 0.9\nlearning_rate = 0.01\nnum_epochs = 2\n")
    result, config = converted(path, tmp_path)
    assert "momentum" not in config.optimizer_params
    assert any(key == "momentum" and "refuses" in why for key, _, why in result.dropped)


# -- gradient clipping and noise --------------------------------------------------------------


def test_gradient_clip_is_per_value_clipping(tmp_path):
    """RETURNN's gradient_clip is tf.clip_by_value(g, -c, c): Keras' clipvalue, checked on one SGD step."""
    import tensorflow as tf

    from opt_train.optimizers.pipeline import make_optimizer

    path = write(tmp_path, "learning_rate = 0.1\nnum_epochs = 1\ngradient_clip = 1.5\n")
    _, config = converted(path, tmp_path)
    assert config.optimizer_params["clipvalue"] == 1.5 and config.max_grad_norm is None
    optimizer = make_optimizer(config.optimizer, config.optimizer_params)
    weights = tf.Variable([1.0, 1.0, 1.0])
    grad = np.array([5.0, -0.5, -20.0], np.float32)
    optimizer.apply([tf.constant(grad)], [weights])
    np.testing.assert_allclose(weights.numpy(), 1.0 - 0.1 * np.clip(grad, -1.5, 1.5), rtol=1e-6)


def test_gradient_clip_in_real_configs(tmp_path):
    _, config = converted("demos_demo_tf_tf_att_copy.config", tmp_path)
    assert config.optimizer_params["clipvalue"] == 2
    tuned, config = converted("demos_demo_tf_lstm2_12ax_tuned.config", tmp_path)
    assert config.optimizer_params["clipvalue"] == 10.0
    assert any(key == "gradient_clip_norm" and "clipnorm" in why for key, _, why in tuned.dropped)


def test_gradient_clip_norm_alone_is_clipnorm(tmp_path):
    path = write(tmp_path, "adam = True\nlearning_rate = 0.1\nnum_epochs = 1\ngradient_clip_norm = 3.0\n")
    _, config = converted(path, tmp_path)
    assert config.optimizer_params["clipnorm"] == 3.0


def test_gradient_noise_is_the_transform_with_returnns_stddev(tmp_path):
    """2016-lstm-paper assoc_lstm.ontop.5l: gradient_noise = 0.3 (nadam, newbob)."""
    _, config = converted("2016_lstm_paper_lstm_ontop_5l.config", tmp_path)
    (entry,) = config.gradient_transforms
    assert entry["factory"] == "gradient_noise" and entry["after"] == "finite"
    assert entry["params"]["stddev"] == 0.3


def test_gradient_clip_global_norm_is_max_grad_norm(tmp_path):
    _, config = converted("2019_lm_cross_cl1_emb_128.config", tmp_path)
    assert config.max_grad_norm == 1.0


@pytest.mark.slow
def test_a_sub_epoch_config_trains(tmp_path):
    from tests.compat.runs import train_two_updates

    out = tmp_path / "converted.yaml"
    out.write_text(convert("returnn", str(HERE / "2019_asr_e2e_scratch_specaug4_eos.config")).to_yaml())
    config, final = train_two_updates([out], tmp_path / "run", ["model=mlp", "data=synthetic_classification",
                                                                "data_params={num_examples: 64}", "eval_steps=1"])
    assert final["global_step"] == 2 and math.isfinite(final["train/loss"])


def test_statements_the_reader_does_not_follow_leave_no_stale_value(tmp_path):
    """A loop or `try` may change a name: it is listed as not known, never carried with the value before it."""
    path = write(tmp_path, (
        "adam = True\nlearning_rate = 0.1\n"
        "learning_rates = [0.1]\nlearning_rates.append(0.05)\nlearning_rates.extend([0.02, 0.01])\n"
        "try:\n    num_epochs = int(open('epochs').read())\nexcept OSError:\n    num_epochs = 7\n"
        "gradient_noise = 0.1\nfor _ in range(2):\n    gradient_noise *= 2\n"
    ))
    result = convert("returnn", str(path))
    base = result.data["optimizer_params"]["learning_rate"]
    rates = [base] + [base * r for r in result.data["lr_policy_params"]["decay_rates"]]
    np.testing.assert_allclose(rates, [0.1, 0.05, 0.02, 0.01], rtol=1e-12)
    dropped = {key for key, _, _ in result.dropped}
    assert {"num_epochs", "gradient_noise"} <= dropped
    assert "num_epochs" not in result.data and "gradient_transforms" not in result.data


@pytest.mark.parametrize("block, carried", [('{"class": "adam"}', False), ('{"class": "rmsprop"}', True)])
def test_momentum_with_an_optimizer_block_goes_where_returnn_passes_it(block, carried, tmp_path):
    path = write(tmp_path, f"optimizer = {block}\nmomentum = 0.9\nlearning_rate = 0.01\nnum_epochs = 2\n")
    result, config = converted(path, tmp_path)
    assert ("momentum" in config.optimizer_params) is carried


def test_partition_epoch_through_a_dataset_function_with_lookups_and_a_checking_loop(tmp_path):
    """The shape of returnn-experiments' get_sprint_dataset: `{...}.get(data, 1)`, a loop that only asserts."""
    path = write(tmp_path, (
        "import os\nEpochSplit = 6\nadam = True\nlearning_rate = 0.001\nnum_epochs = 120\n"
        "def get_sprint_dataset(data):\n"
        "    assert data in {'train', 'cv'}\n"
        "    epoch_split = {'train': EpochSplit}.get(data, 1)\n"
        "    files = {'config': 'config/training.config'}\n"
        "    for k, v in sorted(files.items()):\n"
        "        assert os.path.exists(v), '%s %r does not exist' % (k, v)\n"
        "    args = ['--config=' + files['config'], lambda: 'cf', '--chunk=%i' % {'train': EpochSplit * 1000}.get(data, -1)]\n"
        "    return {'class': 'ExternSprintDataset', 'sprintConfigStr': args, 'partition_epoch': epoch_split}\n"
        "train = get_sprint_dataset('train')\ndev = get_sprint_dataset('cv')\n"
    ))
    _, config = converted(path, tmp_path)
    assert config.num_epochs == 120 / 6
