"""Broken and hostile input, table-driven: every case exits 2 with one clear line, no traceback, nothing written.

Each case is a folder of its own (a config, maybe a data file or a user module) and an
`opt-train` command run in this process. The reference is the CLI contract in the
README: exit code 2, the last line `Error: ...` naming the key or file (and the code),
no Python traceback of ours (a user's own code may show its own frames above the line),
no file created or changed outside the run's logdir, and no logdir for a config that
fails. Categories follow the issue that collected them: YAML, types and ranges,
base / --config / --set, data files, factories, security.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OK = "max_steps: 2\n"


def case(case_id, config, *, expect, command="validate", args=(), files=None):
    """One row: `config` YAML text (or bytes), `expect` a fragment (or a tuple of them) the error line must hold."""
    return pytest.param(config, command, tuple(args), files or {}, expect, id=case_id)


# -- YAML ---------------------------------------------------------------------------

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefg", "bcdefgh")
)
YAML_CASES = [
    case("alias_bomb", "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB, expect="[too_large]"),
    case("alias_bomb_of_mappings", "a: &a {p: 1, q: 2, r: 3}\n" + "".join(
        f"{name}: &{name} {{{', '.join(f'k{i}: *{prev}' for i in range(9))}}}\n" for prev, name in zip("abcdefg", "bcdefgh")
    ), expect="[too_large]"),
    case("recursive_alias", "a: &a [*a]\n", expect="recursive alias"),
    case("recursive_alias_mapping", "a: &a {b: *a}\n", expect="recursive alias"),
    case("deep_flow_nesting", "x: " + "[" * 5000 + "]" * 5000 + "\n", expect="nested more than"),
    case("very_deep_flow_nesting", "x: " + "[" * 300000 + "\n", expect="nested more than"),
    case("deep_block_nesting", "".join(" " * i + "k:\n" for i in range(300)) + " " * 300 + "v: 1\n", expect="nested more than"),
    case("multi_megabyte", "max_steps: 2\n" + "# padding\n" * 200_000, expect="larger than"),
    case("huge_scalar", "max_steps: 2\nlogdir: " + "x" * 1_500_000 + "\n", expect="larger than"),
    case("nul_byte", b"max_steps: 2\nlogdir: a\x00b\n", expect="[yaml_syntax]"),
    case("not_utf8", b"max_steps: 2\nlogdir: \xff\xfe\n", expect="not UTF-8"),
    case("tab_indent", "max_steps: 2\nwarmup:\n\tsteps: 3\n", expect="[yaml_syntax]"),
    case("unclosed_bracket", "max_steps: [2\n", expect="[yaml_syntax]"),
    case("unclosed_quote", "logdir: 'abc\nmax_steps: 2\n", expect="[yaml_syntax]"),
    case("bad_float_tag", "max_steps: 2\nnum_checkpoints: !!float abc\n", expect="cannot read 'abc' as float"),
    case("bad_int_tag", "max_steps: !!int x2\n", expect="[yaml_syntax]"),
    case("bad_timestamp_tag", "max_steps: 2\nlogdir: !!timestamp yesterday\n", expect="[yaml_syntax]"),
    case("bad_binary_tag", "max_steps: 2\nlogdir: !!binary '%%%'\n", expect="logdir"),
    case("python_object_tag", "max_steps: !!python/object/apply:os.system ['touch pwned']\n", expect="[yaml_syntax]"),
    case("python_name_tag", "max_steps: 2\nlogdir: !!python/name:os.system\n", expect="[yaml_syntax]"),
    case("unknown_tag", "max_steps: !custom 2\n", expect="[yaml_syntax]"),
    case("merge_of_scalar", "max_steps: 2\nwarmup:\n  <<: 5\n", expect="[yaml_syntax]"),
    case("duplicate_key", "max_steps: 2\nmax_steps: 3\n", expect="[duplicate_key]"),
    case("top_level_list", "- max_steps: 2\n", expect="must be a mapping"),
    case("top_level_scalar", "hello\n", expect="must be a mapping"),
    case("two_documents", "max_steps: 2\n---\nmax_steps: 3\n", expect="[yaml_syntax]"),
    case("timestamp_value", "max_steps: 2\nlogdir: 2024-01-01\n", expect="logdir"),
    case("list_as_key", "max_steps: 2\n[a, b]: 1\n", expect="[unknown_key]"),
    case("many_unknown_keys", OK + "".join(f"key_{i}: {i}\n" for i in range(1000)), expect="more problems"),
    case("empty_file", "", expect="max_steps"),
    case("only_comment", "# nothing here\n", expect="max_steps"),
    case("null_document", "null\n", expect="max_steps"),
]

# -- types and ranges -----------------------------------------------------------------

RANGE_VALUES = {
    # 1e30 is a whole float: an int64 step counter cannot hold it, so the run would never end.
    "max_steps": ["-1", "0", "1.5", "abc", "true", "[1]", "{a: 1}", "1e400", "1e30", "9223372036854775808"],
    "num_epochs": ["0", "-1", ".nan", ".inf"],
    "batch_size_per_gpu": ["0", "-3", "2.5", "'x'"],
    "iter_size": ["0", "-1", "1.5"],
    "random_seed": ["-1", "4294967296", "'seven'", "1.5", "99999999999999999999999"],
    "max_grad_norm": ["0", "-1", ".nan", "'big'"],
    "dtype": ["float64x", "16", "[float16]"],
    "loss_scaling": ["-1", "0", "Backof", ".inf"],
    "on_nonfinite": ["explode"],
    "max_consecutive_overflows": ["0"],
    "summaries": ["[foo]", "x"],
    "optimizer": ["Adamm", "5", "''"],
    "optimizer_params": ["[1]", "{learning_rate: -1}", "{learning_rate: abc}", "{learning_rate: .nan}"],
    "lr_policy": ["expo"],
    "logdir": ["''", "5"],
    "save_checkpoint_steps": ["0"],
    "num_checkpoints": ["0"],
    "print_loss_steps": ["0"],
    "eval_steps": ["-2"],
    "jit_compile": ["'yes'"],
    "use_horovod": ["'yes'"],
    "distributed": ["mirrored", "5", "[tf]", "null"],
    "freeze_variables_regex": ["'('"],
    "python_path": ["5", "['']"],
}
RANGE_CASES = [
    case(f"{key}={value}", f"max_steps: 2\n{key}: {value}\n" if key != "max_steps" else f"{key}: {value}\n",
         expect=key)
    for key, values in RANGE_VALUES.items()
    for value in values
] + [
    case("larc_eta_negative", OK + "larc_params: {larc_eta: -1}\n", expect="larc_params.larc_eta"),
    case("larc_mode_unknown", OK + "larc_params: {larc_mode: foo, larc_eta: 1}\n", expect="larc_params.larc_mode"),
    case("regularizer_unknown", OK + "regularizer: l3\n", expect="regularizer"),
    case("lr_power_negative", OK + "lr_policy: poly\nlr_policy_params: {power: -1}\n", expect="lr_policy_params.power"),
    case("warmup_negative", OK + "warmup: {steps: -1}\n", expect="warmup.steps"),
    case("model_unknown", OK + "model: foo\n", expect="model"),
    case("factory_not_string", OK + "model: {factory: 5}\n", expect="model.factory"),
    case("factory_no_function", OK + "model: {factory: nocolon}\n", expect="model.factory"),
    case("hidden_units_negative", OK + "model_params: {hidden_units: [-1]}\n", expect="model_params.hidden_units"),
    case("data_unknown", OK + "data: foo\n", expect="data"),
    case("eval_fraction_two", OK + "data_params: {eval_fraction: 2}\n", expect="data_params.eval_fraction"),
    case("steps_and_epochs", "max_steps: 2\nnum_epochs: 1\n", expect="[conflict]"),
    case("horovod_and_tf", OK + "use_horovod: true\ndistributed: tf\n", expect="distributed"),
    case("mlflow_uri_not_string", OK + "tracking:\n  mlflow:\n    uri: 5\n", expect="config.yaml:4: tracking.mlflow.uri: "),
    case("neither_steps_nor_epochs", "logdir: x\n", expect="[missing]"),
]

# -- base / --config / --set ---------------------------------------------------------------

LAYERING_CASES = [
    case("base_missing", "base: nowhere.yaml\n" + OK, expect="base"),
    case("base_cycle", "base: config.yaml\n" + OK, expect="[base_cycle]"),
    case("base_not_string", "base: 5\n" + OK, expect="base"),
    case("base_empty", "base: ''\n" + OK, expect="base"),
    case("base_is_folder", "base: sub\n" + OK, expect="base", files={"sub/keep.txt": "x"}),
    case("base_is_list_file", "base: list.yaml\n" + OK, expect="must be a mapping", files={"list.yaml": "- 1\n"}),
    case("base_is_bomb", "base: bomb.yaml\n" + OK, expect="[too_large]",
         files={"bomb.yaml": "a: &a [x, x, x, x, x, x, x, x, x]\n" + BOMB}),
    case("base_is_binary", "base: blob.yaml\n" + OK, expect="blob.yaml", files={"blob.yaml": b"\x00\x01\x02\xff"}),
    case("set_without_equals", OK, args=("--set", "max_steps"), expect="[bad_override]"),
    case("set_empty_key", OK, args=("--set", "=5"), expect="[bad_override]"),
    case("set_empty_part", OK, args=("--set", "a..b=1"), expect="[bad_override]"),
    case("set_bad_yaml", OK, args=("--set", "max_steps=[1"), expect="[bad_override]"),
    case("set_deep_value", OK, args=("--set", "warmup=" + "[" * 20000), expect="[bad_override]"),
    case("set_alias_bomb", OK, args=("--set", "warmup={" + BOMB.replace("\n", ", ") + "}"), expect="--set"),
    case("set_under_scalar", OK, args=("--set", "max_steps.x=1"), expect="[bad_override]"),
    case("set_unknown_key", OK, args=("--set", "lr=0.1"), expect="[unknown_key]"),
    case("set_huge_value", OK, args=("--set", "logdir=" + "y" * 2_000_000), expect="[bad_override]"),
    case("set_bad_tag", OK, args=("--set", "max_steps=!!float abc"), expect="[bad_override]"),
    case("set_nan_steps", OK, args=("--set", "max_steps=.nan"), expect="max_steps"),
    case("set_negative_seed", OK, args=("--set", "random_seed=-5"), expect="random_seed"),
    case("second_config_missing", OK, args=("--config", "missing.yaml"), expect="missing.yaml"),
    case("second_config_folder", OK, args=("--config", "sub"), expect="sub", files={"sub/keep.txt": "x"}),
    case("second_config_fifo", OK, args=("--config", "pipe.yaml"), expect="not a regular file", files={"pipe.yaml": "FIFO"}),
    case("config_is_fifo", "FIFO", expect="not a regular file"),
    case("lr_preview_too_long", "max_steps: 1000000000000000\n", command="lr", expect="max_steps"),
]

# -- sweeps: checked before any trial runs ----------------------------------------------------

SWEEP_CASES = [
    case("sweep_unknown_metric", OK, command="sweep", expect="did you mean 'eval/accuracy'",
         args=("--grid", "optimizer_params.learning_rate=0.1,0.01", "--metric", "eval/acuracy", "--dry-run",
               "--out", "sweep")),
    case("sweep_metric_without_prefix", OK, command="sweep", expect="[unknown_name]",
         args=("--grid", "optimizer_params.learning_rate=0.1,0.01", "--metric", "accuracy", "--dry-run",
               "--out", "sweep")),
    case("sweep_grid_too_large", OK, command="sweep", expect="[too_large]",
         args=("--grid", "random_seed=" + ",".join(map(str, range(1000))),
               "--grid", "iter_size=" + ",".join(map(str, range(1, 1001))), "--dry-run", "--out", "sweep")),
    case("sweep_block_grid_too_large", OK + "sweep:\n  grid:\n    random_seed: [" + ", ".join(map(str, range(200)))
         + "]\n    iter_size: [" + ", ".join(map(str, range(1, 101))) + "]\n", command="sweep",
         expect="sweep.grid", args=("--dry-run", "--out", "sweep")),
    case("sweep_nothing_to_sweep", OK, command="sweep", expect="nothing to sweep", args=("--dry-run", "--out", "sweep")),
]

# -- data and model files (these run `train`: found while building, before any step) ---

DATA_CASES = [
    # Generated in memory: far more than any machine holds is refused before NumPy tries.
    case("synthetic_1e11_examples", OK + "data: synthetic_classification\ndata_params: {num_examples: 100000000000}\n",
         command="train", expect="data_params.num_examples"),
    case("synthetic_images_too_large", OK + "data: synthetic_images\ndata_params: {num_examples: 10000000000}\n",
         expect="data_params.num_examples"),
    case("lr_csv_in_a_missing_folder", OK, command="lr", args=("--csv", "nodir/x.csv"), expect="--csv"),
    case("npz_missing", OK + "data: npz\ndata_params: {path: none.npz}\n", command="train", expect="data_params"),
    case("npz_truncated", OK + "data: npz\ndata_params: {path: cut.npz}\n", command="train", expect=("data_params.path: ", "cut.npz", "[wrong_type]"),
         files={"cut.npz": "NPZ_TRUNCATED"}),
    case("npz_is_text", OK + "data: npz\ndata_params: {path: text.npz}\n", command="train", expect=("data_params.path: ", "text.npz"),
         files={"text.npz": "just text\n"}),
    case("npz_scalar_x", OK + "data: npz\ndata_params: {path: scalar.npz}\n", command="train", expect=("data_params.path: ", "scalar"),
         files={"scalar.npz": "NPZ_SCALAR"}),
    case("npz_nan", OK + "data: npz\ndata_params: {path: nan.npz}\n", command="train", expect=("data_params.path: ", "NaN or inf", "[out_of_range]"),
         files={"nan.npz": "NPZ_NAN"}),
    case("npz_inf", OK + "data: npz\ndata_params: {path: inf.npz}\n", command="train", expect=("data_params.path: ", "NaN or inf"),
         files={"inf.npz": "NPZ_INF"}),
    case("npz_wrong_key", OK + "data: npz\ndata_params: {path: ok.npz, x_key: features}\n", command="train",
         expect=("data_params.x_key: must name an array", "[unknown_name]"), files={"ok.npz": "NPZ_OK"}),
    case("npz_row_mismatch", OK + "data: npz\ndata_params: {path: rows.npz}\n", command="train",
         expect=("data_params.path: ", "as many rows", "[conflict]"), files={"rows.npz": "NPZ_ROWS"}),
    case("npz_object_array", OK + "data: npz\ndata_params: {path: obj.npz}\n", command="train",
         expect=("data_params.path: ", "obj.npz"), files={"obj.npz": "NPZ_OBJECT"}),
    case("npz_too_few_classes", OK + "data: npz\ndata_params: {path: ok.npz, num_classes: 2}\n", command="train",
         expect=("data_params.num_classes: must exceed every label", "Received: 2"), files={"ok.npz": "NPZ_OK"}),
    case("csv_missing", OK + "data: csv\ndata_params: {path: none.csv}\n", command="train", expect="data_params"),
    case("csv_nan", OK + "data: csv\ndata_params: {path: nan.csv}\n", command="train", expect=("data_params.path: ", "column 'b'"),
         files={"nan.csv": "a,b,label\n" + "".join(f"{i},{'nan' if i == 3 else i},{i % 2}\n" for i in range(20))}),
    case("csv_inf", OK + "data: csv\ndata_params: {path: inf.csv}\n", command="train", expect=("data_params.path: ", "NaN or inf"),
         files={"inf.csv": "a,b,label\n" + "".join(f"{'-inf' if i == 9 else i},{i},{i % 2}\n" for i in range(20))}),
    case("csv_ragged", OK + "data: csv\ndata_params: {path: ragged.csv}\n", command="train", expect=("data_params.path: ", "fields"),
         files={"ragged.csv": "a,b,label\n1,2,0\n1,0\n"}),
    case("csv_words", OK + "data: csv\ndata_params: {path: words.csv}\n", command="train", expect=("data_params.path: ", "numbers", "[wrong_type]"),
         files={"words.csv": "a,b,label\none,2,0\n3,4,1\n"}),
    case("csv_no_rows", OK + "data: csv\ndata_params: {path: empty.csv}\n", command="train", expect=("data_params.path: ", "no data rows"),
         files={"empty.csv": "a,b,label\n"}),
    case("csv_binary", OK + "data: csv\ndata_params: {path: blob.csv}\n", command="train", expect=("data_params.path: ", "blob.csv"),
         files={"blob.csv": b"\xff\xfe\x00\x01garbage"}),
    case("csv_label_missing", OK + "data: csv\ndata_params: {path: ok.csv, label_column: target}\n",
         command="train", expect=("data_params.label_column: must name a column", "Received: 'target'"), files={"ok.csv": "a,b,label\n1,2,0\n3,4,1\n"}),
    case("tfrecord_not_records", OK + "data: tfrecord\ndata_params: {train_files: '*.tfrecord', x: x, y: y, "
         "num_classes: 2, features: {x: {dtype: float32, shape: [2]}, y: {dtype: int64}}}\n", command="train",
         expect=("data_params.train_files: must be uncompressed TFRecord files", "[wrong_type]"),
         files={"a.tfrecord": "not a record file at all\n" * 4}),
    case("model_too_large", OK + "model_params: {hidden_units: [10000000, 10000000]}\n", command="train",
         expect="[too_large]"),
    case("cnn_on_sequence", OK + "model: cnn\ndata: reversal\n", command="train", expect="model"),
]

# -- the user's own code ---------------------------------------------------------------------

USER_MODULE = textwrap.dedent('''
    import sys
    import keras

    def fits(task):
        inputs = keras.Input(shape=task.input_shape)
        return keras.Model(inputs, keras.layers.Dense(task.output_dim)(inputs))

    def three_logits(task):
        inputs = keras.Input(shape=task.input_shape)
        return keras.Model(inputs, keras.layers.Dense(3)(inputs))

    def raises(task):
        raise RuntimeError("boom from the user's factory")

    def raises_key_error(task):
        return {}["missing"]

    def exits_zero(task):
        sys.exit(0)

    def exits_one(task):
        sys.exit(1)

    def recurses(task):
        return recurses(task)

    def not_a_model(task):
        return "a string"

    def takes_width(width):
        return keras.Sequential([keras.layers.Dense(width)])

    def breaks_on_input(task):
        return keras.Sequential([keras.layers.Reshape((7, 7))])

    def frozen(task):
        model = fits(task)
        model.trainable = False
        return model

    not_callable = 5
''')


def factory_case(case_id, target, expect, module=USER_MODULE, params=""):
    name = f"usermod_{case_id}"
    config = OK + f"model: {{factory: '{name}:{target}'}}\n" + params
    return case(case_id, config, command="train", expect=expect, files={f"{name}.py": module})


FACTORY_CASES = [
    factory_case("factory_wrong_output", "three_logits", "needs 10 per example"),
    factory_case("factory_raises", "raises", "RuntimeError: boom"),
    factory_case("factory_key_error", "raises_key_error", "KeyError"),
    factory_case("factory_exit_zero", "exits_zero", "sys.exit(0)"),
    factory_case("factory_exit_one", "exits_one", "sys.exit(1)"),
    factory_case("factory_recursion", "recurses", "RecursionError"),
    factory_case("factory_not_a_model", "not_a_model", "must return a keras.Model"),
    factory_case("factory_rejects_params", "takes_width", "model_params.depth: is not a parameter of",
                 params="model_params: {depth: 2}\n"),
    factory_case("factory_bad_input_shape", "breaks_on_input", "model.factory"),
    factory_case("factory_no_trainable_weights", "frozen", "model: the model has no trainable weights"),
    factory_case("factory_missing_function", "nothing_here", "has no function"),
    factory_case("factory_not_callable", "not_callable", "has no function"),
    factory_case("factory_import_raises", "fits", "importing", module="raise ImportError('half installed')\n"),
    factory_case("factory_import_exits", "fits", "sys.exit(0)", module="import sys\nsys.exit(0)\n"),
    factory_case("factory_import_syntax", "fits", "SyntaxError", module="def broken(:\n"),
    factory_case("factory_import_name_error", "fits", "NameError", module="undefined_name\n"),
    case("factory_module_missing", OK + "model: {factory: 'no_such_module_here:make'}\n", command="train",
         expect="cannot import module"),
    case("factory_submodule_missing", OK + "model: {factory: 'os.no_such:make'}\n", command="train",
         expect="cannot import module"),
    case("optimizer_path_missing", OK + "optimizer: no_such_package.MyOptimizer\n", command="train",
         expect="optimizer"),
]

ALL_CASES = YAML_CASES + RANGE_CASES + LAYERING_CASES + SWEEP_CASES + DATA_CASES + FACTORY_CASES


def materialize(folder, name, content):
    """Writes one file of a case; a few markers stand for files made with NumPy or os.mkfifo."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 4)).astype(np.float32), np.arange(40) % 3
    if content == "FIFO":
        os.mkfifo(path)
    elif content == "NPZ_OK":
        np.savez(path, x=x, y=y)
    elif content == "NPZ_TRUNCATED":
        np.savez(path, x=x, y=y)
        path.write_bytes(path.read_bytes()[:300])
    elif content == "NPZ_SCALAR":
        np.savez(path, x=np.float32(1), y=y)
    elif content in ("NPZ_NAN", "NPZ_INF"):
        x[5, 1] = np.nan if content == "NPZ_NAN" else np.inf
        np.savez(path, x=x, y=y)
    elif content == "NPZ_ROWS":
        np.savez(path, x=x, y=y[:10])
    elif content == "NPZ_OBJECT":
        np.savez(path, x=np.array([{"a": 1}] * 40, dtype=object), y=y)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def tree(folder):
    """Every path under `folder` with its size and modification time."""
    return {
        str(path.relative_to(folder)): (path.lstat().st_size, path.lstat().st_mtime_ns)
        for path in folder.rglob("*")
    }


