"""The coverage section of ``securevfl bench`` (securevfl.bench.coverage) on made-up per-seed values: no training.

The measurement itself runs in tests/test_coverage.py (benchmarks/coverage.py --quick at one coverage) and in
tests/test_bench.py's tiny run of every section.
"""

from __future__ import annotations

import pytest

from securevfl.bench import coverage
from securevfl.bench.config import SECTIONS, SIZES, BenchConfig
from securevfl.bench.timing import HIGHER, LOWER
from securevfl.errors import ConfigError

P = "coverage.bank.p50"
VALUES = {
    **{f"{P}.{way}.train_s": [s, s * 1.1] for way, s in
       (("every_row", 4.0), ("all_parties", 2.0), ("local", 1.0), ("laser_vfl", 5.0))},
    f"{P}.every_row.all.auc": [0.90, 0.92], f"{P}.stitched.all.auc": [0.88, 0.88], f"{P}.local.all.auc": [0.85, 0.87],
    f"{P}.laser_vfl.all.auc": [0.89, 0.91], f"{P}.rows.all": [100.0, 100.0],
    f"{P}.every_row.active.auc": [0.80, 0.82], f"{P}.stitched.active.auc": [0.83, 0.83],
    f"{P}.local.active.auc": [0.83, 0.83], f"{P}.laser_vfl.active.auc": [0.81, 0.81], f"{P}.rows.active": [40.0, 40.0],
    "coverage.houses.p100.every_row.all.rmse": [0.5], "coverage.houses.p100.stitched.all.rmse": [0.6],
    "coverage.houses.p100.local.all.rmse": [0.8], "coverage.houses.p100.laser_vfl.all.rmse": [0.55],
}


def test_the_figures_are_the_means_with_the_spreads_and_the_ratios():
    figures = coverage.summarise(VALUES)
    assert figures[f"{P}.every_row.all.auc"] == pytest.approx(0.91)
    assert figures[f"{P}.every_row.all.auc.seed_spread"] == pytest.approx(0.02)
    assert figures[f"{P}.all.ratio_vs_best_baseline"] == pytest.approx(0.91 / 0.88)
    assert figures[f"{P}.all.ratio_vs_laser_vfl"] == pytest.approx(0.91 / 0.90)
    assert figures[f"{P}.train_time_ratio_vs_splitnn"] == pytest.approx(2.0)
    assert figures["coverage.houses.p100.all.ratio_vs_best_baseline"] == pytest.approx(0.6 / 0.5)  # RMSE: inverted


def test_the_section_puts_the_four_ways_side_by_side_and_records_every_key(tmp_path):
    from securevfl.bench import plots
    from securevfl.bench.results import Results

    data = {"figures": coverage.summarise(VALUES), "samples": VALUES, "wall_s": 1.0,
            "config": {"cases": [("bank", 3, "random", None, 2)], "coverages": [0.5], "seeds": [0, 1]}}
    figs = {f.name: f for f in coverage.figures(data)}
    results = Results(config={})
    for f in figs.values():
        results.add(f)  # each key once
    assert not any(name.endswith("seed_spread") for name in figs)
    assert figs[f"{P}.every_row.all.auc"].samples == (0.90, 0.92)  # the seeds are the repetitions
    assert figs[f"{P}.every_row.all.auc"].better == HIGHER
    assert figs["coverage.houses.p100.every_row.all.rmse"].better == LOWER
    assert figs[f"{P}.all.ratio_vs_laser_vfl"].better == HIGHER and figs[f"{P}.every_row.train_s"].unit == "s"
    section = coverage.section(data)
    table = section.tables[0]
    assert table.columns[5:9] == list(coverage.WAYS)
    bank_all = next(r for r in table.rows if r[:3] == ["bank", "0.5", "all"])
    assert bank_all[3:9] == ["auc", "100", "0.9100", "0.8800", "0.8600", "0.9000"]
    assert bank_all[9:] == [f"{0.91 / 0.88:.3f}", f"{0.91 / 0.90:.3f}", "2.00"]
    active = next(r for r in table.rows if r[:3] == ["bank", "0.5", "active"])
    assert active[4] == "40" and active[9:] == ["-", "-", "-"]
    assert any("ratio_vs_best_baseline" in n for n in section.notes)
    png = tmp_path / "coverage.png"
    assert plots.coverage(data, png) == "coverage.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_section_is_in_the_default_run_with_its_sizes():
    assert SECTIONS.index("coverage") == SECTIONS.index("secureboost") + 1 and SECTIONS[-1] == "environment"
    assert "coverage" in BenchConfig().sections
    quick = coverage.from_sizes(SIZES["quick"])
    assert [c[0] for c in quick.cases] == ["breast-cancer"] and quick.coverages == (1.0, 0.5) and quick.seeds == (0,)
    assert coverage.from_sizes(SIZES["full"]).cases == coverage.QUICK  # benchmarks/coverage.py --quick
    with pytest.raises(ConfigError):
        coverage.CoverageBench(coverages=(0.0,))


