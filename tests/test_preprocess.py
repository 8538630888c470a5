"""Each party's own preprocessing (issue #15): mixed-type tables, fitted on training rows only.

The leakage tests rewrite the test rows of a file (a huge number, a category never seen elsewhere,
blanks where the training rows have none) and check that nothing fitted changes: not a median, a
mean, a scale, a category list or a missing-value column.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from deployed_threads import loopback_federation, one_torch_thread, run_parties_in_threads

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.cli import main
from securevfl.data import ColumnSpec, DatasetOptions, PartitionSpec, load_dataset, partition, scenario_from_partition
from securevfl.data.datasets import read_frame
from securevfl.data.files import party_tables_from_files
from securevfl.data.preprocess import fit_party_encoder
from securevfl.data.scenario import scenario_from_tables
from securevfl.errors import ConfigError, DataError

JOBS = ("admin", "nurse", "teacher", "driver", "chef")
PLANS = ("basic", "plus", "premium")


def mixed_frames(n: int = 400, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Three organisations' tables about overlapping customers, each in its own row order.

    bank (active): age with ``?`` blanks, job (text, ``?`` blanks), the label ``churn`` (yes/no);
    shop: spend, channel (text, blanks), city (30 levels: above the one-hot limit of 20);
    clinic: visits (integer), plan (text), signup (a date column, named only in clinic's spec).
    """
    rng = np.random.default_rng(seed)
    ids = np.array([f"cust-{i:04d}" for i in range(n)])
    job = rng.integers(0, len(JOBS), n)
    channel = rng.choice(["web", "app", "shop"], n)
    city = rng.integers(0, 30, n)
    plan = rng.integers(0, len(PLANS), n)
    spend = rng.normal(100, 30, n)
    age = rng.integers(20, 70, n)
    visits = rng.integers(0, 9, n)
    logit = (np.array([1.5, -1.0, 0.0, 1.0, -1.5])[job] + 1.2 * (channel == "web") + 0.04 * (spend - 100)
             + np.array([-1.0, 0.0, 1.2])[plan] - 0.03 * (age - 45))
    churn = np.where(logit + rng.logistic(size=n) * 0.5 > 0, "yes", "no")

    def with_marker(values: np.ndarray, rate: float, marker: str) -> np.ndarray:
        out = values.astype(object)
        out[rng.random(n) < rate] = marker
        return out

    frames = {
        "bank": pd.DataFrame({"customer_id": ids, "age": with_marker(age, 0.05, "?"),
                              "job": with_marker(np.asarray(JOBS)[job], 0.05, "?"), "churn": churn}),
        "shop": pd.DataFrame({"customer_id": ids, "spend": spend.round(2),
                              "channel": with_marker(channel, 0.05, ""), "city": [f"c{c:02d}" for c in city]}),
        "clinic": pd.DataFrame({"customer_id": ids, "visits": visits, "plan": np.asarray(PLANS)[plan],
                                "signup": pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 900, n), "D")}),
    }
    frames["clinic"]["signup"] = frames["clinic"]["signup"].dt.strftime("%Y-%m-%d")
    out = {}
    for i, (name, frame) in enumerate(frames.items()):
        keep = np.random.default_rng(10 + i).random(n) < 0.92  # each holds ~92 % of the customers
        out[name] = frame[keep].sample(frac=1.0, random_state=20 + i).reset_index(drop=True)  # its own order
    return out


def write(frames: dict[str, pd.DataFrame], directory) -> dict[str, str]:
    paths = {}
    for name, frame in frames.items():
        paths[name] = str(directory / f"{name}.csv")
        frame.to_csv(paths[name], index=False)
    return paths


CLINIC = {"clinic": ColumnSpec(dates=("signup",))}


@pytest.fixture()
def files(tmp_path):
    return write(mixed_frames(), tmp_path)




# ------------------------------------------------------------------ end to end


