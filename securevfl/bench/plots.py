"""The report's figures (PNG): one per section, each with a title, axis labels with units and a legend.

Built on ``matplotlib.figure.Figure`` directly (no pyplot, no global backend state), so importing or
calling this module never opens a window or changes another caller's matplotlib settings. Bars show
the median; error bars reach from the minimum to the maximum repetition (an overhead's: its 95 %
interval). Every axis is widened, never narrowed, to hold its error bars with a margin
(:func:`fit_error_bars`), and legends with more than a few entries sit outside the axes.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Patch

from psi import atomic
from securevfl.bench.timing import Figure

DPI = 110
COLORS = {"ours": "#1f77b4", "peer": "#ff7f0e", "floor": "#7f7f7f", "packed": "#2ca02c"}


def _save(fig: MplFigure, path: Path) -> str:
    for ax in fig.axes:
        fit_error_bars(ax)
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight")  # legends placed outside the axes stay in the picture
    return path.name


def _error_bar_ends(ax: Any, axis: str) -> list[float]:
    """Where the error bars of ``ax`` end along ``axis`` ("x" or "y")."""
    ends: list[float] = []
    for c in ax.containers:
        eb = c if isinstance(c, ErrorbarContainer) else getattr(c, "errorbar", None)
        if eb is None or not (eb.has_yerr if axis == "y" else eb.has_xerr):
            continue
        for col in eb.lines[2]:
            for seg in col.get_segments():
                ends += [float(v) for v in np.asarray(seg)[:, 1 if axis == "y" else 0]]
    return ends


def fit_error_bars(ax: Any, margin: float = 0.06) -> None:
    """Widen ``ax``'s limits (linear, log, symlog) so every error bar ends inside, ``margin`` of the span clear."""
    for axis in ("y", "x"):
        ends = _error_bar_ends(ax, axis)
        scale = ax.get_yscale() if axis == "y" else ax.get_xscale()
        ends = [v for v in ends if np.isfinite(v) and (scale != "log" or v > 0)]
        if not ends:
            continue
        get, put = (ax.get_ylim, ax.set_ylim) if axis == "y" else (ax.get_xlim, ax.set_xlim)
        t = (ax.yaxis if axis == "y" else ax.xaxis).get_transform()
        lo, hi = get()
        inverted = lo > hi
        lo, hi = min(lo, hi), max(lo, hi)
        scaled = t.transform(np.array([lo, hi, min(ends), max(ends)], float))
        span = max(scaled[1], scaled[3]) - min(scaled[0], scaled[2]) or 1.0
        new_lo = scaled[0] if scaled[2] - margin * span >= scaled[0] else scaled[2] - margin * span
        new_hi = scaled[1] if scaled[3] + margin * span <= scaled[1] else scaled[3] + margin * span
        lo2, hi2 = (float(v) for v in t.inverted().transform(np.array([new_lo, new_hi])))
        put((hi2, lo2) if inverted else (lo2, hi2))


def _legend_outside(ax: Any, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None) -> None:
    """A legend to the right of ``ax``, where it covers nothing."""
    if handles is None:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _bars(ax: Any, x: np.ndarray, figs: Sequence[Figure | None], width: float, label: str, color: str) -> None:
    present = [(xi, f) for xi, f in zip(x, figs) if f is not None]
    if not present:
        return
    xs = np.array([xi for xi, _ in present])
    med = np.array([f.median for _, f in present])
    err = np.array([[f.median - f.min for _, f in present], [f.max - f.median for _, f in present]])
    ax.bar(xs, med, width, yerr=err, capsize=3, label=label, color=color)


