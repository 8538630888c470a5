"""A passive party killed and restarted during ``party --serve``: requests sent, failed, latency before/during/after.

Three ``securevfl party --serve`` processes over mutual TLS on loopback (a development PKI) serve a
SplitNN model trained on every row (``require_all_parties=False``) on generated data
(:func:`securevfl.bench.predict.generate`: 30 columns split 10/10/10 over bank, shop and clinic).
Closed-loop clients post one-row requests the whole time; after ``--before`` seconds a passive party
(``--party``, clinic) is killed (``--signal kill``: SIGKILL, no goodbye; ``term``: SIGTERM, its ABORT
reaches the others), restarted ``--down`` seconds later, and the load goes on until ``--after`` seconds
after the active party's ``/health`` is ``ok`` again.

Per phase (``before``: until the kill; ``outage``: from the kill until ``/health`` is ``ok`` again;
``after``): requests answered, failed (anything but a 200 with one prediction), p50 / p99 round trip
(ms), and the share of answers scored with the killed party's part. Also: when ``/health`` first said
``degraded`` after the kill, and when ``ok`` again after the restart.

``--method hetero-lr`` (with its arbiter as a fourth process), ``secureboost`` or ``easter`` (DH
secure aggregation; with clinic down its session has one passive party left, too few to hide a sum,
so the bank scores alone until clinic is back) serves that method's model instead (trained on every
row; small test keys, as the figures are about the outage, not the cryptography). ``--coverage`` is
each passive party's share of the rows (default 1.0; hetero-lr 0.9: its stand-in for a party left
out, the absent bias, is learned only from rows that party does not hold).

Run: ``python tools/serving_outage.py [--rows 2000] [--method splitnn] [--out outage.json]``.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np


def _post(url: str, body: dict[str, Any], timeout: float = 30.0) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{url}/score", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {"error": exc.read().decode(errors="replace")}
    except OSError as exc:
        return 0, {"error": str(exc)}


def health(url: str) -> dict[str, Any]:
    """The active party's ``GET /health`` answer ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except OSError:
        return {}


class Load:
    """``clients`` closed-loop clients posting one-row requests of random IDs until stopped; every answer kept."""

    def __init__(self, url: str, ids: list[str], clients: int = 2, seed: int = 0) -> None:
        self.url, self.ids = url, ids
        self.records: list[dict[str, Any]] = []  # sent (monotonic), ms, status, ok, parties, left_out
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(random.Random(seed + i),), daemon=True)
                         for i in range(clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _client(self, rng: random.Random) -> None:
        while not self._stop.is_set():
            asked = rng.choice(self.ids)
            sent = time.monotonic()
            status, answer = _post(self.url, {"rows": [{"customer_id": asked}]})
            ms = (time.monotonic() - sent) * 1e3
            predictions = answer.get("predictions", [])
            ok = status == 200 and len(predictions) == 1 and str(predictions[0].get("customer_id")) == asked
            with self._lock:
                self.records.append({"sent": sent, "ms": ms, "status": status, "ok": ok,
                                     "parties": predictions[0].get("parties", "") if predictions else "",
                                     "left_out": answer.get("left_out", {}), "error": answer.get("error")})


def phase_figures(records: list[dict[str, Any]], party: str) -> dict[str, Any]:
    """Requests, failed, p50 / p99 (ms) and the share of answers with ``party``'s part, of ``records``."""
    ms = [r["ms"] for r in records]
    p50, p99 = (float(np.percentile(ms, q)) for q in (50, 99)) if ms else (float("nan"), float("nan"))
    return {"requests": len(records), "failed": sum(not r["ok"] for r in records), "p50_ms": round(p50, 2),
            "p99_ms": round(p99, 2), "max_ms": round(max(ms), 2) if ms else float("nan"),
            "with_party": round(sum(party in r["parties"].split("+") for r in records) / max(1, len(records)), 4)}


def _launch(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as handle:
        return subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)


#: method -> (its options for this tool, its data-less helper parties)
METHODS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "splitnn": ({}, ()),
    "hetero-lr": ({"key_bits": 1024, "insecure_allow_small_key": True}, ("arbiter",)),
    "secureboost": ({"trees": 5, "max_depth": 3, "key_bits": 1024, "insecure_allow_small_key": True}, ()),
    "easter": ({"secagg": "dh", "embedding_size": 16}, ()),
}