def test_three_party_csv_files_with_categories_blanks_and_a_text_label_train(files, tmp_path):
    report = securevfl.train("splitnn", data_files=files, id_column="customer_id", label_column="churn",
                             columns=CLINIC, epochs=8, batch_size=32, seed=0, device="cpu",
                             report=tmp_path / "run.json")
    labels = pd.read_csv(files["bank"])["churn"]
    majority = labels.value_counts(normalize=True).max()
    assert report.metrics["accuracy"] > majority + 0.05, (report.metrics, majority)
    parties = report.parties
    assert parties["bank"]["classes"] == ["no", "yes"] and "classes" not in parties["shop"]
    bank, shop, clinic = (parties[p]["preprocessing"] for p in ("bank", "shop", "clinic"))
    assert bank["imputed"]["age"] > 0 and "age_missing" in bank["encoded_columns"]  # '?' read as missing
    assert set(bank["one_hot"]) == {"job"} and "job_(missing)" in bank["encoded_columns"]
    assert shop["hashed"] == {"city": {"levels": 30, "buckets": 16}} and shop["one_hot"] == {"channel": 4}
    assert clinic["dates"] == {"signup": ["signup_year", "signup_month", "signup_weekday"]}
    for entry in parties.values():  # the report lists every party's encoded columns: the model's inputs
        assert entry["features"] == len(entry["preprocessing"]["encoded_columns"])
    markdown = (tmp_path / "run.md").read_text()
    assert "Encoded columns of shop: spend, channel_(missing)" not in markdown  # numbers come first
    assert "Encoded columns of shop: spend, city_hash0" in markdown and "Classes (label at bank): no, yes" in markdown
    assert "hashed: city (30 levels -> 16)" in markdown


def test_a_deployed_run_preprocesses_as_the_threaded_run(files, tmp_path):
    fed = loopback_federation(tmp_path, list(files), "bank",
                              'method = "splitnn"\nepochs = 2\nbatch_size = 64\nid_column = "customer_id"\n'
                              'label_column = "churn"', extra='[parties.clinic.columns]\ndates = ["signup"]')
    assert fed.parties["clinic"].columns.dates == ("signup",)
    with one_torch_thread():
        results = run_parties_in_threads(fed, files)
        local = securevfl.train("splitnn", data_files=files, id_column="customer_id", label_column="churn",
                                columns=CLINIC, epochs=2, batch_size=64, device="cpu")
    network = results["bank"].report
    for key in ("accuracy", "f1", "auc"):
        assert network.metrics[key] == pytest.approx(local.metrics[key], abs=1e-6), key
    assert network.parties["bank"] == local.parties["bank"]
    for p in ("shop", "clinic"):  # the active party knows each peer's encoded width, never its columns
        assert network.parties[p]["features"] == local.parties[p]["features"]
        assert "preprocessing" not in network.parties[p]
        assert results[p].preprocessing == local.parties[p]["preprocessing"]  # the peer's own record


def test_synthetic_mixed_is_learnt_clearly_above_the_majority_class():
    dataset = load_dataset("synthetic-mixed", DatasetOptions(n_samples=2000))
    assert dataset.source.startswith("generated")
    assert {"job", "city", "has_card"} <= set(dataset.categorical_columns)
    assert dataset.frame["city"].nunique() > 20 and dataset.frame["signup"].isna().any()
    assert dataset.frame["job"].isna().any()  # its '?' markers are missing values
    report = securevfl.train("splitnn", "synthetic-mixed", parties=3, n_samples=2000, epochs=6, seed=0,
                             device="cpu", alignment="plaintext")
    majority = dataset.frame["churn"].value_counts(normalize=True).max()
    assert report.metrics["accuracy"] > majority + 0.1, (report.metrics, majority)
    assert report.parties["active"]["classes"] == ["no", "yes"]
    hashed = [p for p in report.parties.values() if p["preprocessing"]["hashed"]]
    assert len(hashed) == 1 and "city" in hashed[0]["preprocessing"]["hashed"]