@pytest.fixture
def run_in(tmp_path, monkeypatch):
    """Runs `opt-train COMMAND -c config.yaml ARGS` in this process from `tmp_path`; `(code, output)`."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # user folders the run appends go with the test

    def run(command, args):
        argv = [command, "--config", "config.yaml", *args]
        result = CliRunner().invoke(cli, argv, catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception  # a crash of ours: the test shows its traceback
        return result.exit_code, result.output

    return run


def assert_one_clear_line(code, output, expect):
    """Exit 2; `Error: ` and one line per problem (a flood of them counted), or the user's own traceback above it."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2, output[-2000:]
    our_package = str(REPO / "opt_train")
    assert our_package not in output, output[-2000:]
    if "Traceback" in output:
        assert lines[0] == "Traceback (most recent call last, your code):", output[-2000:]
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith("Error: ")):]
    assert lines and lines[0].startswith("Error: "), output[-2000:]
    assert all(line.rstrip().endswith("]") or line.startswith("... and ") for line in lines), output[-2000:]
    assert len(lines) <= 51 and all(len(line) < 1000 for line in lines), output[:2000]
    for part in expect if isinstance(expect, tuple) else (expect,):
        assert part in output, output[-2000:]


@pytest.mark.parametrize("config, command, args, files, expect", ALL_CASES)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, run_in, config, command, args, files, expect):
    for name, content in files.items():
        materialize(tmp_path, name, content)
    if config == "FIFO":
        materialize(tmp_path, "config.yaml", "FIFO")
    else:
        materialize(tmp_path, "config.yaml", config)
    before = tree(tmp_path)
    code, output = run_in(command, args)
    assert_one_clear_line(code, output, expect)
    created = set(tree(tmp_path)) - set(before)
    created = {path for path in created if "__pycache__" not in path}
    assert not created, created
    assert not (tmp_path / "pwned").exists()


