"""The SecureBoost benchmark (securevfl.bench.secureboost and the bench section) at a tiny size."""

from __future__ import annotations

import json
import math

import pytest

from securevfl.bench.secureboost import SecureBoostBench, crypto_floor, measure
from securevfl.errors import ConfigError

HEADLINE = ("speedup_vs_plain_secureboost", "fraction_of_crypto_floor", "ratio_to_xgboost", "auc_gap_vs_xgboost")
# a 1024-bit key (insecure, tests only), in-process workers, a few hundred rows and 8 bins: seconds
TINY = SecureBoostBench(rows=300, trees=2, depth=2, workers=1, key_bits=1024, insecure_allow_small_key=True,
                        plain_rows=100, features=4, max_bins=8, rate_scale=0.05, small_rows=150, small_trees=2,
                        small_depth=3)


@pytest.fixture(scope="module")
def tiny():
    return measure(TINY)


def test_the_measurement_gives_the_four_headline_figures_finite(tiny):
    for key in HEADLINE:
        assert isinstance(tiny[key], float) and math.isfinite(tiny[key]), key
    assert tiny["speedup_vs_plain_secureboost"] > 0 and tiny["fraction_of_crypto_floor"] > 0
    assert tiny["ratio_to_xgboost"] > 0
    assert {"runs", "rates", "machine"} <= set(tiny)
    assert tiny["machine"]["key_bits"] == 1024 and tiny["machine"]["cores_used"] == 1
    json.dumps(tiny)  # the JSON the script writes


def test_each_run_is_split_and_the_floor_counts_its_operations(tiny):
    runs = tiny["runs"]
    assert set(runs) == {"fast", "plaintext", "fast_at_plain_rows", "plain_secureboost", "fast_small_table"}
    table = runs["fast_small_table"]
    assert table["rows"] == 150 and table["trees"] == 2 and table["options"]["max_depth"] == 3
    assert tiny["small_table_seconds_per_tree"] == table["seconds_per_tree"] > 0
    fast, plain, small = runs["fast"], runs["plain_secureboost"], runs["fast_at_plain_rows"]
    assert plain["rows"] == small["rows"] == 100 and fast["rows"] == 300
    assert plain["options"]["backend"] == "phe" and not plain["options"]["packing"]
    assert not plain["options"]["subtraction"] and small["options"]["packing"] and small["options"]["subtraction"]
    assert fast["trees"] == 2 and len(fast["tree_s"]) == 2 and not fast["includes_startup"]
    assert plain["trees"] == 1 and plain["includes_startup"]
    assert sum(fast["split_s"].values()) == pytest.approx(fast["training_s"])
    ops = fast["operations"]
    assert ops["encryptions"] == fast["train_rows"] * 2  # one packed (g, h) ciphertext per row per tree
    assert ops["compress_squarings"] > 0 and ops["homomorphic_additions"] > 0 and ops["decryptions"] > 0
    assert plain["operations"]["compress_squarings"] == 0  # no packing, no compression
    assert plain["operations"]["encryptions"] == plain["train_rows"] * 2  # g and h apart, one tree
    assert fast["floor"]["floor_s"] == pytest.approx(crypto_floor(ops, tiny["rates"], 1)["floor_s"])
    assert fast["fraction_of_crypto_floor"] == tiny["fraction_of_crypto_floor"]
    assert "floor" not in runs["plaintext"] and runs["plaintext"]["operations"]["encryptions"] == 0
    assert runs["plaintext"]["auc"] == pytest.approx(fast["auc"])  # identical trees with and without encryption
    assert fast["bytes"] and all(v > 0 for v in fast["bytes"].values())


def test_the_floor_formula():
    rates = {"encrypt_per_s": 100.0, "multiply_per_s": 1000.0, "decrypt_per_s": 10.0}
    ops = {"encryptions": 200, "homomorphic_additions": 1500, "compress_squarings": 500, "decryptions": 30}
    floor = crypto_floor(ops, rates, 2)
    assert floor["terms_one_core_s"] == {"encrypt": 2.0, "multiply": 2.0, "decrypt": 3.0}
    assert floor["floor_s"] == 3.5 and floor["cores"] == 2


def test_sizes_are_validated():
    with pytest.raises(ConfigError):
        SecureBoostBench(rows=10)
    with pytest.raises(ConfigError):
        SecureBoostBench(trees=0)
    with pytest.raises(ConfigError):
        SecureBoostBench(small_rows=10)


def test_the_bench_command_has_a_secureboost_section(tmp_path):
    from securevfl.cli import main

    out = tmp_path / "bench"
    assert main(["bench", "--tiny", "--sections", "secureboost", "--quiet", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert list(data["sections"]) == ["secureboost", "environment"]
    section = data["sections"]["secureboost"]
    assert section["data"]["machine"]["key_bits"] == 2048  # reported figures: 2048-bit keys at every size
    assert section["tables"][0]["rows"] and section["images"]
    for key in ("secureboost.speedup_vs_plain_secureboost", "secureboost.fraction_of_crypto_floor",
                "secureboost.ratio_to_xgboost", "secureboost.fast.tree_s"):
        assert key in data["figures"], key
    assert "secureboost_fraction_of_crypto_floor" in data["headline"]
    assert "SecureBoost" in (out / "report.md").read_text()
