"""Standardised tabular inputs and label vocabularies, from a raw CSV through training to predict and a plain SavedModel."""

import csv
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from opt_train.data import normalization
from tests.support import END_WITHOUT_TEARDOWN, write_run

# Two tests read one trained run (a module fixture): one xdist worker runs them (scripts/test.sh: --dist loadgroup).


def write_credit_csv(path, n=2000, seed=0):
    """A real-looking tabular task: income in tens of thousands, age in years, a ratio; labels good / bad.

    The rule weighs all three on their own scales, so a model that sees them unscaled
    (income dominating by 10^5) cannot learn it in a few hundred steps.
    """
    rng = np.random.default_rng(seed)
    income = rng.uniform(20000, 150000, n).round(-2)
    age = rng.integers(18, 80, n)
    ratio = rng.uniform(0, 1, n).round(3)
    score = (income - 85000) / 30000 + (age - 49) / 15 - 3 * (ratio - 0.5)
    label = np.where(score > 0, "good", "bad")
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["income", "age", "debt_ratio", "label"])
        writer.writerows(zip(income, age, ratio, label))
    return np.stack([income, age, ratio], axis=1), label


def test_statistics_equal_numpy_and_streaming_equals_in_memory():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(5e4, 2e4, (1001, 1)), rng.normal(40, 12, (1001, 1)), np.full((1001, 1), 7.0)], 1)
    whole = normalization.from_array(x)
    np.testing.assert_allclose(whole.mean, x.mean(axis=0))
    np.testing.assert_allclose(whole.variance[:2], x.var(axis=0)[:2])
    assert whole.variance[2] == 1.0  # a constant column is only centred
    streamed = normalization.from_batches(np.array_split(x, 7))
    np.testing.assert_allclose(streamed.mean, whole.mean, rtol=1e-12)
    np.testing.assert_allclose(streamed.variance, whole.variance, rtol=1e-10)
    assert streamed.count == whole.count == 1001
    standardised = whole.apply(x)
    np.testing.assert_allclose(standardised[:, :2].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(standardised[:, :2].std(axis=0), 1, atol=1e-5)


def test_keras_layer_computes_the_same_transform():
    x = np.random.default_rng(0).normal(3e4, 1e4, (50, 3))
    statistics = normalization.from_array(x)
    layer = normalization.keras_layer(statistics, (3,))
    np.testing.assert_allclose(np.asarray(layer(x.astype(np.float32))), statistics.apply(x), rtol=1e-5, atol=1e-5)


def _config(tmp_path, **data_params):
    return write_run(tmp_path, {
        "data": "csv",
        "data_params": {"path": str(tmp_path / "credit.csv"), "label_column": "label", **data_params},
        "max_steps": 400, "eval_steps": 400,
    })


@pytest.fixture(scope="module")
def credit_run(tmp_path_factory):
    """The credit CSV trained with the default MLP (normalized): `(folder, config, rows, labels, output)`."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    folder = tmp_path_factory.mktemp("credit")
    x, labels = write_credit_csv(folder / "credit.csv")
    config = _config(folder)
    result = CliRunner().invoke(cli, ["train", "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder, config, x, labels, result.output


@pytest.mark.slow
def test_raw_csv_learns_with_default_mlp_and_not_without_normalization(tmp_path, cli, credit_run):
    folder, _, _, _, output = credit_run
    assert "labels (class id = value in the data): 0=bad, 1=good" in output
    final = json.loads((folder / "run" / "final_metrics.json").read_text())
    assert final["eval/accuracy"] >= 0.9, final

    off = tmp_path / "off"
    off.mkdir()
    write_credit_csv(off / "credit.csv")
    result = cli("train", "--config", _config(off, normalize=False), "--set", "export=false")  # its figures alone
    assert result.exit_code == 0, result.output
    final_off = json.loads((off / "run" / "final_metrics.json").read_text())
    assert final_off["eval/accuracy"] < 0.9, final_off


@pytest.mark.slow
def test_predict_and_plain_savedmodel_take_raw_rows_and_answer_in_labels(tmp_path, cli, credit_run):
    folder, config, x, labels, _ = credit_run
    run = folder / "run"

    # The saved statistics are the train split's, recomputed here with NumPy.
    from opt_train.data import arrays

    train_idx, _ = arrays.split_indices(len(x), 0.2, seed=0)
    saved = json.loads((run / "data.json").read_text())
    assert saved["labels"] == ["bad", "good"]
    np.testing.assert_allclose(saved["normalization"]["mean"], x[train_idx].mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(saved["normalization"]["variance"], x[train_idx].var(axis=0), rtol=1e-6)
    assert json.loads((run / "export" / "data.json").read_text()) == saved

    np.savez(tmp_path / "rows.npz", x=x.astype(np.float32))
    result = cli("predict", "--config", config, "--input", tmp_path / "rows.npz", "--output", tmp_path / "out.npz")
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "out.npz") as out:
        predicted, classes = out["labels"], out["classes"]
    assert np.mean(predicted == labels) >= 0.9
    np.testing.assert_array_equal(predicted, np.array(["bad", "good"])[classes])

    # No opt_train in this process: the SavedModel alone standardises and names the labels.
    script = textwrap.dedent(f"""
        import sys, numpy as np, tensorflow as tf, keras
        loaded = tf.saved_model.load({str(run / "export" / "saved_model")!r})
        rows = np.load({str(tmp_path / "rows.npz")!r})["x"]
        out = loaded.signatures["serving_default"](inputs=tf.constant(rows))
        np.save({str(tmp_path / "served.npy")!r}, out["labels"].numpy().astype(str))
        model = keras.models.load_model({str(run / "export" / "model.keras")!r})
        np.save({str(tmp_path / "keras.npy")!r}, model.predict(rows, verbose=0))
        np.save({str(tmp_path / "outputs.npy")!r}, out["outputs"].numpy())
        assert not any(name.startswith("opt_train") for name in sys.modules)
    """) + END_WITHOUT_TEARDOWN
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "served.npy"), predicted)
    np.testing.assert_allclose(np.load(tmp_path / "keras.npy"), np.load(tmp_path / "outputs.npy"), rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # 3 s on 2 cores
def test_tfrecord_statistics_are_streamed_and_labels_travel_with_the_records(tmp_path):
    """`data to-tfrecord` of the CSV, read back: the streamed statistics equal NumPy's on the train rows."""
    from opt_train.data import build_data
    from opt_train.data.convert import to_tfrecord

    x, labels = write_credit_csv(tmp_path / "credit.csv", n=3000)
    converted = to_tfrecord(str(tmp_path / "credit.csv"), str(tmp_path / "records"), shards=3, label_column="label")
    params = converted["data_params"]
    assert params["labels"] == ["bad", "good"]
    data = build_data("tfrecord", params, batch_size=50, seed=0)
    statistics = data.task.normalization
    np.testing.assert_allclose(statistics.mean, x.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(statistics.variance, x.var(axis=0), rtol=1e-5)
    assert statistics.count == 3000 and data.task.labels == ("bad", "good")
    inputs, _ = next(iter(data.train))
    assert np.abs(np.asarray(inputs)).max() < 10  # standardised, not in tens of thousands
    off = build_data("tfrecord", {**params, "normalize": False}, batch_size=50, seed=0)
    assert off.task.normalization is None and np.asarray(next(iter(off.train))[0]).max() > 1000