# A model that halves its inputs when their mean is high, deciding in Python on a tensor; and the same
# model written with a tensor's own choice, as the error line tells.
BRANCHES_IN_PYTHON = textwrap.dedent('''
    import keras
    import tensorflow as tf

    class Halves(keras.Model):
        def __init__(self, classes):
            super().__init__()
            self.dense = keras.layers.Dense(classes)

        def call(self, x):
            if tf.reduce_mean(x) > 0.5:
                x = x * 0.5
            return self.dense(x)

    def make(task):
        return Halves(task.output_dim)
''')
BRANCHES_IN_THE_GRAPH = BRANCHES_IN_PYTHON.replace(
    "if tf.reduce_mean(x) > 0.5:\n            x = x * 0.5", "x = tf.where(tf.reduce_mean(x) > 0.5, x * 0.5, x)")


@pytest.mark.slow  # 6 s: four commands; the key of a refusal is checked in the fast subset below
def test_a_model_branching_in_python_on_a_tensor_is_one_line_at_that_line_and_its_fix_trains(
        tmp_path, run_in, monkeypatch):
    materialize(tmp_path, "halves.py", BRANCHES_IN_PYTHON)
    materialize(tmp_path, "config.yaml", OK + "model: {factory: 'halves:make'}\nlogdir: run\n")
    line = BRANCHES_IN_PYTHON.splitlines().index("        if tf.reduce_mean(x) > 0.5:") + 1
    code, output = run_in("train", [])
    # Found at the first step, after the run's start line (and the notes before it: the memory plan of a
    # model built by code): then the user's frames and one error line.
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("memory per device")]
    assert code == 2 and lines[0].startswith("training ") and lines[-1].startswith("Error: "), output[-2000:]
    assert lines[1] == "Traceback (most recent call last, your code):" and len(lines) == 5, output[-2000:]
    assert str(REPO / "opt_train") not in output and "tensorflow" not in output, output[-2000:]
    for part in ("Error: config.yaml:2: model.factory: Halves.call (",
                 f"halves.py:{line}: `if tf.reduce_mean(x) > 0.5:`)", "uses a tensor as a Python bool", "tf.cond"):
        assert part in lines[-1], lines[-1]
    assert lines[-1].endswith("[user_code]")
    assert not (tmp_path / "run" / "checkpoints").exists()
    # Fixed as the line says, the same command trains in the same logdir.
    assert BRANCHES_IN_THE_GRAPH != BRANCHES_IN_PYTHON
    materialize(tmp_path, "halves.py", BRANCHES_IN_THE_GRAPH)
    monkeypatch.delitem(sys.modules, "halves")
    code, output = run_in("train", [])
    assert code == 0 and "done: step 2" in output, output[-2000:]
    # The Python branch back after training: evaluating, predicting or exporting the checkpoint traces the
    # model too, and each says the same line (they showed TensorFlow's traceback and exited 1).
    materialize(tmp_path, "halves.py", BRANCHES_IN_PYTHON)
    monkeypatch.delitem(sys.modules, "halves")
    np.savez(tmp_path / "inputs.npz", x=np.zeros((3, 64), np.float32))
    for command, args in (("eval", []), ("predict", ["--input", "inputs.npz", "--output", "out.npz"]),
                          ("export", ["--out", "exported"])):
        code, output = run_in(command, args)
        last = output.strip().splitlines()[-1]
        assert code == 2 and "Traceback (most recent call last):" not in output, (command, output[-2000:])
        assert last.startswith("Error: config.yaml:2: model.factory: Halves.call (") and f"halves.py:{line}:" in last, (
            command, output[-2000:])
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "exported" / "model.keras").exists()


