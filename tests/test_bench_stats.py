"""The bench never prints an impossible figure: overheads and transport costs carry intervals (synthetic timings)."""

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure as MplFigure

from securevfl.bench import methods, network, plots, report, stats, wire
from securevfl.bench.compare import compare_files
from securevfl.bench.results import SCHEMA, Results, Section, Table

BASE = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02]


def _row(privacy, epoch_runs, cpu_runs=None, method="aggvfl"):
    row = {"method": method, "privacy": privacy, "status": "ok", "epoch_s": [x for r in epoch_runs for x in r],
           "epoch_s_runs": [list(r) for r in epoch_runs]}
    if cpu_runs is not None:
        row["epoch_cpu_s"] = [x for r in cpu_runs for x in r]
        row["epoch_cpu_s_runs"] = [list(r) for r in cpu_runs]
    return row


def _headline_for(rows):
    methods.add_overheads(rows)
    results = Results(config={})
    results.sections.append(Section("methods", "2. Methods", data={"runs": rows}))
    values = report.headline(results)
    return values, report.headline_lines(values)


def _numbers(line):
    return [float(x) for x in re.findall(r"[-+−]?\d+(?:\.\d+)?", line.replace("−", "-"))]


def test_difference_verdicts_are_deterministic():
    above = stats.difference([1.3, 1.4, 1.35, 1.32], BASE, relative=True)
    assert above.verdict == stats.ABOVE and 0 < above.low <= above.estimate <= above.high
    assert above == stats.difference([1.3, 1.4, 1.35, 1.32], BASE, relative=True)  # fixed seed: same interval
    noise = stats.difference([0.98, 1.08, 1.0, 0.93], BASE, relative=True)
    assert noise.verdict == stats.NOISE and noise.low < 0 < noise.high
    below = stats.difference([0.5, 0.55, 0.52], BASE, relative=True)
    assert below.verdict == stats.BELOW and below.high < 0
    assert stats.difference([1.5], BASE).verdict == stats.TOO_FEW
    # two or three samples a side: the interval is the conservative range bound
    tiny = stats.difference([1.2, 1.3], [1.0, 1.1], relative=True)
    assert (tiny.low, tiny.high) == pytest.approx((1.2 / 1.1 - 1, 1.3 / 1.0 - 1))
    paired = stats.difference([1.1, 2.2, 3.3, 4.4], [1.0, 2.0, 3.0, 4.0], relative=True, paired=True)
    assert paired.verdict == stats.ABOVE and paired.estimate == pytest.approx(0.1)
    assert stats.Difference.from_dict(paired.to_dict()) == paired
    with pytest.raises(ValueError):
        stats.difference([1.0, float("nan")], BASE)


def test_runs_are_the_repetitions_when_load_hits_a_whole_run():
    # one run of the option hit by load: every epoch of it slow; its epochs alone would look "above"
    flat = stats.difference([1.5, 1.52, 1.51, 1.0, 1.02, 0.99], BASE, relative=True)
    runs = stats.difference_of_runs([[1.5, 1.52, 1.51], [1.0, 1.02, 0.99]], [BASE[:3], BASE[3:]], relative=True)
    assert runs.high - runs.low > flat.high - flat.low
    assert runs.verdict == stats.NOISE


def test_headline_states_a_clear_overhead_and_nothing_noisy_or_negative():
    rows = [_row("none", [BASE], [[0.5, 0.52, 0.49, 0.5]]),
            _row("paillier", [[2.0, 2.1, 1.9, 2.05]], [[1.4, 1.5, 1.45, 1.42]]),  # clearly above
            _row("dh", [[1.0, 1.12, 0.92, 1.01]], [[0.5, 0.53, 0.48, 0.51]]),  # overlapping: within noise
            _row("pairwise", [[0.42, 0.45, 0.41]], [[0.5, 0.51, 0.5]])]  # faster than none: an artefact
    values, lines = _headline_for(rows)
    assert set(values) == {"overhead_pct_aggvfl_paillier"}
    assert len(lines) == 1 and lines[0].startswith("aggvfl with secagg=paillier: epoch time over none: wall +")
    assert "CPU +" in lines[0]
    assert all(n >= 0 for n in _numbers(lines[0]))
    by = {r["privacy"]: r for r in rows}
    assert by["dh"]["overhead_verdict"] == stats.NOISE
    assert methods.overhead_cell(by["dh"]).startswith("within noise (")
    assert by["pairwise"]["overhead_verdict"] == stats.BELOW
    assert "measurement artefact" in methods.overhead_cell(by["pairwise"])
    # the section table flags the artefact in a note, not the headline
    section = methods.section([{**r, "metric": "accuracy", "metric_value": 0.9, "wall_s": 5.0, "compute_s": 1.0,
                                "crypto_s": {"x25519": 0.1}, "serialize_s": 0.0, "simulated_network_s": 0.1,
                                "bytes": {"a->b": 10}, "messages": {"a->b": 1}, "total_bytes": 10, "rounds": 2}
                               for r in rows], "breast-cancer", 4, 5)
    assert any("aggvfl/pairwise" in n and "not a saving" in n for n in section.notes)


