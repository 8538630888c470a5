import json

import numpy as np
import pandas as pd
import pytest

from securevfl.cli import main


def test_train_from_cli_writes_report(tmp_path, capsys):
    out = tmp_path / "run.json"
    rc = main(["train", "--method", "splitnn", "--dataset", "breast-cancer", "--parties", "2",
               "--epochs", "2", "--quiet", "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["method"] == "splitnn" and "accuracy" in report["metrics"]
    assert out.with_suffix(".md").exists()
    assert "accuracy" in capsys.readouterr().out


def test_csv_dataset_from_cli(tmp_path):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(80, 6)), columns=[f"x{i}" for i in range(6)])
    frame.insert(0, "customer", [f"c{i:03d}" for i in range(80)])
    frame["target"] = (frame.x0 + frame.x3 > 0).astype(int)
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    rc = main(["train", "--dataset", f"csv:{path}", "--id-column", "customer", "--label-column", "target",
               "--epochs", "2", "--quiet", "--report", str(tmp_path / "r.json")])
    assert rc == 0


@pytest.mark.parametrize("args, message", [
    (["train", "--method", "nope"], "unknown method"),
    (["train", "--dataset", "csv:/no/such.csv", "--id-column", "a", "--label-column", "b"], "not found"),
    (["train", "--method", "splitnn", "--option", "bogus=1"], "unknown option"),
    (["train", "--parties", "0"], "parties must be"),
])
def test_errors_are_one_line_without_traceback(args, message, capsys):
    rc = main(args + ["--quiet"])
    err = capsys.readouterr().err
    assert rc != 0
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_duplicate_ids_and_passive_label(tmp_path, capsys):
    frame = pd.DataFrame({"id": [1, 1, 2, 3], "a": [1.0, 2, 3, 4], "y": [0, 1, 0, 1]})
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    assert main(["train", "--dataset", f"csv:{path}", "--id-column", "id", "--label-column", "y", "--quiet"]) == 2
    assert "duplicate" in capsys.readouterr().err


def test_debug_shows_traceback(capsys):
    main(["train", "--method", "nope", "--debug", "--quiet"])
    assert "Traceback" in capsys.readouterr().err


def test_datasets_and_methods_listing(capsys):
    assert main(["datasets"]) == 0
    assert "breast-cancer" in capsys.readouterr().out
    assert main(["methods"]) == 0
    assert "splitnn" in capsys.readouterr().out