def test_a_start_refused_at_its_first_step_holds_no_run_and_a_changed_config_trains_there(tmp_path, run_in):
    materialize(tmp_path, "halves.py", BRANCHES_IN_PYTHON)
    materialize(tmp_path, "config.yaml", OK + "model: {factory: 'halves:make'}\nlogdir: run\n")
    code, output = run_in("train", [])
    assert code == 2 and "uses a tensor as a Python bool" in output, output[-2000:]
    # Before, the start's config.yaml made the folder "a run trained with another config" for the next one.
    materialize(tmp_path, "config.yaml", OK + "model: mlp\nlogdir: run\n")
    code, output = run_in("train", [])
    assert code == 0 and "done: step 2" in output and "beside it" not in output, output[-2000:]
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"] == "mlp"
    sessions = list((tmp_path / "run").glob("events.out.tfevents.*"))
    assert len(sessions) == 1 and b"halves" not in sessions[0].read_bytes()


def test_the_refusal_is_filed_at_the_key_whose_module_holds_the_line(tmp_path, monkeypatch, request):
    import importlib

    import tensorflow as tf

    from opt_train.usercode import graph_refusal

    materialize(tmp_path, "refusing_losses.py", "import tensorflow as tf\n\ndef signed(y, p):\n"
                "    if tf.reduce_sum(p) > 0:\n        return p - y\n    return y - p\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("refusing_losses")
    request.addfinalizer(lambda: sys.modules.pop("refusing_losses"))
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError) as caught:
        tf.function(module.signed, autograph=False)(tf.ones([2]), tf.ones([2]))
    at_loss = graph_refusal(caught.value, {"model.factory": "halves:make", "loss.factory": "refusing_losses:signed"})
    assert at_loss.key == "loss.factory" and "signed (" in at_loss.message and "refusing_losses.py:4: `if" in at_loss.message
    assert graph_refusal(caught.value, {}).key == "model"  # no named module holds it: a model's own layers
    assert graph_refusal(ValueError("another error"), {}) is None


