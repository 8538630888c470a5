"""benchmarks/apcvfl_tables.py (issue 31): its pure helpers — the row subsample, the transfer rule, the verdict."""

from __future__ import annotations

import numpy as np
import pytest
from script_module import ROOT, script_module

from securevfl.data import load_dataset


@pytest.fixture(scope="module")
def bench():
    with script_module(ROOT / "benchmarks" / "apcvfl_tables.py", "apcvfl_tables_bench") as module:
        yield module


def test_subsample_is_stratified_or_takes_the_asked_positive_share(bench):
    ds = load_dataset("breast-cancer")  # 212 malignant (class 0), 357 benign (class 1)
    setup = bench.TableSetup("bc", active=("a", "b", "c", "d", "e"), rows=200, active_rows=120, test_rows=10)
    sample = bench.subsample(ds, setup, seed=0)
    counts = np.bincount(sample.labels()).tolist()
    assert sum(counts) == 200 and abs(counts[1] / 200 - 357 / 569) < 0.01
    assert sample.frame[sample.id_column].is_unique
    assert bench.subsample(ds, setup, seed=0).frame.equals(sample.frame)  # seeded
    enriched = bench.subsample(ds, bench.replace(setup, positive_share=0.25), seed=0)
    assert np.bincount(enriched.labels()).tolist() == [150, 50]


def test_active_features_follow_the_papers_transfer_rule(bench):
    setup = bench.SETUPS["adult"]
    assert setup.features(2) == list(setup.active[3:])
    assert setup.features(3) == [setup.active[0], *setup.active[3:]] and setup.features(5) == list(setup.active)
    with pytest.raises(SystemExit):
        setup.features(6)


def _row(method, acc, minus_local=None, minus_vfedtrans=None):
    row = {"method": method, "accuracy_mean": acc}
    if minus_local is not None:
        row["minus_local"] = (minus_local, 0.0)
    if minus_vfedtrans is not None:
        row["minus_vfedtrans"] = (minus_vfedtrans, 0.0)
    return row


@pytest.mark.parametrize("apc_gap,vft_gap,holds", [(0.03, 0.025, True), (0.03, 0.01, False), (0.01, 0.03, False)])
def test_the_verdict_needs_both_gaps_above_the_margin(bench, apc_gap, vft_gap, holds):
    local, vft = 0.80, 0.80 + vft_gap
    rows = [_row("local-logreg", local, minus_vfedtrans=-vft_gap), _row("apcvfl-ablation", local, 0.0, -vft_gap),
            _row("apcvfl-mse", vft + apc_gap, vft_gap + apc_gap, apc_gap),
            _row("apcvfl-mae", vft, vft_gap, 0.0), _row("vfedtrans", vft, vft_gap)]
    refs = {"lr_active": (0.79, 0.0), "trees_active": (0.80, 0.0), "lr_all_features": (0.85, 0.0)}
    verdict = bench.claim(rows, refs, 0.02)
    assert verdict["claim_holds"] is holds
    assert verdict["apcvfl_minus_vfedtrans"] == apc_gap and verdict["vfedtrans_minus_local"] == vft_gap
    assert verdict["all_features_minus_local"] == pytest.approx(0.06)