def run_outage(work: Path, *, rows: int = 2000, party: str = "clinic", before_s: float = 3.0,
               down_s: float = 3.0, after_s: float = 3.0, how: str = "kill", party_timeout_s: float = 0.5,
               clients: int = 2, restart: bool = True, timeout_s: float = 180.0,
               method: str = "splitnn", coverage: float | None = None) -> dict[str, Any]:
    """Serve, kill ``party``, restart it (``restart``), and measure each phase; every process stopped at the end."""
    import os

    import pandas as pd

    import securevfl
    from securevfl.bench import predict as bp
    from securevfl.deploy.certs import make_dev_pki
    from securevfl.federation.loopback import free_port

    work.mkdir(parents=True, exist_ok=True)
    files = bp.generate(work / "data", rows, seed=3)
    model = work / "model"
    options, helpers = METHODS[method]
    keep = (0.9 if method == "hetero-lr" else 1.0) if coverage is None else coverage
    if keep < 1.0:  # each passive party holds a share of the customers (its own random share)
        for i, p in enumerate(list(files)[1:]):
            frame = pd.read_csv(files[p])
            frame.sample(frac=keep, random_state=i).to_csv(files[p], index=False)
    securevfl.train(method, data_files={p: str(f) for p, f in files.items()}, id_column="customer_id",
                    label_column="label", batch_size=256, seed=0, device="cpu", model_dir=model, options=options,
                    require_all_parties=False, overwrite_model=True,
                    **({} if method == "secureboost" else {"epochs": 1}))
    ids = pd.read_csv(files["bank"], usecols=["customer_id"]).customer_id.astype(str).tolist()
    certs = work / "certs"
    make_dev_pki([*files, *helpers], certs, overwrite=True)
    blocks = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{free_port()}"'
                       + ("\ndata = false" if p in helpers else "") for p in (*files, *helpers))
    fed = work / "fed.toml"
    job_options = "".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items())  # TOML reads JSON scalars
    fed.write_text(bp.SERVING_FEDERATION.format(parties=blocks, certs=certs).replace(
        'method = "splitnn"', f'method = "{method}"') + ("\n[job.options]\n" + job_options if job_options else ""))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = {p: work / f"{p}.log" for p in (*files, *helpers)}
    commands = {p: [sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed), "--as", p, "--serve",
                    "--model-dir", str(model), "--data", str(files[p]), "--device", "cpu",
                    *(["--listen", f"127.0.0.1:{port}", "--party-timeout", f"{party_timeout_s:g}"] if p == "bank"
                      else ["--max-ids-per-minute", "0", "--max-ids-per-session", "0"])] for p in files}
    commands.update({h: [sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed), "--as", h,
                         "--serve", "--device", "cpu"] for h in helpers})
    procs = {p: _launch(commands[p], logs[p], env) for p in (*files, *helpers)}
    out: dict[str, Any] = {"method": method, "coverage": keep, "rows": rows, "party": party, "signal": how,
                           "party_timeout_s": party_timeout_s, "clients": clients}
    try:
        _wait(url, procs, logs, "ok", timeout_s)
        with Load(url, ids, clients) as load:
            time.sleep(before_s)
            killed = time.monotonic()
            procs[party].send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
            procs[party].wait(30)
            seen = _wait(url, {p: q for p, q in procs.items() if p != party}, logs, "degraded", 30.0)
            out["degraded_after_s"] = round(time.monotonic() - killed, 3)
            out["health_during"] = seen
            time.sleep(max(0.0, down_s - (time.monotonic() - killed)))
            back = killed
            if restart:
                procs[party] = _launch(commands[party], logs[party], env)
                _wait(url, procs, logs, "ok", timeout_s)
                back = time.monotonic()
                out["restart_to_ok_s"] = round(back - killed - down_s, 3)
            time.sleep(after_s)
        records = load.records
        phases = {"before": [r for r in records if r["sent"] < killed],
                  "outage": [r for r in records if killed <= r["sent"] < back or (not restart and r["sent"] >= killed)],
                  "after": [r for r in records if restart and r["sent"] >= back]}
        out["phases"] = {name: phase_figures(rs, party) for name, rs in phases.items()}
        out["sent"] = len(records)
        out["failed"] = sum(not r["ok"] for r in records)
        out["errors"] = sorted({str(r["error"])[:200] for r in records if not r["ok"]})[:5]
        out["left_out_seen"] = sorted({json.dumps(r["left_out"], sort_keys=True) for r in records if r["left_out"]})
    finally:
        out["exit_codes"] = bp.stop_processes(procs, "bank")
    out["logs"] = {p: str(path) for p, path in logs.items()}
    return out


def _wait(url: str, procs: dict[str, subprocess.Popen[bytes]], logs: dict[str, Path], status: str,
          timeout: float) -> dict[str, Any]:
    """Until ``/health`` says ``status``; its answer. RuntimeError if a process exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        for p, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{p} exited ({proc.returncode}): {logs[p].read_text(errors='replace')[-1500:]}")
        answer = health(url)
        if answer.get("status") == status:
            return answer
        if time.monotonic() > deadline:
            raise RuntimeError(f"/health did not say {status!r} within {timeout:g} s (last: {answer})")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line: run the outage, print (and with --out write) its figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--party", default="clinic")
    parser.add_argument("--before", type=float, default=5.0)
    parser.add_argument("--down", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=5.0)
    parser.add_argument("--signal", choices=("kill", "term"), default="kill")
    parser.add_argument("--party-timeout", type=float, default=0.5)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--method", choices=sorted(METHODS), default="splitnn")
    parser.add_argument("--coverage", type=float, default=None, help="each passive party's share of the rows")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="outage-") as tmp:
        figures = run_outage(args.work or Path(tmp), rows=args.rows, party=args.party, before_s=args.before,
                             down_s=args.down, after_s=args.after, how=args.signal,
                             party_timeout_s=args.party_timeout, clients=args.clients, method=args.method,
                             coverage=args.coverage)
    text = json.dumps(figures, indent=2)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)
    return figures


if __name__ == "__main__":
    main()
