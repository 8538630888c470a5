"""tools/golden.py's comparison: every difference between two golden records is found, and none is invented."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from script_module import script_module

TOOL = Path(__file__).resolve().parents[1] / "tools" / "golden.py"


@pytest.fixture(scope="module")
def golden():
    with script_module(TOOL, "golden_tool") as module:
        yield module


def _record():
    runs = {"inprocess/splitnn": {"metrics": {"auc": 0.98, "accuracy": 0.9},
                                  "cost": {"comm": {"bytes": {"bank->shop": 100}, "messages": {"bank->shop": 3}}},
                                  "scoring": {"predictions": {"proba": {"sha256": "ab", "first": [[0.1, 0.9]]}}}},
            "deployed/easter[secagg=dh]": {"metrics": {"auc": 0.97}}}
    return {"meta": {"commit": "abc"}, "runs": runs}


def test_identical_records_have_no_difference_whatever_their_meta(golden, tmp_path, capsys):
    old, new = _record(), _record()
    new["meta"] = {"commit": "def", "wall_s": {"inprocess/splitnn": 3.0}}
    assert golden.compare(old, new) == []
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    assert golden.main(["compare", str(a), str(b)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "0 differences"


def test_every_changed_added_or_removed_figure_is_a_difference(golden, tmp_path, capsys):
    old, new = _record(), _record()
    new["runs"]["inprocess/splitnn"]["cost"]["comm"]["bytes"]["bank->shop"] = 101
    new["runs"]["inprocess/splitnn"]["scoring"]["predictions"]["proba"]["first"] = [[0.2, 0.8]]
    del new["runs"]["inprocess/splitnn"]["metrics"]["accuracy"]
    new["runs"]["inprocess/splitnn"]["metrics"]["f1"] = 0.5
    del new["runs"]["deployed/easter[secagg=dh]"]
    new["runs"]["inprocess/local"] = {"metrics": {}}
    found = golden.compare(old, new)
    assert found == [
        ("deployed/easter[secagg=dh]", "(run)", "present", golden.MISSING),
        ("inprocess/local", "(run)", golden.MISSING, "present"),
        ("inprocess/splitnn", "cost.comm.bytes.bank->shop", 100, 101),
        ("inprocess/splitnn", "metrics.accuracy", 0.9, golden.MISSING),
        ("inprocess/splitnn", "metrics.f1", golden.MISSING, 0.5),
        ("inprocess/splitnn", "scoring.predictions.proba.first", [[0.1, 0.9]], [[0.2, 0.8]]),
    ]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    assert golden.main(["compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "6 differences" and len(out) == 7


def test_digests_ignore_the_sign_of_zero_and_see_a_change_at_1e_6(golden):
    a = np.array([[0.25, 0.75], [1.0, 0.0]])
    assert golden.array_digest(a) == golden.array_digest(np.array([[0.25, 0.75], [1.0, -0.0]]))
    assert golden.array_digest(a)["sha256"] != golden.array_digest(a + [[0, 2e-6], [0, 0]])["sha256"]


def test_timings_are_never_recorded(golden):
    cost = {"comm": {"bytes": {"a->b": 1}}, "compute_s": 0.3, "crypto_s": {"psi.hash": 0.1},
            "alignment": {"timings": {"a": {"hash": 0.1}}, "wall_seconds": 0.2, "rounds": 4}}
    assert golden.without_times(cost) == {"comm": {"bytes": {"a->b": 1}}, "alignment": {"rounds": 4}}