def test_another_method_has_its_own_keys_and_no_laser_vfl_way():
    h = "coverage.hetero-lr.adult.p80"
    values = {f"{h}.every_row.train_s": [6.0], f"{h}.all_parties.train_s": [3.0], f"{h}.local.train_s": [1.0],
              f"{h}.every_row.all.auc": [0.88], f"{h}.stitched.all.auc": [0.87], f"{h}.local.all.auc": [0.85],
              f"{h}.rows.all": [985.0]}
    figures = coverage.summarise(values)
    assert figures[f"{h}.all.ratio_vs_best_baseline"] == pytest.approx(0.88 / 0.87)
    assert figures[f"{h}.train_time_ratio_vs_splitnn"] == pytest.approx(2.0)
    assert f"{h}.all.ratio_vs_laser_vfl" not in figures  # no laser_vfl way: no ratio
    assert coverage.way_rows(figures) == {("hetero-lr.adult", "p80", "all", "auc"):
                                          {"every_row": 0.88, "stitched": 0.87, "local": 0.85}}
    row = coverage.table_rows(figures)[0]
    assert row[:5] == ["hetero-lr.adult", "0.8", "all", "auc", "985"] and row[8] == "-" and row[10] == "-"
    coverage.print_table(figures)  # the ways measured only


def test_the_method_choice_its_options_and_the_cases():
    assert coverage.label("splitnn", "adult") == "adult" and coverage.label("easter", "digits") == "easter.digits"
    assert coverage.ways_of("splitnn") == coverage.WAYS and "laser_vfl" not in coverage.ways_of("secureboost")
    assert {"splitnn", "easter", "hetero-lr", "secureboost"} <= set(coverage.capable_methods())
    assert "local" not in coverage.capable_methods()
    assert coverage.method_options("hetero-lr") == {"key_bits": "1024", "insecure_allow_small_key": "true"}
    assert coverage.method_options("hetero-lr", {"key_bits": "2048"}) == {"key_bits": "2048"}
    assert coverage.method_options("secureboost", {"trees": "5"})["trees"] == "5"
    assert coverage.select_cases(quick=True) == coverage.QUICK
    assert coverage.select_cases(["adult"], rows=4000) == (("adult", 3, "random", 4000, 10),)
    assert coverage.select_cases(["california-housing"], quick=True)[0][3] == 4000  # the run's size first
    assert coverage.select_cases(["digits", "breast-cancer"], rows=0, epochs=3) == (
        ("digits", 4, "strips", None, 3), ("breast-cancer", 3, "random", None, 3))
    with pytest.raises(ConfigError):
        coverage.select_cases(["nope"])
    with pytest.raises(ConfigError):
        coverage.CoverageBench(method="local")