def test_cpu_above_with_wall_in_noise_says_so():
    rows = [_row("none", [BASE], [[0.50, 0.51, 0.49, 0.50]]), _row("dh", [[1.0, 1.2, 0.9]], [[0.6, 0.61, 0.62]])]
    _, lines = _headline_for(rows)
    assert len(lines) == 1 and "wall within noise" in lines[0] and "CPU +" in lines[0]


def test_an_older_results_headline_without_intervals_is_not_stated():
    # results.json written before intervals: a bare (here negative, from one loaded run each) number
    old = {"overhead_pct_aggvfl_dh": -58.3, "overhead_pct_aggvfl_paillier": 310.0, "psi_exponent": 1.02}
    assert report.headline_lines(old) == ["PSI time vs set size, fitted exponent (ours): 1.02"]


samples = st.lists(st.floats(0.05, 5.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=8)


@settings(max_examples=40, deadline=None)
@given(base=samples, option=samples, base_cpu=samples, option_cpu=samples)
def test_no_headline_line_holds_a_negative_or_noisy_overhead(base, option, base_cpu, option_cpu):
    rows = [_row("none", [base], [base_cpu]), _row("dh", [option], [option_cpu])]
    values, lines = _headline_for(rows)
    wall = methods.overhead_of(rows[1])
    cpu = methods.overhead_of(rows[1], cpu=True)
    assert wall is not None and cpu is not None
    stated = (stats.ABOVE in (wall.verdict, cpu.verdict)) and stats.BELOW not in (wall.verdict, cpu.verdict)
    assert bool(lines) == stated == ("overhead_pct_aggvfl_dh" in values)
    for line in lines:
        assert all(n >= 0 for n in _numbers(line)), line
        assert "-" not in line.replace("secagg=", "")
    for d in (wall, cpu):  # the verdict agrees with the interval
        assert d.low <= d.estimate <= d.high
        assert (d.verdict == stats.ABOVE) == (d.low > 0 and d.verdict != stats.TOO_FEW)


def _measured(grpc, inprocess, grpc_cpu=None, inprocess_cpu=None):
    return {"dataset": "breast-cancer", "parties": 2, "epochs": len(grpc) + 1, "batch_size": 32,
            **wire.transport(grpc, inprocess, grpc_cpu, inprocess_cpu), "model_lan_s_per_epoch": 0.01,
            "frame_bytes": 100, "codec_bytes_training": 50}


def _transport_row(measured):
    section = Section("network", "4. Network")
    network.add_measured(section, measured)
    row = next(r for r in section.tables[-1].rows if r[0].startswith("measured transport cost"))
    return row, {f.name: f for f in network.measured_figures(measured)}


@settings(max_examples=40, deadline=None)
@given(grpc=samples, inprocess=samples)
def test_the_transport_cost_is_never_printed_negative(grpc, inprocess):
    row, figs = _transport_row(_measured(grpc, inprocess, grpc, inprocess))
    d = network.transport_cost(_measured(grpc, inprocess))
    assert d is not None
    for cell in row[1:]:
        if d.verdict == stats.ABOVE:
            assert not cell.startswith(("-", "−", "none"))
        else:
            assert cell.startswith("none measurable"), cell
    assert ("network.measured.transport_s_per_epoch" in figs) == (d.verdict == stats.ABOVE)


def test_transport_cost_cases():
    slower = _measured([0.30, 0.31, 0.29, 0.30], [0.20, 0.21, 0.19, 0.20])
    row, figs = _transport_row(slower)
    assert row[1].startswith("+0.100 [") and figs["network.measured.transport_s_per_epoch"].samples[0] > 0
    loaded = _measured([0.30, 0.31, 0.29], [1.6, 1.7, 1.62])  # the in-process run hit by load: -1.322 s
    row, figs = _transport_row(loaded)
    assert row[1].startswith("none measurable: the deployed epochs ran faster by 1.3")
    assert "network.measured.transport_s_per_epoch" not in figs
    row, _ = _transport_row(_measured([0.30, 0.25, 0.35], [0.28, 0.33, 0.26]))
    assert row[1].startswith("none measurable: within noise (")
    old = {k: v for k, v in slower.items() if "_verdict" not in k and not k.endswith(("_low", "_high", "_samples"))}
    old["measured_transport_s_per_epoch"] = -1.322
    row, figs = _transport_row(old)
    assert row[1].startswith("not measurable") and "network.measured.transport_s_per_epoch" not in figs


def test_long_tables_fold_behind_the_charts_in_html(tmp_path):
    results = Results(config={"size": "quick"}, environment={"cores_logical": 2})
    sec = Section("methods", "2. Methods")
    short = Table("Runs", ["a", "b"], [["x", "1"]])
    flagged = Table("Crypto seconds by primitive", ["a", "b"], [[f"p{i}", str(i)] for i in range(5)], fold=True,
                    summary="5 rows; the most crypto: p4")
    long = Table("Bytes per link", ["a", "b"], [[f"l{i}", str(i)] for i in range(report.FOLD_ROWS + 45)])
    sec.tables += [short, flagged, long]
    fig = MplFigure(figsize=(2, 2))
    fig.subplots().bar([0], [1.0])
    sec.images.append({"file": plots._save(fig, tmp_path / "chart.png"), "caption": "the chart"})
    results.sections.append(sec)
    data = json.loads(results.to_json())
    page = report.to_html(data, tmp_path)
    assert page.count("<details>") == 2 and "<script" not in page
    assert page.index("the chart") < page.index("<details>")  # the folded tables come after the chart
    assert "<summary><b>Crypto seconds by primitive</b>5 rows; the most crypto: p4</summary>" in page
    assert f"{report.FOLD_ROWS + 45} rows" in page
    assert page.index("<caption>Runs</caption>") < page.index("the chart")  # a short table is not folded
    md = report.to_markdown({**data, "wall_s": 1.0})
    assert "| l69 | 69 |" in md and "_5 rows; the most crypto: p4_" in md  # Markdown keeps every row


@pytest.mark.parametrize("scale", ["linear", "log", "symlog"])
def test_error_bars_end_inside_their_axes(scale):
    fig = MplFigure()
    ax = fig.subplots()
    ax.bar([0, 1], [5.0, 50.0], yerr=[[1.0, 2.0], [3.0, 4000.0]])
    ax.set_yscale(scale)
    ax.set_ylim(1.0, 60.0)  # too small on purpose
    plots.fit_error_bars(ax)
    low, high = ax.get_ylim()
    assert low <= 3.0 and high > 4050.0
    ax2 = fig.add_subplot(2, 1, 2)
    ax2.barh([0], [np.float64(2.0)], xerr=[[1.0], [8.0]])
    ax2.set_xlim(0, 3)
    plots.fit_error_bars(ax2)
    assert ax2.get_xlim()[1] > 10.0


def test_compare_reads_an_older_results_file(tmp_path):
    old = {"schema": SCHEMA, "headline": {"overhead_pct_aggvfl_dh": -58.3}, "config": {"size": "quick"},
           "figures": {"methods.aggvfl.dh.epoch_s": {"unit": "s", "better": "lower", "samples": [1.0],
                                                     "min": 1.0, "median": 1.0, "max": 1.0},
                       "network.measured.transport_s_per_epoch": {"unit": "s", "better": "lower", "samples": [1e-9],
                                                                  "min": 1e-9, "median": 1e-9, "max": 1e-9}}}
    results = Results(config={"size": "quick"})
    for f in methods.figures([{**_row("dh", [[1.0, 1.1]], [[0.5, 0.6]]), "wall_s": 3.0, "wall_s_runs": [3.0],
                               "crypto_s": {}, "metric": "accuracy", "metric_value": 0.9}]):
        results.add(f)
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(results.to_json())
    out = compare_files(tmp_path / "old.json", tmp_path / "new.json")
    assert [c.name for c in out["changes"]] == ["methods.aggvfl.dh.epoch_s"]
    assert "methods.aggvfl.dh.epoch_cpu_s" in out["only_new"]