def primitives(figs: Mapping[str, Figure], data: Mapping[str, Any], path: Path) -> str:
    """Section 1: PSI with its floor, Paillier throughput, mask expansion, key agreement (2 x 2 panels)."""
    fig = MplFigure(figsize=(12, 8.5))
    axes = fig.subplots(2, 2)
    fig.suptitle("Primitives against their peers (median; bars: min-max of the repetitions)")
    sizes = list(data["psi"])
    x = np.arange(len(sizes))
    ax = axes[0][0]
    _bars(ax, x - 0.27, [figs[f"primitives.psi.{n}.ours_s"] for n in sizes], 0.27, "securevfl psi (X25519)",
          COLORS["ours"])
    _bars(ax, x, [figs.get(f"primitives.psi.{n}.openmined_s") for n in sizes], 0.27, "openmined-psi (P-256, C++)",
          COLORS["peer"])
    _bars(ax, x + 0.27, [figs[f"primitives.psi.{n}.floor_s"] for n in sizes], 0.27,
          "floor: X25519 mults / workers", COLORS["floor"])
    ax.set_xticks(x, [f"{n:,}" for n in sizes])
    ax.set(xlabel="IDs per party (50 % overlap)", ylabel="time (s)", yscale="log", title="ECDH PSI")
    ax.legend(fontsize=8, framealpha=0.9)

    ax = axes[0][1]
    ops = ["encrypt", "decrypt", "add", "scalar_multiply"]
    x = np.arange(len(ops))
    for off, (key, label, color) in zip((-0.27, 0.0, 0.27), (("phe_per_s", "phe", COLORS["peer"]),
                                                             ("fast_per_s", "fast, unpacked", COLORS["ours"]),
                                                             ("fast_packed_per_s", "fast, packed (per value)",
                                                              COLORS["packed"]))):
        _bars(ax, x + off, [figs[f"primitives.paillier.{op}.{key}"] for op in ops], 0.27, label, color)
    ax.set_xticks(x, ["encrypt", "decrypt", "add", "x int"])
    ax.set(xlabel="operation (2048-bit n)", ylabel="throughput (values/s)", yscale="log",
           title="Paillier: fast vs phe")
    ax.legend(fontsize=8, framealpha=0.9)

    ax = axes[1][0]
    _bars(ax, np.array([0.0]), [figs["primitives.mask.ours_aes_ctr_ms"]], 0.5, "ours: AES-256-CTR", COLORS["ours"])
    _bars(ax, np.array([1.0]), [figs["primitives.mask.flower_mt19937_ms"]], 0.5,
          "Flower SecAgg+ MT19937 (reimplemented)", COLORS["peer"])
    ax.set_xticks([0, 1], ["ours", "Flower"])
    ax.set(xlabel="PRG (one 128 x 128 mask)", ylabel="time per mask (ms)", yscale="log",
           title="Secure-aggregation mask expansion")
    ax.legend(fontsize=8, framealpha=0.9)

    ax = axes[1][1]
    schemes = list(data["key_agreement"])
    x = np.arange(len(schemes))
    _bars(ax, x - 0.2, [figs[f"primitives.key_agreement.{s}.keygen_ms"] for s in schemes], 0.4, "key generation",
          COLORS["floor"])
    _bars(ax, x + 0.2, [figs[f"primitives.key_agreement.{s}.exchange_ms"] for s in schemes], 0.4,
          "exchange (validated)", COLORS["ours"])
    ax.set_xticks(x, schemes)
    ax.set(xlabel="key agreement", ylabel="time (ms)", yscale="log", title="X25519 vs FFDH")
    ax.legend(fontsize=8, framealpha=0.9)
    return _save(fig, path)


