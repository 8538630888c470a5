"""``securevfl explore``, ``securevfl.exploration`` and ``train --select``: the commands end to end (issue 45)."""

import json

import numpy as np
import pandas as pd
import pytest

import securevfl
from securevfl.cli import main


def _party_files(tmp_path, rows=400, seed=3):
    """Three parties' CSV files: a bank (label), a bureau (numeric, a category, missing values), a shop."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"c{i:04d}" for i in range(rows)])
    income = rng.normal(50, 15, rows)
    debt = rng.gamma(2.0, 10.0, rows)
    region = rng.choice(["north", "south", "east", "west"], rows, p=[0.4, 0.3, 0.2, 0.1])
    visits = rng.poisson(3, rows).astype(float)
    score = -0.05 * income + 0.08 * debt + (region == "south") * 0.8 + rng.normal(0, 1, rows)
    default = (score > np.median(score)).astype(int)
    bank = pd.DataFrame({"id": ids, "income": income, "age": rng.integers(20, 70, rows), "default": default})
    debt_column = debt.copy()
    debt_column[rng.random(rows) < 0.1] = np.nan
    bureau = pd.DataFrame({"id": ids, "debt": debt_column, "region": region, "noise": rng.normal(size=rows)})
    shop = pd.DataFrame({"id": ids, "visits": visits, "basket": income * 0.9 + rng.normal(0, 3, rows)})
    paths = {}
    for name, frame, keep in (("bank", bank, slice(None)), ("bureau", bureau, slice(0, rows - 20)),
                              ("shop", shop, slice(10, None))):
        path = tmp_path / f"{name}.csv"
        frame.iloc[keep].to_csv(path, index=False)
        paths[name] = path
    return paths


def test_explore_cli_writes_json_markdown_and_html(tmp_path, capsys):
    out = tmp_path / "explore.json"
    assert main(["explore", "--dataset", "breast-cancer", "--parties", "3", "--report", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["kind"] == "explore" and len(report["ranking"]) == 30
    ivs = [row["iv"] for row in report["ranking"]]
    assert ivs == sorted(ivs, reverse=True) and ivs[0] > 0.5
    assert set(report["correlation"]) == {"passive1", "passive2"}
    html = out.with_suffix(".html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    assert "information value" in out.with_suffix(".md").read_text().lower()
    printed = capsys.readouterr().out
    assert "information value" in printed and "report:" in printed


def test_explore_cli_on_party_files_with_psi_and_anonymous_passives(tmp_path):
    files = _party_files(tmp_path)
    out = tmp_path / "e.json"
    rc = main(["explore", "--id-column", "id", "--label-column", "default", "--share-stats", "none",
               *(a for name, path in files.items() for a in ("--data", f"{name}={path}")), "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["rows"] == 296  # the 370 rows all three hold, less the 20 % test rows
    names = {p: [c["name"] for c in e["columns"]] for p, e in report["parties"].items()}
    assert names["bank"] == ["income", "age"]
    assert names["bureau"] == ["bureau#1", "bureau#2", "bureau#3"] and names["shop"] == ["shop#1", "shop#2"]
    assert all("stats" not in c for c in report["parties"]["bureau"]["columns"])
    bureau = {c["name"]: c["iv"] for c in report["parties"]["bureau"]["columns"]}
    assert bureau["bureau#1"] > bureau["bureau#3"]  # debt carries the label, noise does not
    raw = out.read_text() + out.with_suffix(".html").read_text()
    assert "debt" not in raw and "region" not in raw and "north" not in raw
    shop = report["correlation"]["shop"]
    r = np.array(shop["r"])
    assert shop["active_columns"] == ["income", "age"] and r[0, 1] > 0.9  # basket follows income


@pytest.mark.parametrize("args, message", [
    (["explore", "--share-stats", "all"], "share_stats must be one of"),
    (["explore", "--max-bins", "1"], "max_bins"),
    (["explore", "--key-bits", "1024"], "key_bits must be one of"),
    (["train", "--select", "iv>>0.1"], "each rule must look like iv>=0.02"),
])
def test_explore_and_select_refusals_are_one_line(args, message, capsys):
    assert main([*args, "--report", "/tmp/never-written.json"] if args[0] == "explore" else [*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_train_select_keeps_the_passing_columns_and_the_model_scores(tmp_path):
    files = _party_files(tmp_path)
    data = [a for name, path in files.items() for a in ("--data", f"{name}={path}")]
    out = tmp_path / "run.json"
    rc = main(["train", "--method", "splitnn", "--epochs", "2", "--id-column", "id", "--label-column", "default",
               "--select", "iv>=0.15", *data, "--model-dir", str(tmp_path / "model"), "--quiet",
               "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    selection = report["extra"]["selection"]
    assert selection["rule"] == "iv>=0.15" and report["config"]["select"] == "iv>=0.15"
    assert selection["parties"]["bureau"]["dropped"] >= 1 and "dropped_columns" not in selection["parties"]["bureau"]
    kept = {p: e["kept"] for p, e in selection["parties"].items()}
    assert report["parties"]["bureau"]["features"] <= kept["bureau"] + 4  # one-hot levels of the region at most
    pred = tmp_path / "p.csv"
    assert main(["predict", "--model-dir", str(tmp_path / "model"), *data, "--out", str(pred), "--device", "cpu",
                 "--quiet", "--report", str(tmp_path / "pr.json")]) == 0
    assert len(pd.read_csv(pred)) > 300


def test_api_explore_with_the_partner_value_estimate():
    found = securevfl.explore("breast-cancer", parties=2, correlation=False, value=True, value_trees=2,
                              value_depth=2, value_rows=300, alignment="plaintext")
    assert not found.correlation and found.ranking
    value = found.value
    assert set(value["parties"]) == {"passive1"}
    assert value["rows_fit"] + value["rows_scored"] == 300
    gain = value["parties"]["passive1"]["gain"]
    assert gain == pytest.approx(value["all_parties"] - value["active_only"])
    assert value["cost"]["crypto_s"] > 0 and value["cost"]["bytes"] > 0
