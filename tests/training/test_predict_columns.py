"""`predict` on a CSV maps columns by the training header's names: any order, a missing or extra one named."""

import csv
import json

import numpy as np
import pytest

# One trained run (a module fixture) read by every test here: one xdist worker runs them.

HEADER = ["income", "age", "debt_ratio", "label"]


def write_rows(path, header, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(header)
        writer.writerows(rows)


@pytest.fixture(scope="module")
def wine_run(tmp_path_factory):
    """A small CSV run (3 features on their own scales, string labels): `(folder, config, rows)`."""
    from click.testing import CliRunner

    from opt_train.cli.main import cli

    folder = tmp_path_factory.mktemp("columns")
    rng = np.random.default_rng(0)
    income, age, ratio = rng.uniform(2e4, 1.5e5, 200).round(-2), rng.integers(18, 80, 200), rng.uniform(0, 1, 200)
    label = np.where((income - 85000) / 30000 + (age - 49) / 15 - 3 * (ratio - 0.5) > 0, "good", "bad")
    rows = [[float(a), int(b), round(float(c), 3), d] for a, b, c, d in zip(income, age, ratio, label)]
    write_rows(folder / "train.csv", HEADER, rows)
    config = folder / "run.yaml"
    config.write_text(f"data: csv\ndata_params: {{path: train.csv, label_column: label}}\nmax_steps: 20\n"
                      f"model_params: {{hidden_units: [8]}}\nlogdir: {folder / 'run'}\n")
    result = CliRunner().invoke(cli, ["train", "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder, config, rows


def predict(cli, config, path, out):
    result = cli("predict", "--config", config, "--input", path, "--output", out)
    return result


def outputs(path):
    with np.load(path) as arrays:
        return arrays["outputs"], arrays["labels"]


@pytest.mark.slow  # trains a run (module fixture), then three predictions
def test_the_same_columns_in_another_order_give_the_same_predictions(wine_run, cli, tmp_path):
    folder, config, rows = wine_run
    write_rows(tmp_path / "same.csv", HEADER, rows)
    order = [2, 3, 0, 1]  # debt_ratio, label, income, age
    write_rows(tmp_path / "shuffled.csv", [HEADER[i] for i in order], [[row[i] for i in order] for row in rows])
    features_only = [2, 0, 1]
    write_rows(tmp_path / "features.csv", [HEADER[i] for i in features_only],
               [[row[i] for i in features_only] for row in rows])
    results = {}
    for name in ("same", "shuffled", "features"):
        result = predict(cli, config, tmp_path / f"{name}.csv", tmp_path / f"{name}.npz")
        assert result.exit_code == 0, result.output
        results[name] = outputs(tmp_path / f"{name}.npz")
    for name in ("shuffled", "features"):
        np.testing.assert_array_equal(results[name][0], results["same"][0])
        np.testing.assert_array_equal(results[name][1], results["same"][1])
    # The model was not simply constant: the rows got both labels.
    assert set(results["same"][1]) == {"good", "bad"}


@pytest.mark.slow
def test_a_missing_or_extra_column_is_named_in_one_line_exit_2(wine_run, cli, tmp_path):
    folder, config, rows = wine_run
    write_rows(tmp_path / "missing.csv", ["income", "debt_ratio"], [[row[0], row[2]] for row in rows])
    write_rows(tmp_path / "extra.csv", HEADER + ["zip"], [row + [12345] for row in rows])
    for name, expected in (("missing", "lacks the column 'age'"), ("extra", "has column 'zip' the model was not")):
        result = predict(cli, config, tmp_path / f"{name}.csv", tmp_path / "p.npz")
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and expected in lines[0] and "--input" in lines[0], lines
        assert "Traceback" not in result.output
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.slow
def test_a_csv_without_header_is_taken_by_position_and_says_so(wine_run, cli, tmp_path):
    folder, config, rows = wine_run
    write_rows(tmp_path / "same.csv", HEADER, rows)
    write_rows(tmp_path / "bare.csv", None, [row[:3] for row in rows])
    first = predict(cli, config, tmp_path / "same.csv", tmp_path / "same.npz")
    bare = predict(cli, config, tmp_path / "bare.csv", tmp_path / "bare.npz")
    assert bare.exit_code == 0, bare.output
    assert "has no header row: its columns are taken by position, as the training data's " \
           "(income, age, debt_ratio)" in bare.output
    np.testing.assert_array_equal(outputs(tmp_path / "bare.npz")[0], outputs(tmp_path / "same.npz")[0])
    # What it wrote, in words, not bare shapes.
    assert f"wrote {tmp_path / 'same.npz'}: {len(rows)} examples: outputs ({len(rows)}, 2) (logits), " \
           f"classes ({len(rows)},) (class ids), labels ({len(rows)},) (your label values)" in first.output
    as_csv = predict(cli, config, tmp_path / "same.csv", tmp_path / "same_out.csv")
    assert f"wrote {tmp_path / 'same_out.csv'}: {len(rows)} rows of class,label (checkpoint " in as_csv.output


@pytest.mark.slow
def test_the_export_names_the_columns_its_inputs_are(wine_run):
    folder = wine_run[0]
    for card in (folder / "run" / "data.json", folder / "run" / "export" / "data.json"):
        assert json.loads(card.read_text())["columns"] == HEADER
