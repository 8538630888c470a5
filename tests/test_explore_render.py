"""securevfl.exploration.render: the explore report's dict as Markdown and as one self-contained HTML page.

Small hand-built dicts (no protocol run): every section renders, hostile names are escaped, missing optional
keys (older reports, regression labels, parties that share nothing) render what is there.
"""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from securevfl.exploration.render import _label, _md, html, markdown
from securevfl.exploration.report import ExploreReport

HOSTILE = "<script>alert(1)</script>"
PIPE = "a|b"


def _bins(labels: list[str], events: list[float], rows: list[int]) -> list[dict[str, Any]]:
    return [{"bin": b, "label": label, "rows": n, "events": e, "non_events": n - e, "event_rate": e / n,
             "woe": 0.5 - b, "iv": 0.01 * (b + 1)} for b, (label, e, n) in enumerate(zip(labels, events, rows))]


def full_report() -> dict[str, Any]:
    """Three parties: the active one, a passive one with hostile names, one that shares nothing."""
    age = {"name": "age", "kind": "numeric", "iv": 0.9, "strength": "suspicious",
           "stats": {"kind": "numeric", "count": 100, "missing": 0, "missing_share": 0.0, "distinct": 40, "mean": 38.5,
                     "std": 12.25, "min": 17.0, "p25": 28.0, "p50": 37.0, "p75": 48.0, "max": 90.0, "zeros": 0},
           "bins": _bins(["<= 30", "(30, 50]", "> 50"], [5, 15, 5], [40, 40, 20]), "cuts": [30.0, 50.0]}
    city = {"name": "city", "kind": "categorical", "iv": 0.05, "strength": "weak",
            "stats": {"kind": "categorical", "count": 95, "missing": 5, "missing_share": 0.05, "distinct": 3,
                      "top": [["Paris", 50], ["Lyon", 30], ["Nice", 15]]},
            "bins": _bins(["Paris", "Lyon", "Nice"], [12, 8, 5], [50, 30, 20])}
    hostile = {"name": HOSTILE, "kind": "categorical", "iv": 0.2, "strength": "medium",
               "stats": {"kind": "categorical", "count": 100, "missing": 0, "missing_share": 0.0, "distinct": 2,
                         "top": [["<b>x</b>", 60], ["y|z", 40]]},
               "bins": _bins(["<b>x</b>", "$\\alpha$ y|z"], [10, 15], [60, 40])}
    piped = {"name": PIPE, "kind": "numeric", "iv": 0.01, "strength": "useless",
             "stats": {"kind": "numeric", "count": 100, "missing": 0, "missing_share": 0.0, "distinct": 90,
                       "mean": 188944.77, "std": 1000.5, "min": 0.0, "max": 1490400.0, "zeros": 10},
             "bins": _bins(["<= 1", "> 1"], [12, 13], [50, 50])}
    when = {"name": "opened", "kind": "date",
            "stats": {"kind": "date", "count": 100, "missing": 0, "missing_share": 0.0, "distinct": 80,
                      "min": "2001-01-01", "max": "2020-12-31", "median": "2010-06-30"}}
    anonymous = {"name": "passive2#1", "iv": 0.35, "strength": "strong",
                 "bins": _bins(["bin 0", "bin 1"], [20, 5], [50, 50])}
    ranking = [{"party": "bank", "column": "age", "iv": 0.9, "strength": "suspicious", "rank": 1},
               {"party": "passive2", "column": "passive2#1", "iv": 0.35, "strength": "strong", "rank": 2},
               {"party": "passive1", "column": HOSTILE, "iv": 0.2, "strength": "medium", "rank": 3},
               {"party": "bank", "column": "city", "iv": 0.05, "strength": "weak", "rank": 4},
               {"party": "passive1", "column": PIPE, "iv": 0.01, "strength": "useless", "rank": 5}]
    return {
        "kind": "explore", "dataset": "toy", "active": "bank", "rows": 100, "events": 25, "positive_class": "bad",
        "config": {"max_bins": 10, "key_bits": 2048, "backend": "fast", "epsilon": None, "adjustment": 0.5,
                   "correlation": True, "share_stats": "summary", "alignment": "psi", "seed": 0,
                   "explored_rows": "the training rows"},
        "parties": {"bank": {"role": "active", "shared": True, "epsilon": None, "rows_total": 120,
                             "columns": [age, city]},
                    "passive1": {"role": "passive", "shared": True, "epsilon": None,
                                 "columns": [hostile, piped, when]},
                    "passive2": {"role": "passive", "shared": False, "epsilon": None, "columns": [anonymous]}},
        "ranking": ranking,
        "correlation": {"passive1": {"active_columns": ["age"], "columns": [PIPE], "r": [[0.91]]}},
        "redundant": [{"active_column": "age", "party": "passive1", "column": PIPE, "r": 0.91}],
        "cost": {"compute_s": 0.03, "crypto_s": {"paillier.encrypt": 0.5, "paillier.decrypt": 0.03},
                 "serialize_s": 0.003, "total_bytes": 1572864, "rounds": 2,
                 "comm": {"bytes": {"bank->passive1": 1536000}, "messages": {"bank->passive1": 3}},
                 "per_party": {"bank": {"compute_s": 0.01, "crypto_s": {"paillier.encrypt": 0.5},
                                        "serialize_s": 0.002, "bytes_sent": 1536000}},
                 "timing": {"keygen_s": 0.0179, "encrypt_labels_s": 0.248, "encrypt_columns_s": 0.249,
                            "decrypt_s": 0.029}},
        "learned": {"active": "per-bin counts of every passive column", "passive": "nothing of the label"},
        "notes": ["a note about 'bad'"],
        "value": {"method": "xgboost", "baseline": "active only", "metric": "auc", "active_only": 0.71,
                  "all_parties": 0.84, "parties": {"passive1": {"without": 0.75, "gain": 0.09, "crypto_s": 1.5,
                                                                "bytes": 2048, "wall_s": 3.0}},
                  "cost": {"crypto_s": 1.5}},
        "wall_s": 1.68,
    }


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def full_html() -> str:
    return html(full_report(), top=2)


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of ``text``: each a list of its lines."""
    tables: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def _cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


# ------------------------------------------------------------------------------------------- Markdown
def test_markdown_full_report_has_every_section() -> None:
    text = markdown(full_report())
    for needle in ("# Explore: toy", "Rows explored:** 100 of the active party's 120", "25 (25.0 % event rate)",
                   "**Positive class (the event):** bad", "2048-bit key, fast backend", "exact counts",
                   "**Wall time:** 1.680 s", "## What each party learned", "per-bin counts of every passive column",
                   "nothing of the label", "## Information value ranking", "| 0.9000 |", "check for leakage",
                   "## Party passive1 (passive)", "38.50 ± 12.25 \\[17 … 90]", "Paris (50)", "5.0 %",
                   "2001-01-01 … 2020-12-31, median 2010-06-30", "10 % zeros",
                   "## Weight of evidence", "### 1. bank · age: IV 0.9000 (suspicious)", "| <= 30 | 40 | 5 |",
                   "## Cross-party correlation", "+0.910", "Redundant pairs", "## The partner's value",
                   "AUC without it", "+0.0900", "## Cost", "1.5 MiB", "paillier.encrypt", "encrypt_labels_s",
                   "0.248 s", "## Notes", "a note about 'bad'", "## Settings"):
        assert needle in text, needle
    assert text.index("## What each party learned") < text.index("## Information value ranking")


def test_markdown_ranking_order() -> None:
    text = markdown(full_report())
    ranking = text[text.index("## Information value ranking"):text.index("## Party")]
    rows = [line for line in ranking.splitlines() if re.match(r"^\| \d+ \|", line)]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 3", "| 4", "| 5"]
    assert "| age |" in rows[0] and "passive2#1" in rows[1] and "a\\|b" in rows[4]


def test_markdown_pipe_and_newline_do_not_break_tables() -> None:
    report = full_report()
    report["parties"]["bank"]["columns"][1]["name"] = "two\nlines"
    text = markdown(report)
    assert "a\\|b" in text and "two lines" in text
    tables = _tables(text)
    assert tables
    for table in tables:
        assert len({_cells(line) for line in table}) == 1, table


def test_markdown_escapes_markup() -> None:
    text = markdown(full_report())
    assert HOSTILE not in text
    assert "\\<script>alert(1)\\</script>" in text
    assert _md("[x](javascript:alert(1))").startswith("\\[x]")
    assert _md("<= 22 (1, 2]") == "<= 22 (1, 2]"


def test_top_keyword_limits_woe_tables() -> None:
    assert len(re.findall(r"^### ", markdown(full_report(), top=1), flags=re.M)) == 1
    assert "## Weight of evidence" not in markdown(full_report(), top=0)


def test_epsilon_is_stated() -> None:
    report = full_report()
    report["config"]["epsilon"] = 1.0
    report["parties"]["passive1"]["epsilon"] = 1.0
    text = markdown(report)
    assert "ε = 1 per column" in text and "exact counts" not in text
    assert "Its bin counts are noised (ε = 1)" in text


# ----------------------------------------------------------------------------------------------- HTML
def test_html_full_report_is_self_contained(full_html: str) -> None:
    assert full_html.startswith("<!DOCTYPE html>")
    assert "<script" not in full_html.lower()
    assert full_html.count("data:image/png;base64,") >= 5  # IV charts x 3, WOE x 2, heat-map, gains
    parsed = _parse(full_html)
    assert {"script", "iframe", "object", "embed", "link"}.isdisjoint(parsed.tags)
    assert not any(a.startswith("on") for a in parsed.attrs)
    assert "src" in parsed.attrs and "http" not in re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", full_html)


def test_html_escapes_hostile_names(full_html: str) -> None:
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in full_html
    assert "&lt;b&gt;x&lt;/b&gt;" in full_html
    assert "<b>x</b>" not in full_html


def test_html_sections_and_ranking_order(full_html: str) -> None:
    for needle in ("What each party learned", "class='learned'", "Information value ranking", "Weight of evidence",
                   "Cross-party correlation", "The partner&#x27;s value", "Cost", "1.5 MiB", "Notes"):
        assert needle in full_html, needle
    ranking = full_html[full_html.index("<caption>Every party"):full_html.index("How to read IV")]
    order = [ranking.index(name) for name in (">age<", "passive2#1", "&lt;script&gt;", ">city<", ">a|b<")]
    assert order == sorted(order)


def test_chart_labels_escape_mathtext() -> None:
    assert _label("$x$ costs $5") == r"\$x\$ costs \$5"
    assert _label("a\nb") == "a b"
    assert len(_label("x" * 100)) == 40


# ---------------------------------------------------------------------------------- optional keys
def test_no_value_and_no_correlation() -> None:
    report = full_report()
    for key in ("value", "correlation", "redundant"):
        del report[key]
    text = markdown(report, top=1)
    assert "partner" not in text and "Cross-party correlation" not in text
    page = html(report, top=0)
    assert "partner" not in page and "data:image/png;base64," in page
    report["value"], report["correlation"], report["redundant"] = {}, {}, []
    assert "No cross-party correlation" in markdown(report)


def test_regression_report() -> None:
    report = full_report()
    report["events"] = None
    report["positive_class"] = None
    report["ranking"] = []
    del report["value"]
    for party in report["parties"].values():
        for column in party["columns"]:
            for key in ("iv", "strength", "bins"):
                column.pop(key, None)
    text = markdown(report)
    assert "No WOE / IV" in text and "Weight of evidence" not in text and "| IV |" not in text
    assert "regression target" in text
    page = html(report)
    assert "No WOE / IV" in page and "<script" not in page


def test_party_that_shares_nothing() -> None:
    report = full_report()
    text = markdown(report)
    section = text[text.index("## Party passive2"):text.index("## Weight of evidence")]
    assert "anonymous" in section and "| passive2#1 | 0.3500 | strong |" in section
    assert "| column | IV | strength |" in section  # no kind, missing, distinct or statistics columns
    assert "passive2 shared with the active party:** no column names" in text


def test_old_and_minimal_reports_render() -> None:
    for report in ({}, {"dataset": "old"}, {"dataset": "x", "parties": {"p": {}}, "ranking": None, "cost": None}):
        assert markdown(copy.deepcopy(report)).startswith("# Explore:")
        assert "<script" not in html(copy.deepcopy(report))
    report = full_report()
    del report["ranking"]  # an older report: the ranking drawn from the parties' columns
    text = markdown(report)
    assert text.index("| 1 | bank | age |") < text.index("| 2 | passive2 | passive2#1 |")


def test_explore_report_renders_through_render() -> None:
    fields = {k: v for k, v in full_report().items() if k != "kind"}
    report = ExploreReport(**fields)
    assert report.to_markdown() == markdown(full_report())
