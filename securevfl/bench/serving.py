"""Online scoring under load: closed-loop async clients against three ``securevfl party --serve`` processes.

Shared by ``benchmarks/serving.py`` (the full load benchmark: :func:`run_benchmark`, :func:`print_tables`)
and the ``predict`` section of ``securevfl bench`` (:func:`measure_online`: a few cells on a few
thousand rows).

On **generated data** (:mod:`securevfl.bench.predict`: 30 Gaussian columns split 10/10/10 over
``bank`` (active, binary label), ``shop`` and ``clinic``; every party holds the same N IDs), a SplitNN
model is trained on 5,000 other generated rows (one epoch) and saved. The three parties then serve it
as three ``securevfl party --serve`` processes over **mutual TLS** on loopback (a development PKI,
:func:`securevfl.deploy.certs.make_dev_pki`; one torch thread each), each holding the N rows
(``--quick``: 20,000; default 100,000), with :func:`securevfl.bench.predict.serving_parties`.

The passive parties run with **no membership budget** (``--max-ids-per-minute 0
--max-ids-per-session 0``): this measures throughput, which the default budget (6,000 IDs per minute)
would cap at 100 one-row requests/s. A separate small session with the default budget shows a flood
being refused (the count of HTTP 429 answers).

The load: an asyncio client in this process (raw HTTP/1.1 keep-alive connections, no dependency),
1, 8 and 32 concurrent **closed-loop** clients (each sends its next request when the previous one is
answered) posting requests of 1 and of 100 random IDs the parties hold to the active party's plain
HTTP endpoint on 127.0.0.1. Each cell runs a warm-up, then ``--duration`` seconds (``--quick``: 5;
default 20); the figures count the answers that arrived in that window: requests/s, rows/s, p50 and
p99 of the round trip (ms), errors (answers other than 200, broken connections, a wrong number of
predictions). ``batch_rows_mean``: the server's own histogram (``GET /metrics``,
``securevfl_serve_batch_rows``) of rows per scored batch over the cell: above the rows per request
means requests were scored together (micro-batching).

Peers compared in the same run:

* ``floor_ms``: the same weights as a plain torch forward pass of 1 and 100 encoded rows in this
  process (:func:`securevfl.bench.predict.forward_floor_ms`: no network, lookup or encoding);
  ``ratio_to_floor`` = the p50 of 1 client, 1 row / the one-row floor;
* ``batching_gain``: requests/s at the most clients (32), one row, with the default batch wait
  (2 ms) / the same cell on a service started with ``--batch-wait-ms 0`` (each request scored alone
  unless requests are already waiting);
* ``tls_token_one_row``: 1 client, 1 row against an HTTPS endpoint (``--serve-tls``, the party's
  federation certificate) with a bearer token (``--serve-token-file``), beside the plain cell.

Goals (a verdict line each, never a failure): at 1 client, one-row p50 < 10 ms and p99 < 25 ms; at
32 clients, one-row >= 300 requests/s with p99 < 50 ms. The load generator shares the machine's
cores with the three party processes (on a 2-core machine it takes a noticeable share at 32 clients).

``securevfl bench`` (:func:`measure_online`) runs a subset: the same three processes over mutual TLS
with no membership budget, the cells 1 and 8 clients of one-row requests and 1 client of 100 rows,
the floor, and (``full`` only) 8 clients x 1 row with ``--batch-wait-ms 0``; no TLS-token cell and no
budget flood.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NO_BUDGET = ("--max-ids-per-minute", "0", "--max-ids-per-session", "0")
DEFAULT_BATCH_WAIT_MS = 2.0
#: Seconds one request may take before the client counts it as an error and reconnects.
REQUEST_TIMEOUT_S = 30.0
GOALS = {"one_client_p50_ms": 10.0, "one_client_p99_ms": 25.0, "many_clients_requests_per_s": 300.0,
         "many_clients_p99_ms": 50.0}


@dataclass(frozen=True)
class ServingBenchConfig:
    """What one run measures (the ``--`` options)."""

    rows: int = 100_000
    train_rows: int = 5000
    clients: tuple[int, ...] = (1, 8, 32)
    sizes: tuple[int, ...] = (1, 100)
    duration_s: float = 20.0
    warmup_s: float = 2.0
    batch_wait_ms: float = DEFAULT_BATCH_WAIT_MS
    tls: bool = True
    budget_check: bool = True
    budget_flood_s: float = 3.0
    timeout_s: float = 600.0


# --------------------------------------------------------------------------------------- the load generator


@dataclass
class Target:
    """Where the clients connect: host, port, TLS context (and the name its certificate must carry), headers."""

    host: str
    port: int
    context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    headers: str = ""

    @classmethod
    def of(cls, url: str, context: ssl.SSLContext | None = None, server_hostname: str | None = None,
           token: str | None = None) -> Target:
        """The target of an endpoint URL (``http://127.0.0.1:PORT``), optionally with a bearer token."""
        parts = urlsplit(url)
        headers = f"Authorization: Bearer {token}\r\n" if token else ""
        return cls(parts.hostname or "127.0.0.1", int(parts.port or 80), context, server_hostname, headers)


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, the server closes the connection) of one HTTP/1.1 answer with a Content-Length."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("the server closed the connection")
    status = int(line.split(b" ", 2)[1])
    length, close = 0, False
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    return status, await reader.readexactly(length), close