def test_cli_drop_integer_categorical_and_dates_on_one_table(tmp_path, capsys):
    frames = mixed_frames(n=200)
    table = frames["bank"].merge(frames["clinic"], on="customer_id").assign(note="free text")
    path = tmp_path / "table.csv"
    table.to_csv(path, index=False)
    out = tmp_path / "r.json"
    rc = main(["train", "--dataset", f"csv:{path}", "--id-column", "customer_id", "--label-column", "churn",
               "--categorical", "visits", "--drop", "note", "--dates", "signup", "--epochs", "1", "--quiet",
               "--alignment", "plaintext", "--report", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert "each party's own preprocessing" in capsys.readouterr().out
    parties = json.loads(out.read_text())["parties"]
    encoded = [c for p in parties.values() for c in p["preprocessing"]["encoded_columns"]]
    assert any("visits" in p["preprocessing"]["one_hot"] for p in parties.values())  # integer codes as levels
    assert "visits_3" in encoded and "visits" not in encoded
    assert any(p["preprocessing"]["dates"] == {"signup": ["signup_year", "signup_month", "signup_weekday"]}
               for p in parties.values() if p["preprocessing"]["dates"])
    assert not any(c.startswith("note") for c in encoded)
    assert "columns dropped before partitioning: note" in json.loads(out.read_text())["notes"]


# ------------------------------------------------------------------ fitted on training rows only


def _scenario(paths, columns=CLINIC):
    tables, classes = party_tables_from_files(paths, id_column="customer_id", label_column="churn",
                                              columns=columns)
    return scenario_from_tables(tables, "bank", classes, seed=0)


def test_test_rows_change_nothing_that_is_fitted(tmp_path):
    """A huge number, a category seen only in test rows and blanks only in test rows change no fitted value."""
    frames = mixed_frames()
    (tmp_path / "clean").mkdir()
    (tmp_path / "leaky").mkdir()
    clean = _scenario(write(frames, tmp_path / "clean"))
    bank = clean.tables["bank"]
    test_ids = set(bank.ids[clean.alignment.aligned["bank"][clean.test]])
    shop = frames["shop"].copy()
    in_test = shop["customer_id"].isin(test_ids).to_numpy()
    shop.loc[in_test, "spend"] = 1e9  # would move the mean and the scale
    shop.loc[np.flatnonzero(in_test)[:5], "spend"] = np.nan  # no blank in the training rows: no indicator
    shop.loc[in_test, "channel"] = "only-in-test"  # would add a one-hot column
    bank_frame = frames["bank"].copy()
    bank_frame.loc[bank_frame["customer_id"].isin(test_ids), "age"] = 999  # would move the median that fills
    assert bank_frame["age"].eq("?").any()  # the '?' blanks of the training rows
    frames_leaky = {**frames, "shop": shop, "bank": bank_frame}
    leaky = _scenario(write(frames_leaky, tmp_path / "leaky"))
    assert np.array_equal(leaky.test, clean.test)  # the split depends on the labels only
    before, after = clean.party_data("shop"), leaky.party_data("shop")
    assert after.feature_names == before.feature_names
    assert "spend_missing" not in after.feature_names and not any("only-in-test" in c for c in after.feature_names)
    np.testing.assert_array_equal(after.X_train, before.X_train)  # same median, mean, scale, categories
    np.testing.assert_array_equal(after.X_unaligned, before.X_unaligned)
    np.testing.assert_array_equal(leaky.party_data("bank").X_train, clean.party_data("bank").X_train)  # median
    channel = [i for i, c in enumerate(after.feature_names) if c.startswith("channel_")]
    assert channel and np.all(after.X_test[:, channel] == 0)  # the unseen level: all zeros (no rare level here)
    spend = after.feature_names.index("spend")
    assert np.isfinite(after.X_test).all() and after.X_test[:, spend].max() > 1e6  # encoded, not fitted on


def test_an_unseen_level_goes_to_the_infrequent_column_and_the_encoder_sees_only_training_rows():
    train = pd.DataFrame({"job": ["a"] * 10 + ["b"] * 10 + ["rare"] * 2, "x": np.arange(22.0)})
    encoder = fit_party_encoder(train, ColumnSpec(min_frequency=5))
    assert encoder.feature_names == ("x", "job_a", "job_b", "job_(infrequent)")
    test = pd.DataFrame({"job": ["new", "a", None], "x": [1e9, np.nan, 0.0]})
    X = encoder.transform(test)
    assert X[0].tolist()[1:] == [0, 0, 1] and X[1].tolist()[1:] == [1, 0, 0]
    assert X[2].tolist()[1:] == [0, 0, 1]  # a blank never seen in training is an unseen level too
    median = float(np.median(train["x"]))
    assert X[1, 0] == pytest.approx((median - train["x"].mean()) / train["x"].std(ddof=0), rel=1e-6)
    assert encoder.summary["fitted_rows"] == 22 and encoder.summary["one_hot"] == {"job": 3}


def test_numeric_tables_are_standardised_exactly_as_before():
    """The preprocessing replaced the scenario's own standardisation: bundled results stay bit for bit."""
    sc = scenario_from_partition(partition(load_dataset("breast-cancer"),
                                           PartitionSpec(parties=3, aligned=200, unaligned="spread")))
    for name in sc.parties:
        t = sc.tables[name]
        fit = np.concatenate([sc.alignment.aligned[name][sc.train], sc.alignment.unaligned[name]])
        X = t.features.astype(np.float32)
        mean, std = X[fit].mean(axis=0), X[fit].std(axis=0)
        old = (X - mean) / np.where(std > 1e-8, std, 1.0)
        data = sc.party_data(name)
        np.testing.assert_array_equal(data.X_train, old[sc.alignment.aligned[name][sc.train]])
        np.testing.assert_array_equal(data.X_unaligned, old[sc.alignment.unaligned[name]])
        assert data.feature_names == t.feature_names


# ------------------------------------------------------------------ reading, labels and errors


def test_missing_markers_are_configurable(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,a,b\n1,?,x\n2,-,y\n3,NA,\n4,5,z\n")
    default = read_frame(path, "csv", id_column="id")
    assert default["a"].isna().tolist() == [True, False, True, False] and default["b"].isna().tolist()[2]
    custom = read_frame(path, "csv", id_column="id", missing_markers=ColumnSpec(missing_markers=("-",)).missing_markers)
    assert custom["a"].isna().tolist() == [False, True, False, False] and custom["a"][0] == "?"
    assert custom["b"].isna().tolist() == [False, False, True, False]  # a blank cell is always missing


BANK = r"bank\.csv \(party bank\): "


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f.assign(churn=["yes"] * len(f)), BANK + "label column 'churn' has fewer than 2 classes"),
    (lambda f: f.assign(churn=["?"] + list(f.churn[1:])), BANK + "label column 'churn' has 1 missing"),
    (lambda f: f.assign(age=["old"] + list(f.age[1:])), BANK + "column 'age' holds numbers and 1 text"),
])
def test_bad_tables_name_the_file_and_the_column(tmp_path, mutate, message):
    frames = mixed_frames(n=60)
    paths = write({**frames, "bank": mutate(frames["bank"])}, tmp_path)
    with pytest.raises(DataError, match=message):
        _scenario(paths)


