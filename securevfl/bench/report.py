"""Write a benchmark run: ``results.json`` (machines), ``report.md`` and ``report.html`` (people).

Both reports are rendered from the same dictionary as ``results.json``. The HTML file is one
self-contained page: its PNGs are embedded as base64 ``data:`` URIs and it has no JavaScript, so it
reads offline and can be mailed or attached to an issue as it is. Long tables (``Table.fold`` or
more than :data:`FOLD_ROWS` rows) come after the section's charts, folded under a one-line summary
(``<details>``, no script needed); the Markdown keeps them in full.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from psi import atomic
from securevfl.bench import stats
from securevfl.bench.results import Results

HEADLINE_LABELS = {
    "psi_speedup_vs_openmined": ("PSI, ours vs openmined-psi at the largest size (x, median)", "{:.2f}x"),
    "psi_fraction_of_floor": ("PSI at the largest size: multiplication floor / measured time (median)", "{:.2f}"),
    "psi_fraction_of_protocol_floor": ("PSI at the largest size: protocol floor (multiplications, hash-to-curve, "
                                       "validation) / measured time (median, goal >= 0.9)", "{:.2f}"),
    "aes_ctr_gb_per_s": ("AES-256-CTR keystream on this machine, one core (GB/s, median)", "{:.2f}"),
    "paillier_encrypt_fast_vs_phe": ("Paillier encrypt, fast vs phe, unpacked (x, median)", "{:.1f}x"),
    "paillier_encrypt_packed_vs_phe": ("Paillier encrypt, fast packed vs phe, per value (x, median)", "{:,.0f}x"),
    "paillier_decrypt_fast_vs_phe": ("Paillier decrypt, fast vs phe, unpacked (x, median)", "{:.2f}x"),
    "paillier_decrypt_packed_vs_phe": ("Paillier decrypt, fast packed vs phe, per value (x, median)", "{:.1f}x"),
    "mask_speedup_vs_flower": ("Mask expansion, AES-CTR vs Flower's MT19937 (x, median)", "{:.2f}x"),
    "x25519_speedup_vs_ffdh2048": ("Key exchange, X25519 vs ffdhe2048 (x, median)", "{:.1f}x"),
    "psi_exponent": ("PSI time vs set size, fitted exponent (ours)", "{:.2f}"),
    "secureboost_speedup_vs_plain": ("SecureBoost time per tree, straightforward protocol / ours, equal rows (x)",
                                     "{:.1f}x"),
    "secureboost_fraction_of_crypto_floor": ("SecureBoost time per tree / its crypto floor (goal <= 1.25)", "{:.2f}"),
    "secureboost_ratio_to_xgboost": ("SecureBoost training / XGBoost hist on the joined table (x)", "{:,.0f}x"),
}


def headline(results: Results) -> dict[str, Any]:
    """The few ratios worth a line in the README, from the figures (medians).

    A privacy option's overhead enters only when it was measured: its 95 % interval lies above zero
    for wall or CPU time and below zero for neither (:func:`overhead_entry`). Its value is then a
    mapping ``{"wall": Difference dict | None, "cpu": ...}`` (per cent of the none run's epoch).
    """
    f = results.figures
    out: dict[str, Any] = {}
    sizes = sorted(int(k.split(".")[2]) for k in f if k.startswith("primitives.psi.") and k.endswith(".ours_s"))
    if sizes:
        n = sizes[-1]
        if f"primitives.psi.{n}.speedup_vs_openmined" in f:
            out["psi_speedup_vs_openmined"] = f[f"primitives.psi.{n}.speedup_vs_openmined"].median
        out["psi_fraction_of_floor"] = f[f"primitives.psi.{n}.fraction_of_floor"].median
        if f"primitives.psi.{n}.fraction_of_protocol_floor" in f:
            out["psi_fraction_of_protocol_floor"] = f[f"primitives.psi.{n}.fraction_of_protocol_floor"].median
    pairs = {"paillier_encrypt_fast_vs_phe": "primitives.paillier.encrypt.fast_vs_phe",
             "paillier_encrypt_packed_vs_phe": "primitives.paillier.encrypt.packed_vs_phe",
             "paillier_decrypt_fast_vs_phe": "primitives.paillier.decrypt.fast_vs_phe",
             "paillier_decrypt_packed_vs_phe": "primitives.paillier.decrypt.packed_vs_phe",
             "mask_speedup_vs_flower": "primitives.mask.speedup_vs_flower",
             "aes_ctr_gb_per_s": "primitives.mask.aes_ctr_gb_per_s",
             "x25519_speedup_vs_ffdh2048": "primitives.key_agreement.x25519_speedup_vs_ffdh2048",
             "secureboost_speedup_vs_plain": "secureboost.speedup_vs_plain_secureboost",
             "secureboost_fraction_of_crypto_floor": "secureboost.fraction_of_crypto_floor",
             "secureboost_ratio_to_xgboost": "secureboost.ratio_to_xgboost"}
    out.update({k: f[v].median for k, v in pairs.items() if v in f})
    for s in results.sections:
        if s.key == "scaling" and s.data.get("psi_exponents", {}).get("psi_ours") is not None:
            out["psi_exponent"] = s.data["psi_exponents"]["psi_ours"]
        if s.key == "methods":
            for r in s.data.get("runs", []):
                entry = overhead_entry(r) if r.get("status") == "ok" and r["privacy"] != "none" else None
                if entry is not None:
                    out[f"overhead_pct_{r['method']}_{r['privacy']}"] = entry
    return out


def overhead_entry(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A methods row's overhead for the headline, or None when it is not a measured overhead.

    Measured: the interval of the wall or the CPU overhead lies above zero, and neither lies below
    zero (a privacy option only adds work; a reliably negative overhead is load, an artefact).
    """
    from securevfl.bench.methods import overhead_of

    parts = {"wall": overhead_of(dict(row)), "cpu": overhead_of(dict(row), cpu=True)}
    verdicts = {d.verdict for d in parts.values() if d is not None}
    if stats.ABOVE not in verdicts or stats.BELOW in verdicts:
        return None
    return {k: d.to_dict() if d is not None else None for k, d in parts.items()}


def _overhead_line(key: str, value: Any) -> str | None:
    """The headline sentence of an overhead; None unless an interval shows it above zero (never a negative one)."""
    if not isinstance(value, Mapping):  # an older results.json: a bare number without an interval
        return None
    try:
        parts = {k: stats.Difference.from_dict(v) for k, v in value.items() if isinstance(v, Mapping)}
    except (KeyError, TypeError, ValueError):
        return None
    verdicts = {d.verdict for d in parts.values()}
    if stats.ABOVE not in verdicts or stats.BELOW in verdicts:
        return None
    if any(d.verdict == stats.ABOVE and not 0 < d.low <= d.estimate for d in parts.values()):
        return None  # an "above" whose numbers disagree: not trusted with a headline
    method, option = key[len("overhead_pct_"):].rsplit("_", 1)
    said = []
    for kind, label in (("wall", "wall"), ("cpu", "CPU")):
        d = parts.get(kind)
        if d is None:
            continue
        said.append(f"{label} {d.estimate:+.1f} % [{d.low:+.1f}, {d.high:+.1f}]" if d.verdict == stats.ABOVE
                    else f"{label} within noise")
    return f"{method} with secagg={option}: epoch time over none: {', '.join(said)} (95 % intervals)"


def headline_lines(values: Mapping[str, Any]) -> list[str]:
    """One sentence per headline figure; an overhead only when its interval lies above zero."""
    lines = []
    for key, value in values.items():
        if key in HEADLINE_LABELS:
            label, fmt = HEADLINE_LABELS[key]
            lines.append(f"{label}: {fmt.format(value)}")
        elif key.startswith("overhead_pct_"):
            line = _overhead_line(key, value)
            if line is not None:
                lines.append(line)
    return lines


def _environment_rows(env: Mapping[str, Any]) -> list[tuple[str, str]]:
    acc = env.get("accelerator", {})
    rows = [("CPU", f"{env.get('cpu_model')} ({', '.join(env.get('cpu_flags', [])) or 'flags unknown'})"),
            ("cores (logical / physical)", f"{env.get('cores_logical')} / {env.get('cores_physical')}"),
            ("memory (GiB)",
             f"{env.get('memory_gib')} ({env.get('memory_available_gib_at_start')} available at start)"),
            ("platform", str(env.get("platform"))),
            ("model compute on", f"{acc.get('model_compute_on')} (asked: {acc.get('requested')}; torch threads "
                                 f"{acc.get('torch_threads')})"),
            ("CUDA", f"{acc['cuda_device']}, {acc['cuda_memory_gib']} GiB, CUDA {acc['cuda_runtime']}"
             if acc.get("cuda_device") else "no CUDA device"),
            ("load average, 1 min (start / end)",
             f"{env.get('load_average_1m_start', 0):.2f} / {env.get('load_average_1m_end', 0):.2f}"),
            ("started / finished", f"{env.get('started_at')} / {env.get('finished_at')}")]
    rows += [(f"version: {k}", v) for k, v in env.get("versions", {}).items()]
    return rows


def environment_table(env: Mapping[str, Any]) -> dict[str, Any]:
    """The environment as a two-column table (what, value)."""
    return {"title": "Machine and libraries", "columns": ["what", "value"],
            "rows": [list(r) for r in _environment_rows(env)], "note": ""}


# ------------------------------------------------------------------------------------ Markdown
def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


#: Tables longer than this fold in the HTML report (under ``<details>``) even without ``fold``.
FOLD_ROWS = 25


def folds(t: Mapping[str, Any]) -> bool:
    """Whether the HTML report folds table ``t`` (its ``fold`` flag, or more than :data:`FOLD_ROWS` rows)."""
    return bool(t.get("fold")) or len(t["rows"]) > FOLD_ROWS


def _summary(t: Mapping[str, Any]) -> str:
    return str(t.get("summary") or f"{len(t['rows'])} rows")


def _md_table(t: Mapping[str, Any]) -> list[str]:
    lines = [f"**{t['title']}**", ""]
    if folds(t):
        lines += [f"_{_summary(t)}_", ""]
    lines += ["| " + " | ".join(map(_md_cell, t["columns"])) + " |",
             "|" + "---|" * len(t["columns"])]
    lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in t["rows"]]
    if t.get("note"):
        lines += ["", f"_{t['note']}_"]
    return lines + [""]


