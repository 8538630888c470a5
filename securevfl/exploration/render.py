"""Markdown and HTML of an explore report, drawn from its JSON dict alone (``ExploreReport.to_dict()``).

Both forms come from one list of blocks (headings, paragraphs, lists, tables, charts): :func:`markdown`
writes them as Markdown (charts left out) and :func:`html` as one self-contained page: inline CSS, no
JavaScript, charts as PNGs embedded as ``data:`` URIs, drawn on ``matplotlib.figure.Figure`` (no pyplot,
no global backend state; matplotlib is imported only when a page is drawn).

Column names, bin labels, levels and party names come from other organisations' data: every text is
escaped on output (HTML-escaped in the page; Markdown punctuation backslash-escaped, newlines flattened,
so a ``|`` cannot break a table), and ``$`` is escaped in chart labels (no mathtext). Any optional key
may be missing (an older report): what is there is shown.
"""

from __future__ import annotations

import base64
import html as html_lib
import io
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Columns whose WOE tables (and charts) the report shows, by IV.
TOP_WOE = 8
#: Siddiqi's reading of an IV: (strength, band, what it means).
IV_READING = (("useless", "below 0.02", "no predictive power"), ("weak", "0.02 to 0.1", ""),
              ("medium", "0.1 to 0.3", ""), ("strong", "0.3 to 0.5", ""),
              ("suspicious", "above 0.5", "too good to be true; check for leakage: a column derived from the label "
                                          "or recorded after it"))
#: |r| at or above which a cross-party pair counts as redundant (``securevfl.exploration.report.REDUNDANT_R``).
REDUNDANT_R = 0.8
#: At most this many bars in a party's IV chart (the table lists every column).
IV_CHART_MAX = 40
#: Heat-map cells are annotated with r up to this many cells.
ANNOTATE_MAX = 400
DPI = 110
STRENGTH_COLORS = {"useless": "#bdbdbd", "weak": "#9ecae1", "medium": "#4292c6", "strong": "#08519c",
                   "suspicious": "#d62728"}
MISSING = "—"


# ------------------------------------------------------------------------------------------- blocks
@dataclass(frozen=True)
class _Heading:
    level: int
    text: str


@dataclass(frozen=True)
class _Para:
    text: str
    lead: str = ""  # shown in bold before the text
    warn: bool = False


@dataclass(frozen=True)
class _List:
    items: tuple[tuple[str, str], ...]  # (bold lead, text)
    box: bool = False  # prominent: a framed box in HTML, a block quote in Markdown


@dataclass(frozen=True)
class _Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True)
class _Chart:
    alt: str
    size: tuple[float, float]
    draw: Callable[[Figure], None]


_Block = _Heading | _Para | _List | _Table | _Chart


# --------------------------------------------------------------------------------------- formatting
def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()


