"""Tests for the in-memory datasets: real digits, seeded synthetic data, splits, .npz and .csv files."""

import numpy as np
import pytest

from opt_train.data import arrays, registry, sources


def _load(name, **params):
    return sources.load_source(name, registry.check_params(name, params))


def _rows(array):
    return {row.tobytes() for row in np.asarray(array)}


def test_digits_is_sklearns_real_data_scaled_and_split():
    from sklearn.datasets import load_digits  # not at collection: scikit-learn and scipy cost every worker ~1.5 s

    reference = load_digits()
    source = _load("digits")
    x = np.concatenate([source.train[0], source.eval[0]])
    y = np.concatenate([source.train[1], source.eval[1]])
    assert x.shape == (1797, 64) and x.dtype == np.float32 and y.dtype == np.int32
    assert len(source.eval[0]) == round(1797 * 0.2)
    # the split keeps each example's pixels with its own label
    expected = {(row / 16.0).astype(np.float32).tobytes() + bytes([label]) for row, label in zip(reference.data, reference.target)}
    got = {row.tobytes() + bytes([int(label)]) for row, label in zip(x, y)}
    assert got == expected
    assert 0.0 <= x.min() and x.max() == 1.0
    assert source.task.image_shape == (8, 8, 1) and source.task.num_classes == 10


def test_digits_split_is_deterministic_and_seeded():
    first, again, other = _load("digits"), _load("digits"), _load("digits", seed=1)
    np.testing.assert_array_equal(first.eval[0], again.eval[0])
    assert _rows(first.eval[0]) != _rows(other.eval[0])


def test_split_indices_are_disjoint_and_cover():
    train, held_out = arrays.split_indices(101, 0.3, seed=5)
    assert len(held_out) == 30
    assert not set(train) & set(held_out)
    assert sorted(np.concatenate([train, held_out])) == list(range(101))


@pytest.mark.parametrize("name", ["synthetic_classification", "synthetic_regression", "reversal"])
def test_generated_datasets_are_deterministic_under_seed(name):
    first, again, other = _load(name, seed=7), _load(name, seed=7), _load(name, seed=8)
    for a, b in zip(first.train + first.eval, again.train + again.eval):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first.train[0], other.train[0])


def test_synthetic_classification_shapes_and_labels():
    source = _load("synthetic_classification", num_examples=200, num_features=3, num_classes=5)
    assert source.train[0].shape == (160, 3) and source.eval[0].shape == (40, 3)
    assert set(np.unique(np.concatenate([source.train[1], source.eval[1]]))) <= set(range(5))
    assert source.task.kind == "classification" and source.task.output_dim == 5


def test_synthetic_classification_without_noise_sits_on_class_centres():
    x, y = _load("synthetic_classification", num_examples=50, noise=0.0).train
    for label in np.unique(y):
        assert len(_rows(x[y == label])) == 1


def test_synthetic_regression_linear_target_is_recoverable_by_least_squares():
    x, y = _load("synthetic_regression", num_examples=400, num_targets=2, noise=0.0).train
    assert y.shape == (320, 2)
    design = np.hstack([x, np.ones((len(x), 1), np.float32)])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    np.testing.assert_allclose(design @ coef, y, atol=1e-4)


def test_reversal_target_is_the_reversed_input():
    source = _load("reversal", vocab_size=5, seq_len=6, num_examples=50)
    x, y = source.train
    assert x.shape == (40, 6) and x.dtype == np.int32
    np.testing.assert_array_equal(y, x[:, ::-1])
    assert x.min() >= 0 and x.max() < 5
    assert source.task.kind == "sequence" and source.task.vocab_size == 5 and source.task.input_dtype == "int32"


def test_npz_classification_with_eval_fraction(tmp_path):
    x = np.arange(40, dtype=np.float64).reshape(20, 2)
    y = np.arange(20) % 3
    np.savez(tmp_path / "d.npz", feats=x, labels=y)
    source = _load("npz", path=str(tmp_path / "d.npz"), x_key="feats", y_key="labels", eval_fraction=0.25)
    assert len(source.eval[0]) == 5 and source.train[0].dtype == np.float32
    assert source.task.num_classes == 3 and source.task.input_shape == (2,)
    for xs, ys in (source.train, source.eval):  # each row keeps its own label
        np.testing.assert_array_equal(ys, (xs[:, 0] // 2).astype(int) % 3)


def test_npz_regression_with_eval_path_and_relative_path(tmp_path, monkeypatch):
    np.savez(tmp_path / "train.npz", x=np.zeros((6, 4, 4)), y=np.arange(6.0))
    np.savez(tmp_path / "eval.npz", x=np.ones((3, 4, 4)), y=np.arange(3.0))
    monkeypatch.chdir(tmp_path)
    source = _load("npz", path="train.npz", eval_path="eval.npz", task="regression")
    assert source.train[1].shape == (6, 1) and source.eval[0].shape == (3, 4, 4)
    assert source.task.kind == "regression" and source.task.output_dim == 1
    assert source.task.image_shape == (4, 4, 1)


def test_npz_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="`path` must name an existing file"):
        _load("npz", path=str(tmp_path / "missing.npz"))
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 2)), y=np.zeros(4))
    with pytest.raises(ValueError, match=r"`y_key` must name an array .* \['x', 'y'\]"):
        _load("npz", path=str(tmp_path / "d.npz"), y_key="labels")