def time_split(runs: Sequence[Mapping[str, Any]], path: Path, min_share: float = 0.03) -> str:
    """Stacked bar per run: compute, each crypto primitive (small ones lumped), serialisation, network."""
    runs = [r for r in runs if r.get("status") == "ok"]
    labels = [f"{r['method']}\n{r['privacy']}" for r in runs]
    big: list[str] = []
    for r in runs:
        total = r["compute_s"] + sum(r["crypto_s"].values()) + r["serialize_s"] + r["simulated_network_s"]
        for k, v in r["crypto_s"].items():
            if total > 0 and v / total >= min_share and k not in big:
                big.append(k)
    parts: dict[str, list[float]] = {"model compute": [r["compute_s"] for r in runs]}
    for k in sorted(big):
        parts[f"crypto: {k}"] = [r["crypto_s"].get(k, 0.0) for r in runs]
    parts["crypto: other"] = [sum(v for k, v in r["crypto_s"].items() if k not in big) for r in runs]
    parts["serialisation"] = [r["serialize_s"] for r in runs]
    parts["simulated network (100 Mbit/s, 10 ms)"] = [r["simulated_network_s"] for r in runs]
    fig = MplFigure(figsize=(max(10.0, 1.6 * len(runs) + 5), 5.5))
    axes = fig.subplots(1, 2)
    x = np.arange(len(runs))
    totals = np.sum([np.array(v) for v in parts.values()], axis=0)
    colors = colormaps["tab20"](np.linspace(0, 1, max(len(parts), 2)))
    for ax, scale in zip(axes, (np.ones(len(runs)), 100.0 / np.where(totals > 0, totals, 1.0))):
        bottom = np.zeros(len(runs))
        for (name, values), color in zip(parts.items(), colors):
            vals = np.array(values) * scale
            if not vals.any():
                continue
            ax.bar(x, vals, 0.6, bottom=bottom, label=name, color=color)
            bottom += vals
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_xlabel("method / privacy option")
    axes[0].plot(x, [r["wall_s"] for r in runs], "k_", markersize=20, mew=2, label="wall clock of the run")
    axes[0].set_ylabel("time (s, summed over parties)")
    axes[0].set_title("Where the time went, per run (report.cost)")
    axes[1].set_ylabel("share of the run's measured + simulated time (%)")
    axes[1].set_ylim(0, 100)
    axes[1].set_title("The same, as shares")
    h0, l0 = axes[0].get_legend_handles_labels()
    _legend_outside(axes[1], h0, l0)
    return _save(fig, path)


def overhead(runs: Sequence[Mapping[str, Any]], path: Path) -> str:
    """Per method, each privacy option's epoch-time overhead over ``none`` (per cent), wall and CPU, 95 % intervals.

    An overhead whose interval includes zero is drawn pale and labelled "noise"; one wholly below
    zero (a measurement artefact) is labelled "artefact".
    """
    from securevfl.bench.methods import overhead_of
    from securevfl.bench.stats import ABOVE, BELOW

    ok = [r for r in runs if r.get("status") == "ok" and "overhead_pct" in r and r["privacy"] != "none"]
    methods = list(dict.fromkeys(r["method"] for r in ok))
    options = list(dict.fromkeys(r["privacy"] for r in ok))
    fig = MplFigure(figsize=(9.5, 4.8))
    ax = fig.subplots()
    kinds = [k for k in (False, True) if any(overhead_of(dict(r), cpu=k) is not None for r in ok)] or [False]
    slots = max(1, len(options) * len(kinds))
    width = 0.8 / slots
    x = np.arange(len(methods))
    colors = colormaps["tab10"](np.arange(max(1, len(options))))
    handles: list[Any] = []
    for i, opt in enumerate(options):
        for j, cpu in enumerate(kinds):
            ds = [next((overhead_of(dict(r), cpu=cpu) for r in ok if r["method"] == m and r["privacy"] == opt), None)
                  for m in methods]
            vals = np.array([d.estimate if d is not None else np.nan for d in ds])
            err = np.array([[d.estimate - d.low if d is not None else 0.0 for d in ds],
                            [d.high - d.estimate if d is not None else 0.0 for d in ds]])
            pos = x + (i * len(kinds) + j - (slots - 1) / 2) * width
            alpha = [1.0 if d is not None and d.verdict == ABOVE else 0.35 for d in ds]
            bars = ax.bar(pos, vals, width, yerr=err, capsize=3, color=colors[i], hatch="//" if cpu else None,
                          edgecolor="k" if cpu else None, linewidth=0.5)
            for bar, a in zip(bars, alpha):
                bar.set_alpha(a)
            handles.append(Patch(facecolor=colors[i], hatch="//" if cpu else None, edgecolor="k" if cpu else "none",
                                 linewidth=0.5, label=f"secagg={opt}, {'CPU' if cpu else 'wall'} time"))
            for xi, d in zip(pos, ds):  # the label sits above the error bar, not on it
                if d is not None:
                    text = "artefact" if d.verdict == BELOW else f"{d.estimate:+.0f}%" if d.verdict == ABOVE \
                        else "noise"
                    ax.annotate(text, (xi, max(d.high, 0.0)), xytext=(0, 3), textcoords="offset points",
                                ha="center", va="bottom", fontsize=6.5)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x, methods)
    ax.set_xlabel("method")
    ax.set_ylabel("epoch-time overhead vs none (%, symlog)")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_title("Cost of each privacy option (median epochs; bars: 95 % interval)")
    if options:
        handles.append(Patch(facecolor="grey", alpha=0.35, label="pale: within noise (interval includes 0)"))
        _legend_outside(ax, handles, [str(h.get_label()) for h in handles])
    else:
        ax.text(0.5, 0.5, "no privacy option besides none was run", ha="center", transform=ax.transAxes)
    return _save(fig, path)