def test_the_corpus_is_large_enough():
    assert len(ALL_CASES) >= 150


# -- security: what the current directory can and cannot make run ---------------------------

SHADOWS = {
    "yaml.py": "open('pwned', 'w').write('yaml')\n",
    "numpy.py": "open('pwned', 'w').write('numpy')\n",
    "click.py": "open('pwned', 'w').write('click')\n",
    "adam.py": "open('pwned', 'w').write('adam')\n",
}


@pytest.mark.parametrize("launcher", ["module", "console_script"])
def test_modules_in_the_current_directory_do_not_shadow_installed_ones(tmp_path, launcher):
    """A downloaded folder with a `yaml.py` must not run it: the user's folders come after site-packages."""
    for name, source in SHADOWS.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "config.yaml").write_text("max_steps: 2\noptimizer: adam\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if launcher == "module":
        command = [sys.executable, "-m", "opt_train"]
    else:
        # What a console script does: its own folder, not the current one, is first on sys.path.
        bindir = tmp_path.parent / f"{tmp_path.name}_bin"
        bindir.mkdir()
        (bindir / "opt-train").write_text("from opt_train.cli.main import main\nmain()\n")
        command = [sys.executable, str(bindir / "opt-train")]
    done = subprocess.run([*command, "validate", "--config", "config.yaml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow  # 3 s on 2 cores
def test_user_modules_are_found_in_the_config_folder_and_python_path(tmp_path, cli):
    """The config's own folder (or `python_path:`) holds the user's module, wherever the command runs from."""
    project = tmp_path / "project"
    (project / "code").mkdir(parents=True)
    (project / "code" / "my_models_in_path.py").write_text(USER_MODULE)
    (project / "my_models_beside.py").write_text(USER_MODULE)
    beside = project / "beside.yaml"
    beside.write_text(f"max_steps: 1\nmodel: {{factory: 'my_models_beside:fits'}}\nlogdir: {tmp_path / 'a'}\n")
    in_path = project / "in_path.yaml"
    in_path.write_text(
        f"max_steps: 1\nmodel: {{factory: 'my_models_in_path:fits'}}\npython_path: [code]\nlogdir: {tmp_path / 'b'}\n"
    )
    saved = list(sys.path)
    try:
        for config in (beside, in_path):
            result = cli("train", "--config", config, "--no-resume")
            assert result.exit_code == 0, result.output
    finally:
        sys.path[:] = saved
    assert (tmp_path / "a" / "final_metrics.json").exists()
    assert (tmp_path / "b" / "final_metrics.json").exists()