def _is_num(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fixed(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if _is_num(value) else MISSING


def _signed(value: Any, digits: int) -> str:
    return f"{value:+.{digits}f}" if _is_num(value) else MISSING


def _pct(value: Any, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f} %" if _is_num(value) else MISSING


def _count(value: Any) -> str:
    """A count: an integer with thousands separators (a noised count may be fractional)."""
    if not _is_num(value):
        return MISSING
    if not math.isfinite(value):
        return str(value)
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def _number(value: Any) -> str:
    """A statistic, readably: 188,945 / 38.85 / 0.0123."""
    if not _is_num(value):
        return MISSING if value is None else str(value)
    size = abs(value)
    if not math.isfinite(value) or size == 0:
        return str(value) if not math.isfinite(value) else "0"
    if size >= 1e9 or size < 1e-3:
        return f"{value:.3g}"
    if size >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}" if size >= 1 else f"{value:.3g}"


def _bytes(value: Any) -> str:
    """Bytes in human units (KiB, MiB, GiB)."""
    if not _is_num(value):
        return MISSING
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return MISSING  # pragma: no cover


def _seconds(value: Any) -> str:
    if not _is_num(value):
        return MISSING
    return f"{value:.3f} s" if abs(value) < 10 else f"{value:,.1f} s"


def _text(value: Any) -> str:
    return MISSING if value is None else str(value)


_NUMERIC = re.compile(r"^[-+−]?[\d,]*\.?\d+(e[-+]?\d+)?( ?(%|s|B|KiB|MiB|GiB))?$")


def _numeric(cell: str) -> bool:
    return bool(_NUMERIC.match(cell))


def _numeric_column(rows: Sequence[Sequence[str]], j: int) -> bool:
    cells = [r[j] for r in rows if j < len(r) and r[j] not in ("", MISSING)]
    return bool(cells) and all(_numeric(c) for c in cells)


def _drop_empty_columns(columns: Sequence[str], rows: Sequence[Sequence[str]], keep: int = 1) -> _Table:
    """A table without the columns (after the first ``keep``) that no row fills."""
    used = [j for j in range(len(columns)) if j < keep or any(r[j] not in ("", MISSING) for r in rows)]
    return _Table(tuple(columns[j] for j in used), tuple(tuple(r[j] for j in used) for r in rows))


# ------------------------------------------------------------------------------------------- report
def _ranking(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The IV ranking: the report's, or (an older report) one drawn from the parties' columns."""
    rows = [r for r in _seq(report.get("ranking")) if isinstance(r, Mapping) and _is_num(r.get("iv"))]
    if rows or "ranking" in report:
        return rows
    found = [{"party": p, "column": c.get("name"), "iv": c["iv"], "strength": c.get("strength")}
             for p, entry in _map(report.get("parties")).items() for c in _seq(_map(entry).get("columns"))
             if isinstance(c, Mapping) and _is_num(c.get("iv"))]
    found.sort(key=lambda r: -float(r["iv"]))
    return [{**r, "rank": k} for k, r in enumerate(found, start=1)]


def _column(report: Mapping[str, Any], party: Any, name: Any) -> Mapping[str, Any]:
    for c in _seq(_map(_map(report.get("parties")).get(party)).get("columns")):
        if isinstance(c, Mapping) and c.get("name") == name:
            return c
    return {}


def _passives(report: Mapping[str, Any]) -> list[str]:
    parties = _map(report.get("parties"))
    return [p for p, e in parties.items() if _map(e).get("role") == "passive" or
            (not _map(e).get("role") and p != report.get("active"))]


def _header(report: Mapping[str, Any]) -> list[_Block]:
    config = _map(report.get("config"))
    rows, events = report.get("rows"), report.get("events")
    facts: list[tuple[str, str]] = [("Dataset:", _text(report.get("dataset")))]
    if "active" in report:
        facts.append(("Active party (holds the label):", _text(report["active"])))
    passives = _passives(report)
    if passives:
        facts.append(("Passive parties:", ", ".join(passives)))
    total = _map(_map(report.get("parties")).get(str(report.get("active")))).get("rows_total")
    explored = _count(rows) + (f" of the active party's {_count(total)}" if _is_num(total) else "")
    if config.get("explored_rows"):
        explored += f" ({config['explored_rows']})"
    facts.append(("Rows explored:", explored))
    if _is_num(events):
        rate = f" ({_pct(events / rows)} event rate)" if _is_num(rows) and rows else ""
        facts.append(("Events:", _count(events) + rate))
    elif "events" in report:
        facts.append(("Events:", "none: the label is not of two classes (a regression target), so no WOE / IV"))
    if report.get("positive_class") is not None:
        facts.append(("Positive class (the event):", _text(report["positive_class"])))
    if "key_bits" in config or "backend" in config:
        facts.append(("Paillier:", f"{_text(config.get('key_bits'))}-bit key, {_text(config.get('backend'))} backend"))
    if "epsilon" in config:
        eps = config["epsilon"]
        facts.append(("Epsilon:", "exact counts (no noise)" if eps is None else
                      f"ε = {eps:g} per column: passive parties' bin counts noised" if _is_num(eps) else _text(eps)))
    if _is_num(report.get("wall_s")):
        facts.append(("Wall time:", _seconds(report["wall_s"])))
    return [_Heading(1, f"Explore: {_text(report.get('dataset'))}"), _List(tuple(facts))]


def _learned(report: Mapping[str, Any]) -> list[_Block]:
    learned = _map(report.get("learned"))
    parties = _map(report.get("parties"))
    items: list[tuple[str, str]] = []
    for who, text in learned.items():
        if who == "active":
            lead = f"The active party ({_text(report.get('active', 'active'))}) learned:"
        elif who == "passive":
            lead = f"Each passive party ({', '.join(_passives(report)) or 'passive'}) learned:"
        else:
            lead = f"{who} learned:"
        items.append((lead, _text(text)))
    for name, entry in parties.items():
        e = _map(entry)
        if e.get("role") == "passive" and "shared" in e:
            items.append((f"{name} shared with the active party:", "its column names, statistics and bin edges"
                          if e["shared"] else "no column names, statistics or bin edges: its columns appear as "
                          f"{name}#1, {name}#2, ..."))
    if not items:
        return []
    return [_Heading(2, "What each party learned"), _List(tuple(items), box=True)]


def _ranking_section(report: Mapping[str, Any]) -> list[_Block]:
    ranking = _ranking(report)
    blocks: list[_Block] = [_Heading(2, "Information value ranking")]
    if not ranking:
        why = ("the label is not of two classes (a regression target)" if report.get("events", 0) is None
               else "the report has no IV")
        return blocks + [_Para(f"No WOE / IV: {why}. Statistics and correlations only.")]
    rows = tuple((_text(r.get("rank", k)), _text(r.get("party")), _text(r.get("column")), _fixed(r.get("iv"), 4),
                  _text(r.get("strength", ""))) for k, r in enumerate(ranking, start=1))
    blocks.append(_Table(("rank", "party", "column", "IV", "strength"), rows,
                         "Every party's columns by information value against the active party's label"))
    blocks.append(_Para("How to read IV (Siddiqi):"))
    blocks.append(_List(tuple((f"{strength}:", f"IV {band}" + (f"; {reading}" if reading else ""))
                              for strength, band, reading in IV_READING)))
    suspicious = [r for r in ranking if float(r["iv"]) > 0.5]
    if suspicious:
        names = ", ".join(f"{_text(r.get('party'))}.{_text(r.get('column'))}" for r in suspicious[:10])
        more = f" and {len(suspicious) - 10} more" if len(suspicious) > 10 else ""
        blocks.append(_Para(f"{len(suspicious)} column(s) with IV above 0.5: {names}{more}. Check them for leakage "
                            "before training.", lead="Suspicious:", warn=True))
    return blocks


def _summary(stats: Mapping[str, Any]) -> str:
    """A column's statistics in one cell: mean ± std [min … max], the top levels, or a date range."""
    top = [t for t in _seq(stats.get("top")) if isinstance(t, (list, tuple)) and len(t) >= 2]
    if top:
        return ", ".join(f"{_text(level)} ({_count(n)})" for level, n, *_ in top[:5])
    if _is_num(stats.get("mean")):
        text = f"{_number(stats['mean'])} ± {_number(stats.get('std'))} [{_number(stats.get('min'))} … " \
               f"{_number(stats.get('max'))}]"
        count = stats.get("count")
        if _is_num(stats.get("zeros")) and stats["zeros"] and _is_num(count) and count:
            text += f"; {_pct(stats['zeros'] / count, 0)} zeros"
        return text
    if stats.get("min") is not None and stats.get("max") is not None:
        median = f", median {_text(stats['median'])}" if stats.get("median") is not None else ""
        return f"{_text(stats['min'])} … {_text(stats['max'])}{median}"
    return ""


def _column_row(column: Mapping[str, Any]) -> tuple[str, ...]:
    stats = _map(column.get("stats"))
    return (_text(column.get("name")), _text(column.get("kind", stats.get("kind", ""))),
            _fixed(column.get("iv"), 4), _text(column.get("strength", "")), _pct(stats.get("missing_share")),
            _count(stats.get("distinct")) if "distinct" in stats else "", _summary(stats))


def _party_intro(name: str, entry: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    role = entry.get("role", "")
    if role == "active":
        text = "The active party: its own columns, in the clear."
    elif entry.get("shared") is False:
        text = ("Shares nothing beyond per-bin counts: its columns are anonymous, with no kinds, statistics or bin "
                "labels.")
    elif entry.get("shared"):
        text = "Shares its column names, statistics and bin edges with the active party."
    else:
        text = ""
    if _is_num(entry.get("rows_total")):
        text += f" Holds {_count(entry['rows_total'])} rows; {_count(report.get('rows'))} explored."
    if _is_num(entry.get("epsilon")):
        text += f" Its bin counts are noised (ε = {entry['epsilon']:g})."
    return text.strip()


def _party_sections(report: Mapping[str, Any]) -> list[_Block]:
    blocks: list[_Block] = []
    for name, raw in _map(report.get("parties")).items():
        entry = _map(raw)
        columns = [c for c in _seq(entry.get("columns")) if isinstance(c, Mapping)]
        role = entry.get("role")
        blocks.append(_Heading(2, f"Party {name}" + (f" ({role})" if role else "")))
        intro = _party_intro(name, entry, report)
        if intro:
            blocks.append(_Para(intro))
        if not columns:
            blocks.append(_Para("No columns."))
            continue
        table = _drop_empty_columns(("column", "kind", "IV", "strength", "missing", "distinct",
                                     "mean ± std [min … max] / top levels (rows)"),
                                    [_column_row(c) for c in columns])
        blocks.append(_Table(table.columns, table.rows, f"{name}: {len(columns)} column(s)"))
        ivs = sorted(((_text(c.get("name")), float(c["iv"]), _text(c.get("strength", ""))) for c in columns
                      if _is_num(c.get("iv"))), key=lambda t: -t[1])
        if ivs:
            shown = ivs[:IV_CHART_MAX]
            title = f"{name}: IV per column" + (f" (top {len(shown)} of {len(ivs)})" if len(ivs) > len(shown) else "")
            blocks.append(_Chart(title, (8.0, 1.4 + 0.3 * len(shown)), partial(_draw_iv, shown, title)))
    return blocks


def _woe_section(report: Mapping[str, Any], top: int) -> list[_Block]:
    entries = []
    for r in _ranking(report)[:max(top, 0)]:
        column = _column(report, r.get("party"), r.get("column"))
        bins = [b for b in _seq(column.get("bins")) if isinstance(b, Mapping)]
        if bins:
            entries.append((r, bins))
    if not entries:
        return []
    adjustment = _map(report.get("config")).get("adjustment")
    adjusted = f" adjusted by {adjustment:g}" if _is_num(adjustment) and adjustment > 0 else " adjusted"
    blocks: list[_Block] = [
        _Heading(2, f"Weight of evidence: the top {len(entries)} column(s) by IV"),
        _Para("WOE = ln(share of non-events / share of events) per bin (Siddiqi's sign): positive where the event "
              "is rarer than average, negative where it is more common. IV term = (share of non-events − share of "
              f"events) × WOE; the column's IV is their sum. A bin with no event or no non-event has its counts"
              f"{adjusted}; empty bins are left out.")]
    for r, bins in entries:
        title = f"{_text(r.get('rank'))}. {_text(r.get('party'))} · {_text(r.get('column'))}: IV " \
                f"{_fixed(r.get('iv'), 4)} ({_text(r.get('strength', ''))})"
        rows = tuple((_text(b.get("label", b.get("bin"))), _count(b.get("rows")), _count(b.get("events")),
                      _pct(b.get("event_rate")), _signed(b.get("woe"), 3), _fixed(b.get("iv"), 4)) for b in bins)
        blocks += [_Heading(3, title), _Table(("bin", "rows", "events", "event rate", "WOE", "IV term"), rows)]
        labels = [_text(b.get("label", b.get("bin"))) for b in bins]
        woes = [float(b["woe"]) if _is_num(b.get("woe")) else 0.0 for b in bins]
        blocks.append(_Chart(f"WOE per bin: {title}", (max(6.0, 1.5 + 0.55 * len(bins)), 4.2),
                             partial(_draw_woe, labels, woes, title)))
    return blocks


def _matrix(raw: Any, rows: int, cols: int) -> list[list[float]]:
    """An r matrix as floats (NaN where missing), ``rows`` × ``cols``."""
    out = []
    for i in range(rows):
        line = _seq(_seq(raw)[i]) if i < len(_seq(raw)) else ()
        out.append([float(line[j]) if j < len(line) and _is_num(line[j]) else math.nan for j in range(cols)])
    return out


def _correlation_section(report: Mapping[str, Any]) -> list[_Block]:
    if "correlation" not in report and "redundant" not in report:
        return []
    blocks: list[_Block] = [_Heading(2, "Cross-party correlation")]
    correlation = _map(report.get("correlation"))
    if not correlation:
        blocks.append(_Para("No cross-party correlation in this report (correlation off, or no numeric column on one "
                            "side)."))
    for party, raw in correlation.items():
        entry = _map(raw)
        mine = [_text(c) for c in _seq(entry.get("active_columns"))]
        theirs = [_text(c) for c in _seq(entry.get("columns"))]
        if not mine or not theirs:
            continue
        r = _matrix(entry.get("r"), len(mine), len(theirs))
        rows = tuple((a, *(_signed(v, 3) if math.isfinite(v) else MISSING for v in line)) for a, line in zip(mine, r))
        caption = f"Pearson r: {_text(report.get('active', 'active'))} columns (rows) × {party} columns"
        blocks.append(_Table((_text(report.get("active", "active")), *theirs), rows, caption))
        blocks.append(_Chart(caption, (min(20.0, max(5.0, 2.5 + 0.8 * len(theirs))),
                                       min(20.0, max(3.0, 1.5 + 0.45 * len(mine)))),
                             partial(_draw_heatmap, mine, theirs, r, caption)))
    redundant = [p for p in _seq(report.get("redundant")) if isinstance(p, Mapping)]
    if redundant:
        blocks.append(_Para(f"Pairs with |r| of {REDUNDANT_R:g} or more: one column nearly predicts the other "
                            "linearly, so keeping both adds little.", lead="Redundant pairs."))
        blocks.append(_List(tuple((f"{_text(report.get('active', 'active'))}.{_text(p.get('active_column'))} ~ "
                                   f"{_text(p.get('party'))}.{_text(p.get('column'))}", f"r = {_signed(p.get('r'), 3)}")
                                  for p in redundant)))
    elif correlation:
        blocks.append(_Para(f"No cross-party pair with |r| of {REDUNDANT_R:g} or more.", lead="Redundant pairs:"))
    return blocks


def _value_section(report: Mapping[str, Any]) -> list[_Block]:
    value = _map(report.get("value"))
    if not value:
        return []
    metric = _text(value.get("metric", "metric")).upper()
    facts = [(k + ":", _text(value[k])) for k in ("method", "baseline") if k in value]
    facts += [(f"{metric}, {what}:", _fixed(value[k], 4)) for k, what in
              (("active_only", "active party alone"), ("all_parties", "all parties")) if k in value]
    blocks: list[_Block] = [_Heading(2, "The partner's value"),
                            _Para("What each passive party adds: the model trained without it against the model "
                                  "trained with every party."), _List(tuple(facts))]
    parties = {p: _map(v) for p, v in _map(value.get("parties")).items()}
    if parties:
        rows = tuple((p, _fixed(v.get("without"), 4), _signed(v.get("gain"), 4), _seconds(v.get("crypto_s")),
                      _bytes(v.get("bytes")), _seconds(v.get("wall_s"))) for p, v in parties.items())
        blocks.append(_Table(("party", f"{metric} without it", "gain", "crypto", "bytes", "wall time"), rows))
        gains = [(p, float(v["gain"])) for p, v in parties.items() if _is_num(v.get("gain"))]
        if gains:
            blocks.append(_Chart(f"{metric} gain per party", (7.0, 1.5 + 0.4 * len(gains)),
                                 partial(_draw_gains, gains, metric)))
    cost = [(f"{k}:", _bytes(v) if "bytes" in k else _seconds(v) if k.endswith("_s") else _text(v))
            for k, v in _map(value.get("cost")).items() if _is_num(v) or isinstance(v, str)]
    if cost:
        blocks += [_Para("The value runs' cost:"), _List(tuple(cost))]
    return blocks


def _nested_table(data: Mapping[str, Any], first: str, fmt: Callable[[str, Any], str]) -> _Table | None:
    """A table of a mapping of mappings: one row per outer key, one column per inner key."""
    inner: list[str] = []
    for v in data.values():
        inner += [k for k in _map(v) if k not in inner]
    if not inner:
        return None
    rows = tuple((k, *(fmt(col, _map(v).get(col)) if col in _map(v) else "" for col in inner)) for k, v in data.items())
    return _Table((first, *inner), rows)


def _cost_cell(key: str, value: Any) -> str:
    if "bytes" in key:
        return _bytes(value)
    if key.endswith("_s") and _is_num(value):
        return _seconds(value)
    if isinstance(value, Mapping):
        return _seconds(sum(v for v in value.values() if _is_num(v))) if key == "crypto_s" else _text(dict(value))
    return _count(value) if _is_num(value) else _text(value)


def _cost_section(report: Mapping[str, Any]) -> list[_Block]:
    cost = _map(report.get("cost"))
    if not cost and not _is_num(report.get("wall_s")):
        return []
    crypto = {k: v for k, v in _map(cost.get("crypto_s")).items() if _is_num(v)}
    facts: list[tuple[str, str]] = []
    for key, label, fmt in (("compute_s", "Computation (summed over parties):", _seconds),
                            ("serialize_s", "Serialisation:", _seconds), ("total_bytes", "Total traffic:", _bytes),
                            ("rounds", "Rounds:", _count)):
        if key in cost:
            facts.append((label, fmt(cost[key])))
    if "simulated_network_s" in cost:
        model = _map(cost.get("network_model"))
        link = f" ({_text(model.get('bandwidth_mbps'))} Mbit/s, {_text(model.get('latency_ms'))} ms latency)" \
            if model else ""
        facts.append(("Simulated network time:", _seconds(cost["simulated_network_s"]) + link))
    if crypto:
        facts.insert(0, ("Cryptography (summed over parties):", _seconds(sum(crypto.values()))))
    if _is_num(report.get("wall_s")):
        facts.insert(0, ("Wall time:", _seconds(report["wall_s"])))
    blocks: list[_Block] = [_Heading(2, "Cost"), _List(tuple(facts))]
    per_party = {p: _map(v) for p, v in _map(cost.get("per_party")).items()}
    if crypto:
        parties = [p for p, v in per_party.items() if _map(v.get("crypto_s"))]
        rows = tuple((k, _seconds(v), *(_seconds(_map(per_party[p].get("crypto_s")).get(k)) if k in
                                         _map(per_party[p].get("crypto_s")) else "" for p in parties))
                     for k, v in sorted(crypto.items(), key=lambda kv: -kv[1]))
        blocks.append(_Table(("primitive", "seconds", *parties), rows, "Cryptography per primitive"))
    timing = dict(_map(cost.get("timing")))
    if timing:
        blocks.append(_Table(("step", "seconds"), tuple((k, _seconds(v)) for k, v in timing.items()),
                             "The active party's timing"))
    for key, first, caption in (("per_party", "party", "Per party"), ("links", "link", "Links")):
        table = _nested_table(_map(cost.get(key)), first, _cost_cell)
        if table is not None:
            blocks.append(_Table(table.columns, table.rows, caption))
    comm = _map(cost.get("comm"))
    traffic = _map(comm.get("bytes"))
    if traffic:
        messages = _map(comm.get("messages"))
        blocks.append(_Table(("link", "bytes", "messages"), tuple((k, _bytes(v), _count(messages.get(k)))
                                                                  for k, v in traffic.items()), "Traffic per link"))
    return blocks


def _tail(report: Mapping[str, Any]) -> list[_Block]:
    blocks: list[_Block] = []
    notes = [_text(n) for n in _seq(report.get("notes"))]
    if notes:
        blocks += [_Heading(2, "Notes"), _List(tuple(("", n) for n in notes))]
    config = _map(report.get("config"))
    if config:
        blocks += [_Heading(2, "Settings"), _Table(("setting", "value"), tuple((k, _text(v)) for k, v in
                                                                              config.items()))]
    return blocks


def _blocks(report: Mapping[str, Any], top: int) -> list[_Block]:
    """The report, in order: header, what each party learned, ranking, parties, WOE, correlation, value, cost."""
    report = _map(report)
    return (_header(report) + _learned(report) + _ranking_section(report) + _party_sections(report)
            + _woe_section(report, top) + _correlation_section(report) + _value_section(report)
            + _cost_section(report) + _tail(report))


# ------------------------------------------------------------------------------------------- charts
def _label(text: str, width: int = 40) -> str:
    """A chart label: one line, at most ``width`` characters, ``$`` escaped (no mathtext)."""
    text = " ".join(str(text).split())
    if len(text) > width:
        text = text[:width - 1] + "…"
    return text.replace("$", r"\$")


def _draw_iv(columns: Sequence[tuple[str, float, str]], title: str, fig: Figure) -> None:
    """Horizontal IV bars, largest on top, coloured by strength; reference lines at 0.02 and 0.1."""
    from matplotlib.patches import Patch

    ax = fig.subplots()
    y = list(range(len(columns)))
    ax.barh(y, [iv for _, iv, _ in columns], 0.7, color=[STRENGTH_COLORS.get(s, "#7f7f7f") for _, _, s in columns])
    ax.set_yticks(y, [_label(name) for name, _, _ in columns], fontsize=8)
    ax.invert_yaxis()
    lines = [ax.axvline(0.02, color="k", ls="--", lw=0.8, label="0.02: useless below"),
             ax.axvline(0.1, color="k", ls=":", lw=0.8, label="0.1: weak below")]
    strengths = [s for s in STRENGTH_COLORS if any(s == t for _, _, t in columns)]
    handles = lines + [Patch(color=STRENGTH_COLORS[s], label=s) for s in strengths]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.set_xlabel("information value (IV)")
    ax.set_title(_label(title, 80))


def _draw_woe(labels: Sequence[str], woes: Sequence[float], title: str, fig: Figure) -> None:
    """One bar per bin: its WOE (positive: fewer events than average)."""
    ax = fig.subplots()
    x = list(range(len(labels)))
    ax.bar(x, woes, 0.7, color=["#1f77b4" if w >= 0 else "#ff7f0e" for w in woes])
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(x, [_label(s, 24) for s in labels], fontsize=8, rotation=35 if len(labels) > 4 else 0,
                  ha="right" if len(labels) > 4 else "center")
    ax.set_xlabel("bin")
    ax.set_ylabel("WOE = ln(% non-events / % events)")
    ax.set_title(_label(title, 90), fontsize=10)


def _draw_heatmap(rows: Sequence[str], cols: Sequence[str], r: Sequence[Sequence[float]], title: str,
                  fig: Figure) -> None:
    """Pearson r as a heat-map, diverging colours fixed to [-1, 1], cells annotated."""
    ax = fig.subplots()
    image = ax.imshow(r, cmap="RdBu_r", vmin=-1.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), [_label(c, 24) for c in cols], fontsize=8, rotation=35 if len(cols) > 3 else 0,
                  ha="right" if len(cols) > 3 else "center")
    ax.set_yticks(range(len(rows)), [_label(c, 24) for c in rows], fontsize=8)
    if len(rows) * len(cols) <= ANNOTATE_MAX:
        for i, line in enumerate(r):
            for j, v in enumerate(line):
                ax.text(j, i, f"{v:+.2f}" if math.isfinite(v) else "n/a", ha="center", va="center", fontsize=7,
                        color="white" if math.isfinite(v) and abs(v) > 0.6 else "black")
    fig.colorbar(image, ax=ax, label="Pearson r")
    ax.set_title(_label(title, 80), fontsize=10)


def _draw_gains(gains: Sequence[tuple[str, float]], metric: str, fig: Figure) -> None:
    """One horizontal bar per passive party: the metric's gain from adding it."""
    ax = fig.subplots()
    y = list(range(len(gains)))
    ax.barh(y, [g for _, g in gains], 0.6, color=["#2ca02c" if g >= 0 else "#d62728" for _, g in gains])
    ax.set_yticks(y, [_label(p) for p, _ in gains], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel(_label(f"{metric} gain from the party (all parties against all but this one)", 80))
    ax.set_title("The partner's value")


def _png(chart: _Chart) -> str:
    """The chart as a base64 PNG ``data:`` URI."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=chart.size, dpi=DPI)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Gg]lyph.*missing.*")
        chart.draw(fig)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------------------- Markdown
#: What Markdown could read as markup in a text: code, emphasis, link brackets, a table's bar, and a ``<`` that
#: could open raw HTML or an autolink (``<a``, ``</``, ``<!``, ``<?``); ``<= 22`` stays as it is.
_MD_SPECIAL = re.compile(r"([\\`*\[|]|<(?=[A-Za-z/!?]))")


def _md(text: str) -> str:
    """Text safe in Markdown (and in a table cell): one line, its markup characters backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _md_table(table: _Table) -> list[str]:
    lines = [f"*{_md(table.caption)}*", ""] if table.caption else []
    align = ["---:" if j and _numeric_column(table.rows, j) else "---" for j in range(len(table.columns))]
    lines += ["| " + " | ".join(_md(c) for c in table.columns) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in table.rows]
    return lines + [""]


def _md_block(block: _Block) -> list[str]:
    if isinstance(block, _Heading):
        return ["#" * block.level + " " + _md(block.text), ""]
    if isinstance(block, _Para):
        lead = f"**{_md(block.lead)}** " if block.lead else ""
        return [("> " if block.warn else "") + lead + _md(block.text), ""]
    if isinstance(block, _List):
        items = [(f"**{_md(lead)}** " if lead else "") + _md(text) for lead, text in block.items]
        if block.box:
            return [line for item in items for line in (f"> {item}", ">")][:-1] + [""]
        return [f"- {item}" for item in items] + [""]
    if isinstance(block, _Table):
        return _md_table(block)
    return []  # charts: HTML only


def markdown(report: dict[str, Any], *, top: int = TOP_WOE) -> str:
    """The report as Markdown: every table of the HTML page, without the charts; WOE tables of the ``top`` columns."""
    return "\n".join(line for block in _blocks(report, top) for line in _md_block(block)).rstrip("\n") + "\n"


# --------------------------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
caption{font-weight:bold;text-align:left;padding:.3em 0}
img{max-width:100%;border:1px solid #ddd}figure{margin:.5em 0 1.5em}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:.6em 1em}
.learned{background:#eef5fc;border-left:5px solid #1f77b4;padding:.4em 1.2em;margin:.5em 0 1.5em;font-size:1.05em}
.learned ul{padding-left:1em}.learned li{margin:.4em 0}
.note{font-style:italic;color:#555}nav{font-size:.9em;color:#555}nav a{margin-right:.8em}
"""


def _h(text: Any) -> str:
    return html_lib.escape(str(text), quote=True)


def _html_table(table: _Table) -> str:
    numeric = [j > 0 and _numeric_column(table.rows, j) for j in range(len(table.columns))]
    caption = f"<caption>{_h(table.caption)}</caption>" if table.caption else ""
    head = "".join(f"<th>{_h(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td class='n'>{_h(c)}</td>" if j < len(numeric) and numeric[j]
                                    else f"<td>{_h(c)}</td>" for j, c in enumerate(row)) + "</tr>"
                   for row in table.rows)
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_chart(chart: _Chart) -> str:
    try:
        uri = _png(chart)
    except Exception as exc:  # a chart that cannot be drawn must not cost the report: its table holds the same
        return f"<p class='note'>Chart not drawn ({_h(chart.alt)}): {_h(type(exc).__name__)}: {_h(exc)}</p>"
    return f"<figure><img src='{uri}' alt='{_h(chart.alt)}'><figcaption class='note'>{_h(chart.alt)}</figcaption>" \
           "</figure>"


def _html_block(block: _Block, anchor: str) -> str:
    if isinstance(block, _Heading):
        ident = f" id='{anchor}'" if anchor else ""
        return f"<h{block.level}{ident}>{_h(block.text)}</h{block.level}>"
    if isinstance(block, _Para):
        lead = f"<b>{_h(block.lead)}</b> " if block.lead else ""
        attribute = " class='warn'" if block.warn else ""
        return f"<p{attribute}>{lead}{_h(block.text)}</p>"
    if isinstance(block, _List):
        items = "".join(f"<li>{f'<b>{_h(lead)}</b> ' if lead else ''}{_h(text)}</li>" for lead, text in block.items)
        return f"<div class='learned'><ul>{items}</ul></div>" if block.box else f"<ul>{items}</ul>"
    if isinstance(block, _Table):
        return _html_table(block)
    return _html_chart(block)


def html(report: dict[str, Any], *, top: int = TOP_WOE) -> str:
    """The report as one self-contained HTML page: inline CSS, embedded PNG charts, no JavaScript."""
    blocks = _blocks(report, top)
    anchors = [f"s{k}" if isinstance(b, _Heading) and b.level == 2 else "" for k, b in enumerate(blocks)]
    nav = " ".join(f"<a href='#{a}'>{_h(b.text)}</a>" for a, b in zip(anchors, blocks) if a and isinstance(b, _Heading))
    body = [_html_block(b, a) for b, a in zip(blocks, anchors)]
    if nav:
        first = next(k for k, a in enumerate(anchors) if a)
        body.insert(first, f"<nav>{nav}</nav>")
    title = f"Explore: {_map(report).get('dataset', '')}"
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_h(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


__all__ = ["TOP_WOE", "html", "markdown"]