async def _closed_loop(target: Target, bodies: Sequence[bytes], rows: int, start_at: float, stop_at: float,
                       rng: random.Random, records: list[tuple[float, float, int]]) -> None:
    """One client: post a request, wait for its answer, post the next, until ``stop_at`` (perf_counter).

    Appends (sent, answered, status) per request; status 0: a broken connection, a timeout or an
    answer without ``rows`` predictions.
    """
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    head = (f"POST /score HTTP/1.1\r\nHost: {target.host}\r\nContent-Type: application/json\r\n"
            f"{target.headers}Content-Length: ").encode()
    try:
        while time.perf_counter() < stop_at:
            if writer is None:
                reader, writer = await asyncio.open_connection(target.host, target.port, ssl=target.context,
                                                               server_hostname=target.server_hostname
                                                               if target.context else None)
            assert reader is not None
            body = bodies[rng.randrange(len(bodies))]
            sent = time.perf_counter()
            status = 0
            close = True
            try:
                writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
                status, answer, close = await asyncio.wait_for(_read_answer(reader), REQUEST_TIMEOUT_S)
                if status == 200 and len(json.loads(answer)["predictions"]) != rows:
                    status = 0
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
                status, close = 0, True
            records.append((sent, time.perf_counter(), status))
            if close:
                writer.close()
                writer = reader = None
    finally:
        if writer is not None:
            writer.close()


def _bodies(ids: Sequence[str], rows: int, count: int, seed: int) -> list[bytes]:
    """``count`` request bodies of ``rows`` distinct random IDs among ``ids``."""
    rng = random.Random(seed)
    return [json.dumps({"rows": [{"customer_id": i} for i in rng.sample(ids, rows)]}).encode()
            for _ in range(count)]


def run_load(target: Target, ids: Sequence[str], *, clients: int, rows: int, duration_s: float, warmup_s: float,
             seed: int = 0) -> dict[str, Any]:
    """``clients`` closed-loop clients for ``warmup_s`` + ``duration_s``; the figures of the answers in the window."""
    import numpy as np

    bodies = _bodies(ids, rows, 512 if rows > 1 else 4096, seed)
    records: list[tuple[float, float, int]] = []

    async def main() -> None:
        start = time.perf_counter()
        stop = start + warmup_s + duration_s
        await asyncio.gather(*(_closed_loop(target, bodies, rows, start, stop, random.Random(seed * 1000 + c),
                                            records) for c in range(clients)))

    started = time.perf_counter()
    asyncio.run(main())
    window_start, window_end = started + warmup_s, started + warmup_s + duration_s
    counted = [r for r in records if window_start <= r[1] <= window_end]
    ok = [(done - sent) * 1e3 for sent, done, status in counted if status == 200]
    statuses = Counter(status for _, _, status in counted)
    p50, p99 = (np.percentile(ok, [50, 99]) if ok else (float("nan"), float("nan")))
    return {"clients": clients, "rows_per_request": rows, "requests_per_s": len(ok) / duration_s,
            "rows_per_s": len(ok) * rows / duration_s, "p50_ms": float(p50), "p99_ms": float(p99),
            "mean_ms": float(np.mean(ok)) if ok else float("nan"), "requests": len(ok),
            "errors": len(counted) - len(ok), "statuses": {str(k): v for k, v in sorted(statuses.items())}}