def _stacked_runs(ax: Any, runs: Sequence[Mapping[str, Any]], parts: Mapping[str, Sequence[float]],
                  xlabel: str, total_fmt: str) -> None:
    """Horizontal stacked bars, one per run, one segment per part; legend outside."""
    y = np.arange(len(runs))
    left = np.zeros(len(runs))
    colors = colormaps["tab20"](np.linspace(0, 1, max(len(parts), 2)))
    for (name, values), color in zip(parts.items(), colors):
        vals = np.asarray(values, float)
        ax.barh(y, vals, 0.7, left=left, label=name, color=color)
        left += vals
    for yi, total in zip(y, left):  # the total beside each bar: a short bar stays readable
        ax.annotate(total_fmt.format(total), (total, yi), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=7)
    if len(runs):
        ax.set_xlim(0, max(left.max(), 1e-9) * 1.12)
    ax.set_yticks(y, [f"{r['method']} / {r['privacy']}" for r in runs], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if parts:
        _legend_outside(ax)


def _top_parts(runs: Sequence[Mapping[str, Any]], key: str, keep: int) -> dict[str, list[float]]:
    """Per run, the ``keep`` largest entries of ``run[key]`` (by total over runs) and the rest as "other"."""
    totals: dict[str, float] = {}
    for r in runs:
        for k, v in r[key].items():
            totals[k] = totals.get(k, 0.0) + float(v)
    big = [k for k, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:keep]]
    parts = {k: [float(r[key].get(k, 0.0)) for r in runs] for k in big}
    rest = [sum(float(v) for k, v in r[key].items() if k not in big) for r in runs]
    if any(rest):
        parts["other"] = rest
    return parts


def crypto_by_primitive(runs: Sequence[Mapping[str, Any]], path: Path, keep: int = 8) -> str:
    """Section 2: crypto seconds of each run by primitive (the ``keep`` largest, the rest lumped), all parties."""
    runs = [r for r in runs if r.get("status") == "ok" and sum(r["crypto_s"].values()) > 0]
    fig = MplFigure(figsize=(10, 1.2 + 0.42 * max(1, len(runs))))
    ax = fig.subplots()
    _stacked_runs(ax, runs, _top_parts(runs, "crypto_s", keep), "crypto seconds (summed over parties)",
                  "{:.3g} s")
    ax.set_title(f"Crypto time by primitive (the {keep} largest; every one in the table)")
    if not runs:
        ax.text(0.5, 0.5, "no run used crypto", ha="center", transform=ax.transAxes)
    return _save(fig, path)