def test_bad_column_specs_are_clear_errors(tmp_path, files):
    with pytest.raises(DataError, match=r"column 'nope' named in the column spec is in none of the files"):
        _scenario(files, ColumnSpec(drop=("nope",)))
    with pytest.raises(DataError, match=r"clinic\.csv \(party clinic\): column 'nope' given in --dates"):
        _scenario(files, {"clinic": ColumnSpec(dates=("nope",))})
    with pytest.raises(DataError, match=r"date column 'plan' has \d+ values that are not dates, e\.g\. '"):
        _scenario(files, {"clinic": ColumnSpec(dates=("plan",))})
    with pytest.raises(ConfigError, match="named in both categorical and drop"):
        ColumnSpec(categorical=("a",), drop=("a",))
    with pytest.raises(ConfigError, match="max_onehot must be an integer >= 1"):
        ColumnSpec(max_onehot=0)
    with pytest.raises(ConfigError, match="per-party column specs"):
        build_scenario(RunConfig(dataset="breast-cancer", dataset_options=DatasetOptions(columns=CLINIC)))


def test_shared_rows_with_one_class_are_refused(tmp_path):
    frames = mixed_frames(n=80)
    bank = frames["bank"].copy()
    shared = set(frames["shop"].customer_id) & set(frames["clinic"].customer_id)
    bank.loc[bank.customer_id.isin(shared), "churn"] = "no"
    with pytest.raises(DataError, match=r"rows shared by all parties have one class only \('no'\)"):
        _scenario(write({**frames, "bank": bank}, tmp_path))


def test_a_column_empty_in_the_training_rows_is_named():
    frame = pd.DataFrame({"x": [np.nan] * 5, "y": np.arange(5.0)})
    with pytest.raises(DataError, match=r"bank\.csv: column 'x' has no values in the training rows"):
        fit_party_encoder(frame, where="bank.csv")


def test_command_line_column_options_override_the_partys_section():
    from securevfl.data.columns import spec_from_text

    base = ColumnSpec(categorical=("store",), dates=("first",), max_onehot=8)
    spec = spec_from_text(drop="notes, x", missing_markers="?,unknown", base=base)
    assert spec == ColumnSpec(categorical=("store",), drop=("notes", "x"), dates=("first",),
                              missing_markers=("", "?", "unknown"), max_onehot=8)
    assert spec_from_text(categorical="a", max_onehot=3, base=base).categorical == ("a",)
    assert spec_from_text() == ColumnSpec()