def to_markdown(data: Mapping[str, Any]) -> str:
    """``report.md`` from the results dictionary (images by file name, next to it)."""
    env = data["environment"]
    cfg = data["config"]
    lines = ["# securevfl bench", "",
             f"Size `{cfg['size']}`, {data['wall_s']:.1f} s wall; {env.get('cpu_model')}, {env.get('cores_logical')} "
             f"cores; started {env.get('started_at')}.", ""]
    if env.get("warning"):
        lines += [f"> **Warning:** {env['warning']}", ""]
    if data.get("headline"):
        lines += ["## Headline", ""] + [f"- {line}" for line in headline_lines(data["headline"])] + [""]
    for s in data["sections"].values():
        lines += [f"## {s['title']}", "", _strip_roles(s["text"]).strip(), ""]
        for t in s["tables"]:
            lines += _md_table(t)
        for img in s["images"]:
            lines += [f"![{img['caption']}]({img['file']})", "", f"_{img['caption']}_", ""]
        lines += [f"- {n}" for n in s["notes"]] + ([""] if s["notes"] else [])
    lines += ["## Reproduce", "", f"`{cfg.get('command', 'securevfl bench')}`; every figure's repetitions, minimum "
              "and median are in `results.json`; `securevfl bench compare OLD/results.json NEW/results.json` compares "
              "two runs.", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.88em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:right;vertical-align:top}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
