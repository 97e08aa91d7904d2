"""NovoGrad's `weight_decay` from an OpenSeq2Seq config keeps OpenSeq2Seq's coupled meaning.

The reference is a NumPy transcription of OpenSeq2Seq's NovoGrad2.apply_gradients
(open_seq2seq/optimizers/novograd.py, NVIDIA/OpenSeq2Seq@8681d38):

    g_2 = sum(g**2); v = g_2 if v == 0 else v * beta2 + g_2 * (1 - beta2)
    g = g / sqrt(v + eps); if wd > 0: g += wd * w; if grad_averaging: g *= 1 - beta1
    TF1 Momentum: m = beta1 * m + g; w -= lr * m
"""

import pathlib

import numpy as np
import pytest
import yaml

from opt_train.config import load_config
from opt_train.config.issues import ConfigError
from opt_train.convert import convert

HERE = pathlib.Path(__file__).parent / "openseq2seq"
NOVOGRAD_CONFIGS = sorted(
    path.stem for path in HERE.glob("*.yaml")
    if "novograd" in yaml.safe_load(path.read_text())["optimizer"].lower()
    and "weight_decay" in yaml.safe_load(path.read_text())["optimizer_params"]
)


def openseq2seq_novograd(weights, grads, lr, beta1, beta2, eps, wd, grad_averaging, persist=True):
    """Steps of OpenSeq2Seq's NovoGrad on float64 weights; `persist` keeps v between steps (the paper's rule)."""
    w = [np.array(x, np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [0.0 for _ in w]
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            g_2 = float(np.sum(np.square(g)))
            ema = g_2 if v[i] == 0 else v[i] * beta2 + g_2 * (1.0 - beta2)
            if persist:
                v[i] = ema
            g = g / np.sqrt(ema + eps)
            if wd > 0:
                g = g + wd * w[i]
            if grad_averaging:
                g = g * (1.0 - beta1)
            m[i] = beta1 * m[i] + g
            w[i] = w[i] - lr * m[i]
    return w


def _optimizer_from_yaml(tmp_path, text):
    from opt_train.optimizers.pipeline import make_optimizer

    path = tmp_path / "x.yaml"
    path.write_text(text)
    config = load_config([path])
    return config, make_optimizer(config.optimizer, config.optimizer_params)


def _run(optimizer, weights, grads):
    import tensorflow as tf

    variables = [tf.Variable(np.array(x, np.float32)) for x in weights]
    for step_grads in grads:
        optimizer.apply([tf.constant(np.array(g, np.float32)) for g in step_grads], variables)
    return [v.numpy() for v in variables]


RNG = np.random.default_rng(3)
WEIGHTS = [RNG.normal(size=(4, 3)) * 2.0, RNG.normal(size=(5,))]
GRADS = [[RNG.normal(size=(4, 3)) * 0.1, RNG.normal(size=(5,)) * 0.01] for _ in range(4)]
BASE = "max_steps: 4\noptimizer: open_seq2seq.optimizers.novograd.NovoGrad\n"


def test_openseq2seq_weight_decay_is_the_coupled_decay(tmp_path):
    config, optimizer = _optimizer_from_yaml(tmp_path, BASE + (
        "optimizer_params: {learning_rate: 0.01, beta1: 0.9, beta2: 0.5, epsilon: 1.0e-08, "
        "weight_decay: 0.05, grad_averaging: true}\n"))
    assert config.optimizer_params["coupled_weight_decay"] == 0.05
    assert "weight_decay" not in config.optimizer_params  # not Keras's decoupled decay
    ours = _run(optimizer, WEIGHTS, GRADS)
    expected = openseq2seq_novograd(WEIGHTS, GRADS, 0.01, 0.9, 0.5, 1e-8, 0.05, True)
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # Read as Keras's decoupled decay the same number moves the weights visibly differently.
    keras_reading = openseq2seq_novograd(WEIGHTS, GRADS, 0.01, 0.9, 0.5, 1e-8, 0.0, True)
    assert max(np.max(np.abs(a - b)) for a, b in zip(keras_reading, expected)) > 1e-3


def test_first_step_equals_openseq2seq_literally(tmp_path):
    """OpenSeq2Seq's graph never wrote v back (v_t = ||g_t||^2 each step); on step 1 both rules agree."""
    _, optimizer = _optimizer_from_yaml(tmp_path, BASE + (
        "optimizer_params: {learning_rate: 0.02, weight_decay: 0.001}\n"))
    ours = _run(optimizer, WEIGHTS, GRADS[:1])
    expected = openseq2seq_novograd(WEIGHTS, GRADS[:1], 0.02, 0.95, 0.98, 1e-8, 0.001, False, persist=False)
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_decoupled_weight_decay_is_keras_s(tmp_path):
    config, optimizer = _optimizer_from_yaml(tmp_path, BASE + (
        "optimizer_params: {learning_rate: 0.01, decoupled_weight_decay: 0.05}\n"))
    assert config.optimizer_params["weight_decay"] == 0.05
    assert config.optimizer_params.get("coupled_weight_decay", 0.0) == 0.0
    assert optimizer.weight_decay == 0.05 and optimizer.coupled_weight_decay == 0.0
    assert not config.notes


def test_validate_names_the_key_in_one_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(BASE + "optimizer_params:\n  learning_rate: 0.01\n  weight_decay: 0.001\n")
    notes = load_config([path]).notes
    assert len(notes) == 1
    assert notes[0].startswith(f"{path}:5: optimizer_params.weight_decay: ")
    assert "coupled" in notes[0] and "decoupled_weight_decay" in notes[0]


def test_both_spellings_that_differ_are_a_conflict(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(BASE + "optimizer_params: {weight_decay: 0.001, coupled_weight_decay: 0.002}\n")
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    assert [(i.key, i.code) for i in caught.value.issues] == [("optimizer_params.weight_decay", "conflict")]


def test_every_novograd_example_keeps_its_decay():
    assert len(NOVOGRAD_CONFIGS) >= 5
    for name in NOVOGRAD_CONFIGS:
        raw = yaml.safe_load((HERE / f"{name}.yaml").read_text())["optimizer_params"]
        config = load_config([HERE / f"{name}.yaml"], ["num_gpus=null"])
        assert config.optimizer_params["coupled_weight_decay"] == raw["weight_decay"], name
        assert "weight_decay" not in config.optimizer_params, name
        converted = convert("openseq2seq", str(HERE / f"{name}.py"))
        assert converted.data["optimizer_params"]["coupled_weight_decay"] == raw["weight_decay"], name
        assert any("coupled" in note for note in converted.notes), name