def bytes_by_link(runs: Sequence[Mapping[str, Any]], path: Path, keep: int = 10) -> str:
    """Section 2: bytes each run sent over each link (the largest ``keep`` links; the rest lumped), in MB."""
    runs = [r for r in runs if r.get("status") == "ok" and r["bytes"]]
    mb = [{**r, "mb": {k: v / 1e6 for k, v in r["bytes"].items()}} for r in runs]
    fig = MplFigure(figsize=(10, 1.2 + 0.42 * max(1, len(runs))))
    ax = fig.subplots()
    _stacked_runs(ax, mb, _top_parts(mb, "mb", keep), "bytes sent (MB, all messages of the run)", "{:.3g} MB")
    ax.set_title(f"Bytes per link (the {keep} busiest; every link and its messages in the table)")
    if not runs:
        ax.text(0.5, 0.5, "no run sent bytes", ha="center", transform=ax.transAxes)
    return _save(fig, path)


def scaling(data: Mapping[str, Any], exps: Mapping[str, float | None], path: Path) -> str:
    """Section 3: secure aggregation vs parties, PSI vs set size (log-log, fitted), Paillier vs batch."""
    fig = MplFigure(figsize=(15, 4.8))
    axes = fig.subplots(1, 3)
    ax = axes[0]
    ns = list(data["secagg"])
    for key, label in (("setup_per_party", "seed setup per party"), ("mask_per_party", "encode + mask per party"),
                       ("sum_decode", "aggregator sum + decode")):
        med = [statistics.median(data["secagg"][n][key]) * 1e3 for n in ns]
        ax.plot(ns, med, "o-", label=label)
    ax.set_xlabel("parties")
    ax.set_ylabel("time per round (ms, median)")
    ax.set_title("Secure aggregation of a 128 x 128 batch")
    ax.legend(fontsize=8, framealpha=0.9)

    ax = axes[1]
    for key, label, color in (("psi_ours", "securevfl psi", COLORS["ours"]),
                              ("psi_openmined", "openmined-psi", COLORS["peer"])):
        rows = data[key]
        if not rows:
            continue
        xs = np.array(list(rows), float)
        ys = np.array([statistics.median(v) for v in rows.values()])
        exp = exps.get(key)
        ax.loglog(xs, ys, "o", color=color, label=f"{label} (exponent {exp:.2f})" if exp else label)
        if exp is not None:
            c = np.polyfit(np.log(xs), np.log(ys), 1)
            grid = np.geomspace(xs.min(), xs.max(), 20)
            ax.loglog(grid, np.exp(np.polyval(c, np.log(grid))), "--", color=color, lw=1)
    ax.set_xlabel("IDs per party (log)")
    ax.set_ylabel("time (s, log)")
    ax.set_title("PSI time vs set size (fit: np.polyfit on logs)")
    ax.legend(fontsize=8, framealpha=0.9)

    ax = axes[2]
    batches = list(data["paillier"])
    med = [statistics.median(data["paillier"][b]["round_s"]) for b in batches]
    crypto = [data["paillier"][b]["crypto_s_per_round"] for b in batches]
    ax.plot(batches, med, "o-", label="round wall time (active party)")
    ax.plot(batches, crypto, "s--", label="crypto, all parties")
    ax.set_xlabel("batch size (rows of 128 values, 3 passive parties)")
    ax.set_ylabel("time per round (s)")
    ax.set_title("Paillier aggregation vs batch size")
    ax.legend(fontsize=8, framealpha=0.9)
    return _save(fig, path)


