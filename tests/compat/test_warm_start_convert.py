"""`convert`: RETURNN's `preload_from_files` / `import_model_train_epoch1` / `load` and OpenSeq2Seq's `load_model`
become `init_from` where they start a training from another model, a line where they mean more or less."""

import textwrap

import yaml

from opt_train.config import load_config
from opt_train.convert import convert

RETURNN_HEAD = "network = {}\nlearning_rate = 0.001\nadam = True\n"


def _returnn(tmp_path, text):
    path = tmp_path / "returnn.config"
    path.write_text(RETURNN_HEAD + textwrap.dedent(text))
    return convert("returnn", str(path))


def _dropped(result):
    return {key: why for key, _, why in result.dropped}


def test_preload_for_training_with_a_prefix_maps_each_variable_under_it(tmp_path):
    result = _returnn(tmp_path, """\
        preload_from_files = {
            "base": {"filename": "/models/asr/epoch.100", "prefix": "enc_", "init_for_train": True,
                     "ignore_missing": True, "ignore_params": ["enc_out/W"]},
            "recog": {"filename": "/models/lm/epoch.50"},
        }
    """)
    assert result.data["init_from"] == {"path": "/models/asr/epoch.100", "variables": {"^(.*)$": "enc_\\1"}}
    dropped = _dropped(result)
    assert "recognition only" in dropped["preload_from_files.recog"]
    assert "exclusion list" in dropped["preload_from_files.base.ignore_params"]
    assert any("enc_X" in note for note in result.notes) and any("init_from.variables" in note for note in result.notes)
    assert not any("ignore_missing" in note for note in result.notes)  # it allowed missing ones, as init_from does


def test_the_converted_prefix_map_renames_as_returnn_does(tmp_path):
    """RETURNN loads its model's `enc_lstm/W` from the file's `lstm/W`: the map written gives exactly that."""
    import re

    result = _returnn(tmp_path, 'preload_from_files = {"a": {"filename": "x", "prefix": "enc_", "init_for_train": True}}\n')
    [(pattern, template)] = result.data["init_from"]["variables"].items()
    assert re.compile(pattern).sub(template, "lstm/W", count=1) == "enc_lstm/W"
    assert any("ignore_missing false" in note for note in result.notes)


def test_import_model_train_epoch1_is_init_from_and_one_source_is_kept(tmp_path):
    result = _returnn(tmp_path, """\
        import_model_train_epoch1 = "/models/base/epoch.080"
        preload_from_files = {"a": {"filename": "/models/other", "init_for_train": True}}
    """)
    assert result.data["init_from"] == {"path": "/models/base/epoch.080"}
    assert "init_from takes one source, import_model_train_epoch1's" in _dropped(result)["preload_from_files.a"]


def test_load_is_init_from_with_a_note_that_the_training_state_stays_behind(tmp_path):
    result = _returnn(tmp_path, 'load = "/models/base/epoch.080"\n')
    assert result.data["init_from"] == {"path": "/models/base/epoch.080"}
    assert any(note.startswith("load: ") and "step 0" in note for note in result.notes)


def test_a_converted_returnn_warm_start_validates_once_its_checkpoint_exists(tmp_path):
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "epoch.080.index").write_bytes(b"")
    result = _returnn(tmp_path, f'import_model_train_epoch1 = "{folder / "epoch.080"}"\nnum_epochs = 2\n')
    out = tmp_path / "converted.yaml"
    out.write_text(result.to_yaml())
    config = load_config([str(out)], ["model=mlp", "data=digits"])
    assert config.init_from == {"path": str(folder / "epoch.080"), "variables": {}, "skip_mismatch": False}


def test_openseq2seq_load_model_is_init_from_skipping_mismatches(tmp_path):
    path = tmp_path / "os2s.py"
    path.write_text(textwrap.dedent("""\
        base_params = {
            "num_epochs": 1,
            "load_model": "experiments/pretrained",
            "optimizer": "Adam",
        }
    """))
    result = convert("openseq2seq", str(path))
    assert result.data["init_from"] == {"path": "experiments/pretrained", "skip_mismatch": True}
    assert "load_model" not in result.data
    assert any(note.startswith("load_model: ") and "optimizer slots" in note for note in result.notes)
    assert "init_from:" in result.to_yaml() and yaml.safe_load(result.to_yaml())["init_from"]["skip_mismatch"] is True