# --------------------------------------------------------------------------------------- the server's metrics


def scrape_metrics(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> dict[str, float]:
    """``GET /metrics`` of the endpoint: every sample without labels, and labelled ones as ``name{labels}``."""
    import urllib.request

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{url}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def batch_rows_mean(before: dict[str, float], after: dict[str, float]) -> float:
    """The mean rows per scored batch between two scrapes (the ``securevfl_serve_batch_rows`` histogram)."""
    key = "securevfl_serve_batch_rows"
    count = after.get(f"{key}_count", 0.0) - before.get(f"{key}_count", 0.0)
    total = after.get(f"{key}_sum", 0.0) - before.get(f"{key}_sum", 0.0)
    return total / count if count else float("nan")


def measured_cell(url: str, target: Target, ids: Sequence[str], *, clients: int, rows: int, config: ServingBenchConfig,
                  batch_wait_ms: float, context: ssl.SSLContext | None = None, token: str | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """One cell of load, with the server's mean rows per batch over it."""
    before = scrape_metrics(url, context, token)
    cell = run_load(target, ids, clients=clients, rows=rows, duration_s=config.duration_s,
                    warmup_s=config.warmup_s, seed=seed)
    cell["batch_rows_mean"] = batch_rows_mean(before, scrape_metrics(url, context, token))
    cell["batch_wait_ms"] = batch_wait_ms
    return cell


# --------------------------------------------------------------------------------------- the benchmark


def _write_token(path: Path) -> str:
    """A fresh bearer token in ``path`` (mode 600, as the endpoint requires)."""
    token = secrets.token_hex(24)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token


def _goals(cells: list[dict[str, Any]], many: int) -> dict[str, Any]:
    """The issue's goals: each figure, its bound and whether it is met (None: the cell was not run)."""
    one = next((c for c in cells if c["clients"] == 1 and c["rows_per_request"] == 1
                and c["batch_wait_ms"] == DEFAULT_BATCH_WAIT_MS), None)
    top = next((c for c in cells if c["clients"] == many and c["rows_per_request"] == 1
                and c["batch_wait_ms"] == DEFAULT_BATCH_WAIT_MS), None)
    out: dict[str, Any] = {}
    for key, cell, figure, below in (("one_client_p50_ms", one, "p50_ms", True),
                                     ("one_client_p99_ms", one, "p99_ms", True),
                                     (f"clients_{many}_requests_per_s", top, "requests_per_s", False),
                                     (f"clients_{many}_p99_ms", top, "p99_ms", True)):
        bound = GOALS[key.replace(f"clients_{many}", "many_clients")]
        value = None if cell is None else cell[figure]
        met = None if value is None else (value < bound if below else value >= bound)
        out[key] = {"value": value, "bound": bound, "below" if below else "at_least": True, "met": met}
    return out


def run_benchmark(config: ServingBenchConfig, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Train, serve, load: every cell, the peers (floor, batch wait 0, TLS + token) and the budget check."""
    import pandas as pd
    import torch

    from securevfl.bench import environment
    from securevfl.bench import predict as bp

    torch.set_num_threads(1)
    started = time.perf_counter()
    load_start = environment.load_average()
    log(f"generating {config.rows:,} rows per party and {config.train_rows:,} training rows")
    train_files = bp.generate(work / "train", config.train_rows, seed=1)
    files = bp.generate(work / "serve", config.rows, seed=2)
    model_dir = work / "model-splitnn"
    log("training SplitNN (one epoch)")
    train_s = bp.train_model(train_files, "splitnn", model_dir)
    floor = bp.forward_floor_ms(model_dir, files, sizes=tuple(sorted({1, *config.sizes})))
    ids = pd.read_csv(files["bank"], usecols=["customer_id"]).customer_id.astype(str).tolist()
    many = max(config.clients)
    wait = ("--batch-wait-ms", f"{config.batch_wait_ms:g}")
    out: dict[str, Any] = {"config": {**asdict(config), "method": "splitnn", "train_s": train_s,
                                      "parties": list(bp.PARTIES), "active": "bank",
                                      "passive_budget": "none (--max-ids-per-minute 0 --max-ids-per-session 0)",
                                      "links": "gRPC over mutual TLS (development PKI), 127.0.0.1",
                                      "endpoint": "plain HTTP/1.1 keep-alive on 127.0.0.1 (TLS: tls_token_one_row)",
                                      "client": "asyncio closed-loop clients in the benchmark process",
                                      "threads_per_party": 1, "cpu_count": os.cpu_count()},
                           "cells": [], "setup_s": {}}
    cells: list[dict[str, Any]] = out["cells"]
    seed = 0

    log(f"serving {config.rows:,} rows per party (batch wait {config.batch_wait_ms:g} ms, no budget)")
    with bp.serving_parties(work, model_dir, files, name="load", active_args=wait, passive_args=NO_BUDGET,
                            timeout=config.timeout_s) as served:
        out["setup_s"]["load"] = served.setup_s
        target = Target.of(served.url)
        for rows in config.sizes:
            for clients in config.clients:
                seed += 1
                cell = measured_cell(served.url, target, ids, clients=clients, rows=rows, config=config,
                                     batch_wait_ms=config.batch_wait_ms, seed=seed)
                cells.append(cell)
                log(f"  {clients:>3} clients x {rows:>3} rows: {cell['requests_per_s']:8.1f} req/s, p50 "
                    f"{cell['p50_ms']:.2f} ms, p99 {cell['p99_ms']:.2f} ms, errors {cell['errors']}, "
                    f"{cell['batch_rows_mean']:.1f} rows/batch")
        final = scrape_metrics(served.url)
    out["batch_rows_mean"] = batch_rows_mean({}, final)
    out["server_requests"] = {k.split('"')[1]: v for k, v in final.items()
                              if k.startswith("securevfl_serve_requests_total{")}
    out["exit_codes"] = {"load": served.exit_codes}

    log(f"the same service with --batch-wait-ms 0: {many} clients x 1 row")
    with bp.serving_parties(work, model_dir, files, name="nowait", active_args=("--batch-wait-ms", "0"),
                            passive_args=NO_BUDGET, timeout=config.timeout_s) as served:
        out["setup_s"]["nowait"] = served.setup_s
        cell = measured_cell(served.url, Target.of(served.url), ids, clients=many, rows=1, config=config,
                             batch_wait_ms=0.0, seed=seed + 1)
        cells.append(cell)
        log(f"  {many:>3} clients x   1 row, batch wait 0: {cell['requests_per_s']:8.1f} req/s, p99 "
            f"{cell['p99_ms']:.2f} ms, errors {cell['errors']}")
    out["exit_codes"]["nowait"] = served.exit_codes

    if config.tls:
        log("HTTPS (--serve-tls) with a bearer token: 1 client x 1 row")
        token = _write_token(work / "serve-token")
        with bp.serving_parties(work, model_dir, files, name="tls",
                                active_args=(*wait, "--serve-tls", "--serve-token-file", str(work / "serve-token")),
                                passive_args=NO_BUDGET, timeout=config.timeout_s,
                                health_headers={}) as served:
            out["setup_s"]["tls"] = served.setup_s
            context = ssl.create_default_context(cafile=str(served.certs / "ca.pem"))  # verifies the name "bank"
            target = Target.of(served.url, context, server_hostname="bank", token=token)
            metrics_context = served.client_context()
            tls = measured_cell(served.url, target, ids, clients=1, rows=1, config=config,
                                batch_wait_ms=config.batch_wait_ms, context=metrics_context, token=token,
                                seed=seed + 2)
        out["exit_codes"]["tls"] = served.exit_codes
        plain = next(c for c in cells if c["clients"] == 1 and c["rows_per_request"] == 1) \
            if 1 in config.clients and 1 in config.sizes else None
        tls["transport"] = "HTTPS (the party's federation certificate, ECDSA P-256) + bearer token, keep-alive"
        if plain:
            tls["p50_vs_plain"] = tls["p50_ms"] / plain["p50_ms"]
        out["tls_token_one_row"] = tls
        log(f"  TLS + token: p50 {tls['p50_ms']:.2f} ms, p99 {tls['p99_ms']:.2f} ms, errors {tls['errors']}")
    else:
        out["tls_token_one_row"] = {"status": "not run (--no-tls)"}

    if config.budget_check:
        small = bp.generate(work / "budget", 2000, seed=3)
        small_ids = pd.read_csv(small["bank"], usecols=["customer_id"]).customer_id.astype(str).tolist()
        log(f"the default membership budget: a flood of {many} clients x 100 rows for {config.budget_flood_s:g} s")
        with bp.serving_parties(work, model_dir, small, name="budget", active_args=wait,
                                timeout=config.timeout_s) as served:
            flood = run_load(Target.of(served.url), small_ids, clients=many, rows=min(100, len(small_ids)),
                             duration_s=config.budget_flood_s, warmup_s=0.0, seed=seed + 3)
            refusals = scrape_metrics(served.url)
        out["exit_codes"]["budget"] = served.exit_codes
        out["budget_flood"] = {"clients": many, "rows_per_request": flood["rows_per_request"],
                               "seconds": config.budget_flood_s, "statuses": flood["statuses"],
                               "answered_200": flood["statuses"].get("200", 0),
                               "refused_429": flood["statuses"].get("429", 0),
                               "peer_refusals": {k.split('"')[1]: v for k, v in refusals.items()
                                                 if k.startswith("securevfl_serve_peer_refusals_total{")},
                               "budget": "passive parties' defaults: 6,000 IDs per minute, 1,000,000 per session"}
        log(f"  flood: {out['budget_flood']['answered_200']} answered, {out['budget_flood']['refused_429']} "
            "refused with 429")
    else:
        out["budget_flood"] = {"status": "not run (--no-budget-check)"}

    one = next((c for c in cells if c["clients"] == 1 and c["rows_per_request"] == 1), None)
    top = next((c for c in cells if c["clients"] == many and c["rows_per_request"] == 1
                and c["batch_wait_ms"] == config.batch_wait_ms), None)
    nowait = cells[-1]
    out["floor_ms"] = floor
    out["ratio_to_floor"] = one["p50_ms"] / floor["1"] if one else None
    out["batching_gain"] = top["requests_per_s"] / nowait["requests_per_s"] if top and nowait["requests_per_s"] \
        else None
    out["batching_gain_clients"] = many
    out["goals"] = _goals(cells, many)
    out["machine"] = {"load_1m_start": round(load_start, 2), "load_1m_end": round(environment.load_average(), 2),
                      "cpu_count": os.cpu_count()}
    out["wall_s"] = time.perf_counter() - started
    return out


def print_tables(figures: dict[str, Any]) -> None:
    """The cells, the peers and the goals of :func:`run_benchmark`, as rich tables and verdict lines."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=140)
    c = figures["config"]
    table = Table(title=f"online scoring under load: SplitNN, 3 `party --serve` processes over mutual TLS, "
                        f"{c['rows']:,} rows per party, passive parties without a membership budget; "
                        f"{c['duration_s']:g} s per cell after {c['warmup_s']:g} s warm-up")
    for col in ("batch wait ms", "clients", "rows/request", "requests/s", "rows/s", "p50 ms", "p99 ms", "errors",
                "rows/batch (server)"):
        table.add_column(col, justify="right")
    for cell in figures["cells"]:
        table.add_row(f"{cell['batch_wait_ms']:g}", str(cell["clients"]), str(cell["rows_per_request"]),
                      f"{cell['requests_per_s']:,.1f}", f"{cell['rows_per_s']:,.0f}", f"{cell['p50_ms']:.2f}",
                      f"{cell['p99_ms']:.2f}", str(cell["errors"]), f"{cell['batch_rows_mean']:.1f}")
    tls = figures["tls_token_one_row"]
    if "p50_ms" in tls:
        table.add_row(f"{tls['batch_wait_ms']:g}", "1 (HTTPS+token)", "1", f"{tls['requests_per_s']:,.1f}",
                      f"{tls['rows_per_s']:,.0f}", f"{tls['p50_ms']:.2f}", f"{tls['p99_ms']:.2f}", str(tls["errors"]),
                      f"{tls['batch_rows_mean']:.1f}")
    console.print(table)
    floor = figures["floor_ms"]
    console.print("floor (plain torch forward pass, same weights, this process): "
                  + ", ".join(f"{k} row(s) {v:.3f} ms" for k, v in floor.items())
                  + (f"; 1 client x 1 row p50 / floor = {figures['ratio_to_floor']:.0f}x"
                     if figures["ratio_to_floor"] else ""))
    if figures["batching_gain"]:
        console.print(f"batching gain at {figures['batching_gain_clients']} clients x 1 row (batch wait "
                      f"{c['batch_wait_ms']:g} ms vs 0): {figures['batching_gain']:.2f}x requests/s; "
                      f"server's mean rows per batch over the loaded session: {figures['batch_rows_mean']:.1f}")
    if "p50_vs_plain" in tls:
        console.print(f"HTTPS + bearer token, 1 client x 1 row: p50 {tls['p50_ms']:.2f} ms = "
                      f"{tls['p50_vs_plain']:.2f}x the plain endpoint's")
    flood = figures["budget_flood"]
    if "refused_429" in flood:
        console.print(f"default membership budget ({flood['budget']}): a flood of {flood['clients']} clients x "
                      f"{flood['rows_per_request']} rows for {flood['seconds']:g} s: {flood['answered_200']} answered, "
                      f"{flood['refused_429']} refused with 429 (peer refusals {flood['peer_refusals']})")
    for key, goal in figures["goals"].items():
        sign = "<" if goal.get("below") else ">="
        verdict = "not run" if goal["met"] is None else "met" if goal["met"] else "MISSED"
        value = "-" if goal["value"] is None else f"{goal['value']:.2f}"
        console.print(f"goal {key} {sign} {goal['bound']:g}: {value} -> {verdict}")
    m = figures["machine"]
    console.print(f"{m['cpu_count']} cores; load average (1 min) {m['load_1m_start']} at the start, "
                  f"{m['load_1m_end']} at the end; set-up (s): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in figures["setup_s"].items())
                  + f"; exit codes {figures['exit_codes']}; wall {figures['wall_s']:.0f} s")


# --------------------------------------------------------------------------------------- the bench section

#: (clients, rows per request) of :func:`measure_online`'s cells at the default batch wait.
ONLINE_CELLS: tuple[tuple[int, int], ...] = ((1, 1), (8, 1), (1, 100))


def measure_online(directory: Path, *, rows: int, duration_s: float, warmup_s: float = 1.0,
                   cells: Sequence[tuple[int, int]] = ONLINE_CELLS, nowait: bool = False,
                   model_dir: Path | None = None, timeout_s: float = 300.0,
                   tick: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A few cells of closed-loop load on ``rows`` generated rows per party (the ``predict`` section's online part).

    Serves ``model_dir`` (a SplitNN model saved by :func:`securevfl.bench.predict.train_model`; None:
    one is trained on generated rows first) with three ``party --serve`` processes over mutual TLS,
    passive parties without a membership budget, and loads it with each ``(clients, rows per
    request)`` of ``cells``; with ``nowait``, the most clients x 1 row again on a service started with
    ``--batch-wait-ms 0`` (``batching_gain``). ``ratio_to_floor``: 1 client x 1 row's p50 / the
    one-row plain torch forward pass. Raises what the service's set-up raises (a port taken, a party
    that exits).
    """
    import pandas as pd
    import torch

    from securevfl.bench import predict as bp

    note = tick or (lambda text: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    try:
        if model_dir is None:
            note("training a SplitNN model to serve")
            model_dir = directory / "model-splitnn"
            bp.train_model(bp.generate(directory / "train", max(500, min(5000, rows)), seed=1), "splitnn",
                           model_dir)
        files = bp.generate(directory / "serve", rows, seed=3)
        ids = pd.read_csv(files["bank"], usecols=["customer_id"]).customer_id.astype(str).tolist()
        config = ServingBenchConfig(rows=rows, clients=tuple(sorted({c for c, _ in cells})),
                                    sizes=tuple(sorted({r for _, r in cells})), duration_s=duration_s,
                                    warmup_s=warmup_s, tls=False, budget_check=False, timeout_s=timeout_s)
        floor = bp.forward_floor_ms(model_dir, files, sizes=tuple(sorted({1, *config.sizes})))
        wait = ("--batch-wait-ms", f"{config.batch_wait_ms:g}")
        out: dict[str, Any] = {"rows": rows, "duration_s": duration_s, "warmup_s": warmup_s, "method": "splitnn",
                               "cells": [], "setup_s": {}, "exit_codes": {}, "floor_ms": floor}
        measured: list[dict[str, Any]] = out["cells"]
        note(f"online scoring: 3 `party --serve` processes over mutual TLS, {rows:,} rows, {len(cells)} cells "
             f"of {duration_s:g} s")
        with bp.serving_parties(directory, model_dir, files, name="bench", active_args=wait,
                                passive_args=NO_BUDGET, timeout=timeout_s) as served:
            out["setup_s"]["load"] = served.setup_s
            target = Target.of(served.url)
            for seed, (clients, size) in enumerate(cells, start=1):
                measured.append(measured_cell(served.url, target, ids, clients=clients, rows=min(size, rows),
                                              config=config, batch_wait_ms=config.batch_wait_ms, seed=seed))
        out["exit_codes"]["load"] = served.exit_codes
        many = max(c for c, r in cells if r == 1) if any(r == 1 for _, r in cells) else 0
        if nowait and many:
            note(f"online scoring with --batch-wait-ms 0: {many} clients x 1 row")
            with bp.serving_parties(directory, model_dir, files, name="bench-nowait",
                                    active_args=("--batch-wait-ms", "0"), passive_args=NO_BUDGET,
                                    timeout=timeout_s) as served:
                out["setup_s"]["nowait"] = served.setup_s
                measured.append(measured_cell(served.url, Target.of(served.url), ids, clients=many, rows=1,
                                              config=config, batch_wait_ms=0.0, seed=len(cells) + 1))
            out["exit_codes"]["nowait"] = served.exit_codes
        one = next((c for c in measured if c["clients"] == 1 and c["rows_per_request"] == 1), None)
        top = next((c for c in measured if c["clients"] == many and c["rows_per_request"] == 1
                    and c["batch_wait_ms"] == config.batch_wait_ms), None)
        zero = next((c for c in measured if c["batch_wait_ms"] == 0.0), None)
        out["ratio_to_floor"] = one["p50_ms"] / floor["1"] if one and one["requests"] else None
        out["batching_gain"] = top["requests_per_s"] / zero["requests_per_s"] \
            if top and zero and zero["requests_per_s"] else None
        out["wall_s"] = time.perf_counter() - started
        return out
    finally:
        torch.set_num_threads(threads)
