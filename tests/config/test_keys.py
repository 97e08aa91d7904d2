"""Each key declared once (`schema.key`): the validator, the docs' key table, `opt-train list keys`,
the run-defining keys and the keys that feed `optimize_loss` all read that one declaration."""

import dataclasses
import pathlib

import pytest

from opt_train.config import keys, load_config
from opt_train.config.schema import FEEDS, NOT_RUN_KEYS, TrainConfig, config_fields, plain
from opt_train.config.validate import FIELD_RULES
from tests.support import NO_TENSORFLOW, main_code, run_python

ROOT = pathlib.Path(__file__).parents[2]
FIELDS = config_fields()


def default_of(field):
    return field.default_factory() if callable(field.default_factory) else field.default


def test_every_key_is_declared_with_a_rule_a_doc_and_a_run_flag():
    for field in FIELDS:
        meta = field.metadata
        assert callable(meta["rule"]) and meta["rule"] is FIELD_RULES[field.name], field.name
        assert meta["doc"] and meta["values"] and "\n" not in meta["doc"], field.name
        assert isinstance(meta["run"], bool), field.name


@pytest.mark.parametrize("field", FIELDS, ids=[field.name for field in FIELDS])
def test_each_default_passes_its_own_rule_as_yaml_would_give_it(field):
    default = default_of(field)
    assert field.metadata["rule"](field.name, plain(default)) == default


def test_a_key_left_out_takes_its_declared_default(tmp_path):
    path = tmp_path / "exp1.yaml"
    path.write_text("max_steps: 5\n")
    resolved = load_config([str(path)]).to_dict()
    expected = {field.name: plain(default_of(field)) for field in FIELDS}
    assert resolved == {**expected, "max_steps": 5, "logdir": "runs/exp1"}


def test_the_defaults_openseq2seq_users_rely_on():
    # OpenSeq2Seq's own (open_seq2seq/models/model.py, optimizers.py): counting, checkpoints kept, summaries.
    config = TrainConfig()
    assert config.count_skipped_updates is False and config.max_consecutive_overflows == 20
    assert config.num_checkpoints == 5 and config.iter_size == 1 and config.max_grad_norm is None
    assert config.summaries == ("learning_rate", "global_gradient_norm", "loss_scale")
    assert (config.batch_size_per_gpu, config.dtype, config.loss_scaling) == (32, "float32", 1.0)


def test_the_docs_key_table_is_the_declarations():
    text = (ROOT / "docs" / "config.md").read_text()
    start = text.index(keys.TABLE_HEADER[0])
    table = text[start:text.index("\n\n", start)]
    assert table == keys.markdown(), "docs/config.md: paste the output of `opt-train list keys --markdown`"


def test_the_docs_table_names_every_key_and_the_loader_s_base():
    names = [row[0] for row in keys.rows()]
    assert names == ["base"] + [field.name for field in FIELDS]


def test_list_keys_shows_every_key_with_its_default_without_tensorflow():
    done = run_python(main_code(["list", "keys"], then=NO_TENSORFLOW))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "# keys"
    shown = {line.split()[0]: line.split()[1] for line in lines[1:] if line.strip()}
    assert shown["batch_size_per_gpu"] == "32" and shown["max_consecutive_overflows"] == "20"
    assert shown["loss"] == "null" and shown["count_skipped_updates"] == "false"
    assert set(shown) == {"base"} | {field.name for field in FIELDS}


def test_list_markdown_prints_the_docs_table_and_is_refused_without_a_topic(cli):
    result = cli("list", "keys", "--markdown")
    assert result.exit_code == 0 and result.output.strip() == keys.markdown()
    result = cli("list", "--markdown")
    assert result.exit_code == 2 and "--markdown" in result.output


def _changed(value):
    """A different value of the same YAML kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + ["x"]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return 7  # None


@pytest.mark.parametrize("field", FIELDS, ids=[field.name for field in FIELDS])
def test_changing_a_key_starts_a_new_run_unless_it_is_declared_not_to(field):
    from opt_train.training.logdir import differences

    saved = TrainConfig().to_dict()
    current = {**saved, field.name: _changed(saved[field.name])}
    found = [key for key, _, _ in differences(saved, current, TrainConfig().not_run_keys())]
    assert bool(found) == field.metadata["run"], field.name


def test_the_keys_that_only_say_how_long_how_visibly_or_where():
    # The backend, the run length and what is reported may change between a run and its resume.
    assert {"max_steps", "num_epochs", "logdir", "distributed", "use_horovod", "summaries",
            "rank_timeout_secs", "eval_steps"} <= NOT_RUN_KEYS
    assert not {"optimizer", "optimizer_params", "iter_size", "random_seed", "model", "data"} & NOT_RUN_KEYS


def test_pipeline_arguments_name_each_feeding_key_once_in_optimize_loss_s_types():
    # Which arguments exist and their defaults: tests/training/test_builder_keys.py.
    assert len(set(FEEDS.values())) == len(FEEDS)
    arguments = dataclasses.replace(TrainConfig(), summaries=("gradients",), max_grad_norm=0.5).pipeline_arguments()
    assert arguments["summaries"] == ["gradients"] and arguments["clip_gradients"] == 0.5
    assert arguments["on_horovod"] is False and set(arguments) == set(FEEDS.values())
