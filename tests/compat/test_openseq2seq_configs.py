"""OpenSeq2Seq configs, transcribed: literal YAML validates and trains; `convert` of the .py gives the same run.

A config that differs from a trained one only in numbers is built, not trained (TRAINED_AS names which).
"""

import math
import re
import pathlib

import pytest
import yaml

from opt_train.config import load_config
from opt_train.convert import convert
from tests.compat.runs import train_two_updates

HERE = pathlib.Path(__file__).parent / "openseq2seq"
CONFIGS = sorted(path.stem for path in HERE.glob("*.yaml"))
# What the swap replaces: the literal YAML names built-ins, the converted one leaves them to fill in.
SWAPPED = ("model", "model_params", "data", "data_params")


def test_the_suite_covers_every_kind_of_model():
    kinds = {name.split("__")[0] for name in CONFIGS}
    assert kinds == {"image2label", "speech2text", "text2text", "text2speech", "lm"}
    assert len(CONFIGS) >= 20
    assert all((HERE / f"{name}.py").is_file() for name in CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_literal_yaml_validates(name):
    path = HERE / f"{name}.yaml"
    config = load_config([path])
    raw = yaml.safe_load(path.read_text())
    # OpenSeq2Seq's place for the base rate is opt-train's optimizer_params.learning_rate.
    assert config.optimizer_params["learning_rate"] == raw["lr_policy_params"]["learning_rate"]
    assert "learning_rate" not in config.lr_policy_params


@pytest.mark.parametrize("name", CONFIGS)
def test_convert_gives_the_literal_run(name, tmp_path):
    """The converter reads the .py's syntax tree; the YAML was written from the same facts by hand.

    Both load to the same TrainConfig, the built-in model and data aside.
    """
    converted = tmp_path / "converted.yaml"
    converted.write_text(convert("openseq2seq", str(HERE / f"{name}.py")).to_yaml())
    literal = load_config([HERE / f"{name}.yaml"]).to_dict()
    mine = load_config([converted], ["model=mlp", "data=digits"]).to_dict()
    for key in SWAPPED:
        literal.pop(key), mine.pop(key)
    literal.pop("logdir"), mine.pop("logdir")
    assert mine == literal


def test_convert_lists_what_it_could_not_carry():
    text = convert("openseq2seq", str(HERE / "text2text__transformer-big.py")).to_yaml()
    carried, _, dropped = text.partition("# Not carried")
    assert "encoder: open_seq2seq.encoders.TransformerEncoder" in dropped
    assert "data_layer: open_seq2seq.data.text2text.text2text.ParallelTextDataLayer" in dropped
    assert "base_model: open_seq2seq.models.Text2Text" in dropped
    # The variables the config computes with were followed: 4 * d_model.
    assert "filter_size: 4096" in dropped
    assert "encoder" not in carried.split("# What opt-train does")[0]


# One config trains in the quick suite (tacotron_float's 1-unit bias under `variables` summaries once
# crashed the loop); the others with -m slow (transformer-big: 44 s on 2 loaded cores).
QUICK = ("text2speech__tacotron_float",)
# Configs that differ from a trained one only in keys `load_config` checks without training (sizes,
# step counts, logdir, num_gpus, use_horovod, the number value of a rate or a decay): each trains as
# the config it names, which has the same model kind, optimizer, lr policy, dtype and loss scaling,
# gradient stages (clipping, LARC), regularizer and summaries. They are loaded and built (below).
TRAINED_AS = {
    "image2label__cifar-nv": "image2label__alexnet_owt",  # Momentum, poly_decay, float32; other lr, scale
    "lm__lstm-wkt2-fp32": "lm__lstm-test-small",  # Adam, fixed_lr, float32; other lr, sizes
    "speech2text__w2lplus_large_8gpus_mp": "speech2text__w2l_large_8gpus_mp",  # all but num_checkpoints
    "text2text__transformer-base": "text2text__nmt-reversal-TT",  # LazyAdam, transformer_policy; other d_model
}
TRAINED = [name for name in CONFIGS if name not in TRAINED_AS]


def _same_but_numbers(config):
    """What decides the code a run goes through: the kinds, not their numbers."""
    return (config.model, config.data, config.optimizer, config.lr_policy, config.dtype, config.loss_scaling,
            config.max_grad_norm is None, config.larc_params is None, config.regularizer, config.summaries,
            config.restore_best_checkpoint, sorted(config.optimizer_params), sorted(config.lr_policy_params))


@pytest.mark.parametrize("name", sorted(TRAINED_AS))
def test_a_config_left_untrained_builds_and_has_the_kinds_of_the_one_trained_for_it(name, tmp_path):
    from opt_train.distributed import get_backend
    from opt_train.training.builder import build_run

    overrides = [f"logdir={tmp_path}", "use_horovod=false", "num_gpus=null"]
    config = load_config([HERE / f"{name}.yaml"], overrides)
    assert _same_but_numbers(config) == _same_but_numbers(load_config([HERE / f"{TRAINED_AS[name]}.yaml"], overrides))
    run = build_run(config, get_backend())
    assert run.model.trainable_variables


@pytest.mark.parametrize(
    "name", [name if name in QUICK else pytest.param(name, marks=pytest.mark.slow) for name in TRAINED]
)
def test_literal_config_trains(name, tmp_path):
    config, final = train_two_updates([HERE / f"{name}.yaml"], tmp_path / "run", ["eval_batch_size_per_gpu=16"])
    assert final["global_step"] == 2
    assert math.isfinite(final["train/loss"])
    # OpenSeq2Seq's summaries, default or listed, reached TensorBoard's event file.
    assert list((tmp_path / "run").rglob("events.out.tfevents*"))


def literal_transcription(name):
    """Every key of the .py's base_params + train_params that YAML can hold, as an OpenSeq2Seq user
    would copy it (encoder, data_layer, processed_data_folder, ... included), values unchanged."""
    from opt_train.convert.pyconfig import is_plain, plain, read_config

    names, _ = read_config(str(HERE / f"{name}.py"))
    params = {**names["base_params"], **(names.get("train_params") or {})}
    return {key: plain(value) for key, value in params.items() if is_plain(value)}


@pytest.mark.parametrize("name", CONFIGS)
def test_whole_literal_transcription_validates_with_notes_not_unknown_keys(name, tmp_path):
    raw = literal_transcription(name)
    path = tmp_path / "literal.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    # num_gpus is the distribution issue's; the model and data are named, as a migrating user must.
    config = load_config([path], ["num_gpus=null", "model=mlp", "data=digits"])
    foreign = [key for key in ("encoder", "encoder_params", "decoder", "decoder_params", "data_layer",
                               "data_layer_params", "processed_data_folder", "lm_vocab_file") if key in raw]
    assert foreign
    # One note line per key, at its file line ("literal.yaml:N: key: ...").
    for key in foreign:
        assert sum(bool(re.match(rf"{re.escape(str(path))}:\d+: {key}: ", note)) for note in config.notes) == 1, key


@pytest.mark.parametrize("missing", ["model", "data"])
def test_openseq2seq_model_or_data_without_opt_train_s_is_refused(missing, tmp_path):
    from opt_train.config.issues import ConfigError

    raw = literal_transcription("lm__lstm-wkt2-fp32")
    path = tmp_path / "literal.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    other = "data=digits" if missing == "model" else "model=mlp"
    with pytest.raises(ConfigError) as caught:
        load_config([path], ["num_gpus=null", other])
    found = [(issue.key, issue.code) for issue in caught.value.issues]
    assert found == [(missing, "missing")]
    message = caught.value.issues[0].message
    assert ("encoder" if missing == "model" else "data_layer") in message


@pytest.mark.slow
def test_whole_literal_transcription_trains_when_given_a_model_and_data(tmp_path):
    """Jasper: NovoGrad with OpenSeq2Seq's weight_decay, LARC, mixed precision with Backoff, its encoder keys."""
    path = tmp_path / "literal.yaml"
    path.write_text(yaml.safe_dump(literal_transcription("speech2text__jasper10x5_LibriSpeech_nvgrad")))
    config, final = train_two_updates([path], tmp_path / "run", ["model=mlp", "data=synthetic_classification",
                                                                 "data_params={num_examples: 64}"])
    assert config.optimizer_params["coupled_weight_decay"] == 0.001
    assert final["global_step"] == 2 and math.isfinite(final["train/loss"])
