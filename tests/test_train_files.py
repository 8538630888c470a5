import json

import numpy as np
import pandas as pd
import pytest

import securevfl
from securevfl.cli import main
from securevfl.errors import DataError


@pytest.fixture()
def party_files(tmp_path):
    """Two organisations' tables: overlapping customers in different orders, labels at the bank."""
    rng = np.random.default_rng(0)
    n = 300
    ids = np.array([f"cust-{i:05d}" for i in range(n)])
    x = rng.normal(size=(n, 6))
    y = (x[:, 0] + x[:, 3] - x[:, 5] > 0).astype(int)
    bank_rows = rng.permutation(n)[:250]
    shop_rows = rng.permutation(n)[:260]
    bank = pd.DataFrame(x[bank_rows, :3], columns=["b0", "b1", "b2"])
    bank.insert(0, "customer_id", ids[bank_rows])
    bank["churn"] = y[bank_rows]
    shop = pd.DataFrame(x[shop_rows, 3:], columns=["s0", "s1", "s2"])
    shop.insert(0, "customer_id", ids[shop_rows])
    paths = {"bank": tmp_path / "bank.csv", "shop": tmp_path / "shop.parquet"}
    bank.to_csv(paths["bank"], index=False)
    shop.to_parquet(paths["shop"], index=False)
    expected = len(set(ids[bank_rows]) & set(ids[shop_rows]))
    return paths, expected


def test_train_from_party_files_runs_psi_and_reports_it(party_files):
    paths, expected = party_files
    files = {k: str(v) for k, v in paths.items()}
    report = securevfl.train("splitnn", data_files=files, id_column="customer_id", label_column="churn", epochs=5)
    assert report.cost["alignment"]["intersection_size"] == expected
    assert report.parties["bank"]["aligned"] == 250 and report.parties["bank"]["unaligned"] == 0  # every row
    assert report.parties["shop"]["aligned"] == expected
    assert report.cost["crypto_s"]["psi.blind"] > 0
    assert report.metrics["accuracy"] > 0.6
    shared = securevfl.train("splitnn", data_files=files, id_column="customer_id", label_column="churn", epochs=1,
                             require_all_parties=True)
    assert shared.parties["bank"]["aligned"] == shared.parties["shop"]["aligned"] == expected
    assert shared.parties["bank"]["unaligned"] == 250 - expected


def test_cli_train_with_data_files(party_files, tmp_path):
    paths, expected = party_files
    out = tmp_path / "r.json"
    rc = main(["train", "--data", f"bank={paths['bank']}", "--data", f"shop={paths['shop']}",
               "--id-column", "customer_id", "--label-column", "churn", "--epochs", "2", "--quiet",
               "--report", str(out)])
    assert rc == 0
    assert json.loads(out.read_text())["cost"]["alignment"]["intersection_size"] == expected


def test_label_column_at_passive_party_is_refused(party_files, tmp_path, capsys):
    paths, _ = party_files
    leaky = pd.read_parquet(paths["shop"]).assign(churn=1)
    leaky_path = tmp_path / "leaky.csv"
    leaky.to_csv(leaky_path, index=False)
    with pytest.raises(DataError, match="passive party 'shop' holds the label column"):
        securevfl.train("splitnn", data_files={"bank": str(paths["bank"]), "shop": str(leaky_path)},
                        id_column="customer_id", label_column="churn", epochs=1)
    rc = main(["train", "--data", f"bank={paths['bank']}", "--data", f"shop={leaky_path}",
               "--id-column", "customer_id", "--label-column", "churn", "--quiet"])
    assert rc == 2 and "holds the label column" in capsys.readouterr().err


def test_a_parquet_file_with_integer_ids_is_read(tmp_path):
    """Integer IDs of a Parquet file stream as text (they used to crash the binary-file check)."""
    from securevfl.data.files import party_table_from_file

    path = tmp_path / "bank.parquet"
    pd.DataFrame({"id": np.arange(40, dtype=np.int64), "x": np.linspace(0, 1, 40), "y": [0, 1] * 20}).to_parquet(path)
    table, classes = party_table_from_file("bank", path, id_column="id", label_column="y", is_active=True)
    assert table.ids[:3].tolist() == ["0", "1", "2"] and classes == ("0", "1")