def network(rows: Sequence[Mapping[str, Any]], path: Path) -> str:
    """Section 4: each run's simulated transfer time against bandwidth and against latency."""
    fig = MplFigure(figsize=(13, 4.8))
    axes = fig.subplots(1, 2)
    for r in rows:
        bw = sorted(r["bandwidth_sweep"])
        axes[0].loglog(bw, [r["bandwidth_sweep"][b] for b in bw], "o-", label=r["run"])
        lat = sorted(r["latency_sweep"])
        axes[1].loglog(lat, [r["latency_sweep"][t] for t in lat], "o-", label=r["run"])
    axes[0].set_xlabel("bandwidth (Mbit/s, log)")
    axes[0].set_ylabel("simulated transfer time of the run (s, log)")
    axes[0].set_title("Bandwidth sweep at 10 ms latency")
    axes[1].set_xlabel("latency (ms, log)")
    axes[1].set_ylabel("simulated transfer time of the run (s, log)")
    axes[1].set_title("Latency sweep at 100 Mbit/s")
    if rows:
        _legend_outside(axes[1])
    return _save(fig, path)


def predict(methods: Mapping[str, Mapping[str, Any]], path: Path) -> str:
    """Section 4b: where scoring's time goes (plaintext alignment) next to the plain-torch floor, per method."""
    fig = MplFigure(figsize=(8, 4))
    ax = fig.subplots()
    parts = ("read_s", "preprocess_s", "align_s", "score_s", "other_s")
    labels = []
    for i, (key, m) in enumerate(methods.items()):
        plain = min(m["plaintext"], key=lambda p: p["wall_s"])
        floor = min(m["floor"], key=lambda f: f["wall_s"])
        start = 0.0
        for j, part in enumerate(parts):
            width = max(0.0, float(plain.get(part, 0.0)))
            ax.barh(2 * i, width, left=start, color=f"C{j}", label=part[:-2] if i == 0 else None)
            start += width
        ax.barh(2 * i + 1, floor["wall_s"], color="grey", label="floor (plain torch, end to end)" if i == 0 else None)
        labels += [f"{key}: score()", f"{key}: floor"]
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("seconds (plaintext alignment; PSI is reported in the table)")
    ax.set_title("Batch scoring of a saved model against the floor")
    ax.legend(fontsize=7, framealpha=0.9)
    return _save(fig, path)