def test_csv_with_header_named_label_and_string_classes(tmp_path):
    lines = ["a,species,b"] + [f"{i},{'cat' if i % 2 else 'dog'},{i * 10}" for i in range(10)]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    source = _load("csv", path=str(tmp_path / "t.csv"), label_column="species", eval_fraction=0.3)
    x = np.concatenate([source.train[0], source.eval[0]])
    y = np.concatenate([source.train[1], source.eval[1]])
    assert x.shape == (10, 2) and source.task.num_classes == 2
    np.testing.assert_array_equal(x[:, 1], x[:, 0] * 10)
    np.testing.assert_array_equal(y, np.where(x[:, 0] % 2 == 1, 0, 1))  # sorted: cat=0, dog=1


def test_csv_without_header_last_column_regression(tmp_path):
    (tmp_path / "t.csv").write_text("".join(f"{i};{2 * i + 1}\n" for i in range(8)))
    source = _load("csv", path=str(tmp_path / "t.csv"), header=False, delimiter=";", task="regression")
    x, y = source.train
    np.testing.assert_allclose(y[:, 0], 2 * x[:, 0] + 1)


def test_csv_unknown_label_column_lists_the_columns(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match=r"`label_column` must name a column .*\['a', 'b'\]"):
        _load("csv", path=str(tmp_path / "t.csv"), label_column="c")


@pytest.mark.parametrize("command", ["validate", "train"])
def test_a_csv_label_column_not_in_the_header_is_refused_with_did_you_mean(tmp_path, cli, command):
    """validate reads the header as train does: the same line, key, code and closest column (exit 2)."""
    (tmp_path / "wine.csv").write_text("alcohol,acidity,quality\n1,2,a\n3,4,b\n5,6,a\n7,8,b\n9,1,a\n")
    config = tmp_path / "run.yaml"
    config.write_text("max_steps: 1\ndata: csv\ndata_params:\n  path: wine.csv\n  label_column: qualty\n"
                      f"logdir: {tmp_path / 'run'}\n")
    result = cli(command, "--config", config)
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"Error: {config}:5: data_params.label_column: must name a column of ")
    assert "['alcohol', 'acidity', 'quality']; did you mean 'quality'?" in last and last.endswith("[unknown_name]")
    assert "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_an_eval_csv_with_its_columns_in_another_order_is_read_by_name(tmp_path):
    """eval_path's columns are matched to path's header by name, as predict matches them; a foreign one is refused."""
    rows = [[1.0, 20.0, 0.5, "a"], [2.0, 30.0, 0.25, "b"], [3.0, 40.0, 0.75, "a"]]
    header = ["income", "age", "ratio", "label"]

    def write(name, order, names=header):
        with open(tmp_path / name, "w") as handle:
            handle.write(",".join(names[i] for i in order) + "\n")
            handle.writelines(",".join(str(row[i]) for i in order) + "\n" for row in rows)
        return str(tmp_path / name)

    train = write("train.csv", [0, 1, 2, 3])
    same = _load("csv", path=train, eval_path=write("same.csv", [0, 1, 2, 3]), label_column="label")
    shuffled = _load("csv", path=train, eval_path=write("shuffled.csv", [3, 2, 0, 1]), label_column="label")
    np.testing.assert_array_equal(shuffled.eval[0], same.eval[0])
    np.testing.assert_array_equal(shuffled.eval[1], same.eval[1])
    assert same.task.columns == tuple(header)
    foreign = write("foreign.csv", [0, 1, 2, 3], ["income", "age", "zip", "label"])
    with pytest.raises(ValueError) as caught:
        _load("csv", path=train, eval_path=foreign, label_column="label")
    assert (caught.value.param, caught.value.code) == ("eval_path", "conflict")
    assert "missing: ratio; not in `path`: zip" in str(caught.value)