caption{font-weight:bold;text-align:left;padding:.3em 0}
img{max-width:100%;border:1px solid #ddd}.warn{background:#fff3cd;border:1px solid #e0c060;padding:.6em 1em}
code{background:#f4f4f4;padding:0 .2em}.note{font-style:italic;color:#555}
details{margin:.4em 0 1em;border:1px solid #ddd;padding:.3em .6em}summary{cursor:pointer}
summary b{margin-right:.5em}
"""


def _inline(text: str) -> str:
    """Escape, then ``code`` / `code` spans, **bold** and *italic* (the docstrings' markup)."""
    out = html.escape(_strip_roles(text))
    out = re.sub(r"``(.+?)``", r"<code>\1</code>", out)
    out = re.sub(r"`(.+?)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"\*(\S.*?)\*", r"<i>\1</i>", out)


def _strip_roles(text: str) -> str:
    """Sphinx roles (``:func:`x` ``) read as plain code spans outside Sphinx."""
    return re.sub(r":(?:func|meth|mod|class|data|attr):`~?", "`", text)


def _html_text(text: str) -> str:
    parts = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines()]
        if lines and lines[0].startswith("* "):
            items, cur = [], ""
            for ln in lines:
                if ln.startswith("* "):
                    if cur:
                        items.append(cur)
                    cur = ln[2:]
                else:
                    cur += " " + ln
            items.append(cur)
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        elif block.strip():
            parts.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(parts)


def _html_table(t: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t["columns"])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in t["rows"])
    note = f"<p class='note'>{_inline(t['note'])}</p>" if t.get("note") else ""
    return f"<table><caption>{html.escape(t['title'])}</caption><tr>{head}</tr>{body}</table>{note}"


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def to_html(data: Mapping[str, Any], out_dir: Path) -> str:
    """``report.html``: one page, PNGs from ``out_dir`` embedded as data URIs, no JavaScript."""
    env = data["environment"]
    cfg = data["config"]
    body = [f"<h1>securevfl bench</h1><p>Size <code>{html.escape(cfg['size'])}</code>, {data['wall_s']:.1f} s wall; "
            f"{html.escape(str(env.get('cpu_model')))}, {env.get('cores_logical')} cores; started "
            f"{html.escape(str(env.get('started_at')))}.</p>"]
    if env.get("warning"):
        body.append(f"<p class='warn'><b>Warning:</b> {html.escape(env['warning'])}</p>")
    if data.get("headline"):
        body.append("<h2>Headline</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>"
                                                      for x in headline_lines(data["headline"])) + "</ul>")
    for s in data["sections"].values():
        body.append(f"<h2>{html.escape(s['title'])}</h2>")
        body.append(_html_text(s["text"]))
        body += [_html_table(t) for t in s["tables"] if not folds(t)]
        for img in s["images"]:
            body.append(f"<figure><img src='{_data_uri(out_dir / img['file'])}' alt='{html.escape(img['caption'])}'>"
                        f"<figcaption class='note'>{html.escape(img['caption'])}</figcaption></figure>")
        body += [f"<details><summary><b>{html.escape(t['title'])}</b>{html.escape(_summary(t))}</summary>"
                 f"{_html_table(t)}</details>" for t in s["tables"] if folds(t)]
        if s["notes"]:
            body.append("<ul>" + "".join(f"<li>{_inline(n)}</li>" for n in s["notes"]) + "</ul>")
    body.append(f"<h2>Reproduce</h2><p><code>{html.escape(cfg.get('command', 'securevfl bench'))}</code>; every "
                "figure's repetitions, minimum and median are in <code>results.json</code>.</p>")
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>securevfl bench</title>"
            f"<style>{_CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")


def write(results: Results, out_dir: Path) -> dict[str, Path]:
    """Write results.json, report.md and report.html into ``out_dir`` (the PNGs are already there)."""
    data = results.to_dict()
    paths = {"json": out_dir / "results.json", "md": out_dir / "report.md", "html": out_dir / "report.html"}
    atomic.write_text(paths["json"], results.to_json())
    atomic.write_text(paths["md"], to_markdown(data))
    atomic.write_text(paths["html"], to_html(data, out_dir))
    return paths