def secureboost(data: Mapping[str, Any], path: Path) -> str:
    """Section 4c: time per tree of every configuration (log), and where the fast run's tree goes next to its floor."""
    fig = MplFigure(figsize=(13, 4.8))
    axes = fig.subplots(1, 2)
    runs = data["runs"]
    ax = axes[0]
    bars = [(f"{r['label']}\n{r['rows']:,} rows", r["seconds_per_tree"], COLORS["ours"]) for r in runs.values()]
    bars.append((f"crypto floor (fast)\n{runs['fast']['rows']:,} rows", runs["fast"]["floor"]["per_tree_s"],
                 COLORS["floor"]))
    x = data.get("xgboost", {})
    if x.get("status") == "ok":
        bars.append((f"XGBoost hist\n{x['rows']:,} rows", x["seconds_per_tree"], COLORS["peer"]))
    ys = np.arange(len(bars))
    ax.barh(ys, [max(b[1], 1e-6) for b in bars], color=[b[2] for b in bars])
    ax.set_yticks(ys, [b[0] for b in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="seconds per tree (log)", title="Time per tree")
    ax = axes[1]
    keys = [k for k in ("fast", "fast_at_plain_rows", "fast_big") if k in runs]
    parts = ("encrypt", "histogram", "decrypt", "split_finding", "network", "other")
    for i, key in enumerate(keys):
        start = 0.0
        for j, part in enumerate(parts):
            width = max(0.0, float(runs[key]["split_per_tree_s"][part]))
            ax.barh(2 * i, width, left=start, color=f"C{j}", label=part.replace("_", " ") if i == 0 else None)
            start += width
        ax.barh(2 * i + 1, runs[key]["floor"]["per_tree_s"], color=COLORS["floor"],
                label="crypto floor" if i == 0 else None)
    ax.set_yticks(range(2 * len(keys)), [f"{runs[k]['label']}: {p}" for k in keys for p in ("split", "floor")],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="seconds per tree (all trees, worker start-up included)", title="Where a fast tree's time goes")
    ax.legend(fontsize=7, framealpha=0.9)
    return _save(fig, path)


def coverage(data: Mapping[str, Any], path: Path) -> str:
    """Section 4d: per dataset and p, every way over all held-out rows and over the rows only the active party holds.

    Bars: the mean over the seeds; error bars: the seeds' minimum to maximum (none with one seed).
    """
    from securevfl.bench.coverage import WAYS, way_rows

    rows = way_rows(data["figures"])
    samples = data.get("samples", {})
    panels = list(dict.fromkeys((name, p) for name, p, _, _ in rows))
    fig = MplFigure(figsize=(4.6 * max(1, min(len(panels), 3)), 3.8 * ((len(panels) + 2) // 3 or 1)))
    axes = np.atleast_1d(fig.subplots((len(panels) + 2) // 3 or 1, max(1, min(len(panels), 3)))).ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    width = 0.8 / len(WAYS)
    for ax, (name, p) in zip(axes, panels):
        # "all", then the pattern of one party (the active party alone: no passive party holds the row)
        groups = [(pattern, kind) for n, q, pattern, kind in rows if (n, q) == (name, p)
                  and (pattern == "all" or "+" not in pattern)]
        kind = groups[0][1] if groups else ""
        for i, way in enumerate(WAYS):
            xs, heights, low, high = [], [], [], []
            for g, (pattern, k) in enumerate(groups):
                value = rows[(name, p, pattern, k)].get(way)
                if value is None:
                    continue
                seeds = samples.get(f"coverage.{name}.{p}.{way}.{pattern}.{k}", [value])
                xs.append(g + (i - (len(WAYS) - 1) / 2) * width)
                heights.append(value)
                low.append(value - min(seeds))
                high.append(max(seeds) - value)
            if xs:
                ax.bar(xs, heights, width, yerr=[low, high] if max(low + high) > 0 else None, capsize=2,
                       label=way, color=f"C{i}")
        ax.set_xticks(range(len(groups)), ["all rows" if g == "all" else f"{g} alone" for g, _ in groups])
        values = [v for g, k in groups for v in rows[(name, p, g, k)].values()]
        if values:  # the differences are small: start the axis near the lowest bar
            lo, hi = min(values), max(values)
            pad = max((hi - lo) * 0.5, 0.01 * hi, 1e-3)
            ax.set_ylim(max(0.0, lo - pad), hi + pad)
        better = "lower is better" if kind == "rmse" else "higher is better"
        ax.set_ylabel(f"{kind} ({better})" if kind else "")
        ax.set_title(f"{name}, p = {int(p[1:]) / 100:g}", fontsize=10)
    if panels:
        _legend_outside(axes[len(panels) - 1])
    fig.suptitle("Every customer scored: held-out rows, each way")
    return _save(fig, path)


def load(samples: Sequence[Mapping[str, Any]], cores: int, threshold: float, path: Path) -> str:
    """Section 5: the load average per core at the start and after every section."""
    fig = MplFigure(figsize=(7, 4))
    ax = fig.subplots()
    xs = [s["elapsed_s"] for s in samples]
    ax.plot(xs, [s["load_1m"] / max(cores, 1) for s in samples], "o-", label="1-minute load average per core")
    ax.axhline(threshold, color="r", ls="--", label=f"loaded above {threshold} per core")
    for s in samples:
        ax.annotate(s["at"], (s["elapsed_s"], s["load_1m"] / max(cores, 1)), fontsize=7, rotation=30)
    ax.set_xlabel("time since the start of the benchmark (s)")
    ax.set_ylabel("load average per core")
    ax.set_title(f"Machine load during the run ({cores} cores)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, framealpha=0.9)
    return _save(fig, path)
