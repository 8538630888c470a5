"""Batch scoring with a saved model against the floor: the same weights in plain torch, one process.

Shared by ``benchmarks/predict.py`` (the full benchmark: deployed runs, batch sizes, a profile) and
the ``predict`` section of ``securevfl bench``. Everything here runs on **generated data**: N rows of
30 Gaussian columns split 10/10/10 over three parties (``bank``: active, with a binary label that is
a noisy linear function of all 30 columns; ``shop``; ``clinic``), every party holding all N IDs (so
PSI keeps every row), each party's file in its own row order.

* :func:`measure_in_process` times :func:`securevfl.pipeline.score.score` as a user calls it, and
  splits its wall time by wrapping the functions it calls (no copy of its body): reading the files,
  preprocessing (the saved encoders), alignment (ECDH PSI, or ``plaintext``), and the scoring
  phase (``run_parties`` over every party's ``score_side``, privacy layer and all).
* :func:`measure_floor` is what a user with all the columns and all the weights in one place would
  run: ``pandas`` reads the files, the IDs are joined on the active party's order, the saved
  encoders transform the columns, and a forward pass of plain ``torch.nn`` modules (the faster of
  one pass over all N rows and batches of B rows; rebuilt from
  the saved state dicts: bottoms, concatenation, top for SplitNN; embeddings, their mean, the
  active party's decision net for EASTER) scores all N rows. Its predictions are checked against
  ``score()``'s (``max_abs_diff``), so the floor computes the same thing.
* :func:`serving_parties` runs every party as a ``securevfl party --serve`` process over mutual TLS
  on loopback (a development PKI) and stops them all on leaving, for the online benchmarks
  (``benchmarks/predict.py``'s latency, :mod:`securevfl.bench.serving`'s load).

The ``predict`` section of ``securevfl bench`` adds an online part after the batch scoring: a few cells
of closed-loop load on three ``party --serve`` processes (:func:`securevfl.bench.serving.measure_online`;
``predict.online.*`` figures, a second table). If it fails (a port taken, a party that exits), the
batch-scoring figures and table are still reported and the online table names the failure.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

PARTIES = ("bank", "shop", "clinic")
N_FEATURES = 30
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "splitnn": ("splitnn", {}),
    "easter_dh": ("easter", {"secagg": "dh", "embedding_size": 16}),
}


def generate(directory: Path, rows: int, *, fmt: str = "csv", seed: int = 0, shuffle: bool = True
             ) -> dict[str, Path]:
    """Generated data: ``rows`` customers, 30 columns split 10/10/10, numeric IDs, each party's file shuffled.

    Parquet files store the IDs as strings of digits: an int64 ID column in a Parquet file is not
    read by ``securevfl.data.stream`` (``.str`` on integers; the CSV reader reads IDs as text).
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, N_FEATURES), dtype=np.float32)
    w = rng.standard_normal(N_FEATURES)
    y = (X @ w + 0.5 * rng.standard_normal(rows) > 0).astype(np.int8)
    ids = np.arange(rows, dtype=np.int64) + 100_000
    files: dict[str, Path] = {}
    directory.mkdir(parents=True, exist_ok=True)
    for p, (name, cols) in enumerate(zip(PARTIES, np.array_split(np.arange(N_FEATURES), len(PARTIES)), strict=True)):
        order = rng.permutation(rows) if shuffle else np.arange(rows)
        frame = pd.DataFrame(X[order][:, cols], columns=[f"{name}_{c}" for c in cols])
        frame.insert(0, "customer_id", ids[order] if fmt == "csv" else ids[order].astype(str))
        if p == 0:
            frame["label"] = y[order]
        path = directory / f"{name}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False, float_format="%.6g")
        elif fmt == "parquet":
            frame.to_parquet(path, index=False)
        else:
            raise ValueError(f"unknown format {fmt!r}")
        files[name] = path
    return files


def train_model(files: Mapping[str, Path], key: str, model_dir: Path, *, epochs: int = 1, seed: int = 0) -> float:
    """Train ``key`` (:data:`METHODS`) on ``files`` and save it to ``model_dir``; the seconds it took."""
    import securevfl

    method, options = METHODS[key]
    started = time.perf_counter()
    securevfl.train(method, data_files={p: str(f) for p, f in files.items()}, id_column="customer_id",
                    label_column="label", epochs=epochs, batch_size=256, seed=seed, device="cpu",
                    options=options, model_dir=model_dir, overwrite_model=True)
    return time.perf_counter() - started


@contextlib.contextmanager
def _timed(owner: Any, attr: str, totals: dict[str, float], key: str) -> Iterator[None]:
    """Replace ``owner.attr`` (a function) by a wrapper adding its seconds to ``totals[key]``; put it back."""
    original = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + time.perf_counter() - started

    setattr(owner, attr, wrapper)
    try:
        yield
    finally:
        setattr(owner, attr, original)


def _timed_aligner(owner: Any, totals: dict[str, float]) -> contextlib.AbstractContextManager[None]:
    """``create_aligner(name)`` returning an aligner whose calls add to ``totals["align_s"]``."""
    original = owner.create_aligner

    def create(name: str, **options: Any) -> Callable[..., Any]:
        aligner = original(name, **options)

        def align(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return aligner(*args, **kwargs)
            finally:
                totals["align_s"] = totals.get("align_s", 0.0) + time.perf_counter() - started
        return align

    @contextlib.contextmanager
    def patch() -> Iterator[None]:
        owner.create_aligner = create
        try:
            yield
        finally:
            owner.create_aligner = original
    return patch()


def measure_in_process(model_dir: Path, files: Mapping[str, Path], *, batch_size: int, alignment: str = "psi"
                       ) -> dict[str, Any]:
    """``score()`` of every row, its wall time and where it went (read, preprocess, align, score phase)."""
    import securevfl.federation.runtime as runtime
    import securevfl.model.scoring as saved
    import securevfl.pipeline.score as scoring

    totals: dict[str, float] = {}
    gc.collect()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_timed(saved, "party_table_from_file", totals, "read_s"))
        stack.enter_context(_timed(scoring, "read_new_rows", totals, "read_preprocess_s"))
        stack.enter_context(_timed_aligner(scoring, totals))
        stack.enter_context(_timed(runtime, "run_parties", totals, "score_s"))
        started = time.perf_counter()
        scored = scoring.score(model_dir, {p: str(f) for p, f in files.items()}, exchange_rows=batch_size,
                               device="cpu", alignment=alignment)
        wall = time.perf_counter() - started
    rows = scored.rows["scored"]
    out: dict[str, Any] = {
           "wall_s": wall, "rows": rows, "rows_per_s": rows / wall, "batch_size": batch_size, "alignment": alignment,
           "read_s": totals.get("read_s", 0.0),
           "preprocess_s": totals.get("read_preprocess_s", 0.0) - totals.get("read_s", 0.0),
           "align_s": totals.get("align_s", 0.0), "score_s": totals.get("score_s", 0.0)}
    out["other_s"] = wall - out["read_s"] - out["preprocess_s"] - out["align_s"] - out["score_s"]
    out["score_rows_per_s"] = rows / out["score_s"] if out["score_s"] else float("nan")
    if alignment == "psi":
        out["psi_s"] = out["align_s"]
    out["_predictions"] = scored.predictions
    return out


def _sequential(state: Mapping[str, torch.Tensor], prefix: str, *, final_relu: bool) -> nn.Sequential:
    """The plain ``Linear, ReLU, ..., Linear[, ReLU]`` stack a saved MLP's state dict describes."""
    indices = sorted({int(k[len(prefix):].split(".")[0]) for k in state if k.startswith(prefix)
                      and k.endswith(".weight")})
    layers: list[nn.Module] = []
    for i, index in enumerate(indices):
        weight = state[f"{prefix}{index}.weight"]
        if weight.dim() != 2:
            raise ValueError(f"the floor rebuilds MLPs only; {prefix}{index} is not a Linear layer")
        linear = nn.Linear(weight.shape[1], weight.shape[0])
        linear.load_state_dict({"weight": weight, "bias": state[f"{prefix}{index}.bias"]})
        layers.append(linear)
        if i < len(indices) - 1 or final_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).eval()


def floor_modules(model: Any, method: str) -> tuple[dict[str, nn.Module], nn.Module]:
    """(per party: its bottom / embedding net, the active party's top / decision net), as plain torch."""
    bottoms: dict[str, nn.Module]
    if method == "splitnn":
        bottoms = {p: _sequential(model.sides[p].weights["bottom"], "", final_relu=True) for p in model.data_parties}
        return bottoms, _sequential(model.sides[model.active].weights["top"], "", final_relu=False)
    if method == "easter":
        bottoms = {p: _sequential(model.sides[p].weights["model"], "embed.", final_relu=True)
                   for p in model.data_parties}
        return bottoms, _sequential(model.sides[model.active].weights["model"], "decide.", final_relu=False)
    raise ValueError(f"no floor for {method}")


def _read(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def floor_forward(method: str, bottoms: Mapping[str, nn.Module], top: nn.Module,
                  inputs: Mapping[str, torch.Tensor], order: tuple[str, ...]) -> np.ndarray:
    """One forward pass over every row: SplitNN concatenates the bottoms; EASTER averages the embeddings."""
    with torch.inference_mode():
        outs = [bottoms[p](inputs[p]) for p in order]
        combined = torch.cat(outs, dim=1) if method == "splitnn" else torch.stack(outs).sum(0) / len(outs)
        return torch.softmax(top(combined), dim=1).numpy()


def measure_floor(model_dir: Path, files: Mapping[str, Path], *, id_column: str = "customer_id",
                  batch_size: int = 0) -> dict[str, Any]:
    """The floor, end to end (read, join on IDs, preprocess, one forward pass) and the forward pass alone.

    With ``batch_size``, the forward pass is also timed in batches of that many rows (``forward_batched_s``);
    ``forward_s`` is the faster of the two.
    """
    from securevfl.model.scoring import load_model

    gc.collect()
    started = time.perf_counter()
    model = load_model(model_dir)
    bottoms, top = floor_modules(model, model.method)
    t_read = time.perf_counter()
    frames = {p: _read(Path(files[p])) for p in model.data_parties}
    t_join = time.perf_counter()
    active_ids = frames[model.active][id_column].to_numpy()
    for p in model.data_parties:
        if p != model.active:
            where = pd.Index(frames[p][id_column].to_numpy()).get_indexer(active_ids)
            frames[p] = frames[p].iloc[where]
    t_pre = time.perf_counter()
    inputs = {}
    for p in model.data_parties:
        encoder = model.encoders[p]
        assert encoder is not None
        inputs[p] = torch.as_tensor(np.ascontiguousarray(encoder.transform(frames[p][list(encoder.columns)]),
                                                         dtype=np.float32))
    t_fwd = time.perf_counter()
    probabilities = floor_forward(model.method, bottoms, top, inputs, model.data_parties)
    done = time.perf_counter()
    rows = len(active_ids)
    out = {"wall_s": done - started, "rows": rows, "rows_per_s": rows / (done - started),
           "load_s": t_read - started, "read_s": t_join - t_read, "join_s": t_pre - t_join,
           "preprocess_s": t_fwd - t_pre, "forward_one_pass_s": done - t_fwd,
           "_ids": active_ids, "_probabilities": probabilities}
    if batch_size:  # the same forward pass in chunks of batch_size rows (not part of the end-to-end wall time)
        t_batched = time.perf_counter()
        for start in range(0, rows, batch_size):
            floor_forward(model.method, bottoms, top, {p: x[start : start + batch_size] for p, x in inputs.items()},
                          model.data_parties)
        out["forward_batched_s"] = time.perf_counter() - t_batched
    # the floor's forward pass: the faster of one pass and batches (a big pass can lose to cache-sized batches),
    # and its end-to-end time with that forward pass
    out["forward_s"] = min(out["forward_one_pass_s"], out.get("forward_batched_s", float("inf")))
    out["forward_rows_per_s"] = rows / out["forward_s"]
    out["wall_one_pass_s"] = out["wall_s"]
    out["wall_s"] = (t_fwd - started) + out["forward_s"]
    out["rows_per_s"] = rows / out["wall_s"]
    return out


def forward_floor_ms(model_dir: Path, files: Mapping[str, Path], *, sizes: tuple[int, ...] = (1, 1000),
                     repeats: int = 50, id_column: str = "customer_id") -> dict[str, float]:
    """The median milliseconds of a plain torch forward pass of the saved model over ``size`` encoded rows.

    The online floor: no network, no lookup, no encoding (rows already encoded), the same weights.
    """
    from securevfl.model.scoring import load_model

    model = load_model(model_dir)
    bottoms, top = floor_modules(model, model.method)
    most = max(sizes)
    inputs = {}
    for p in model.data_parties:
        encoder = model.encoders[p]
        assert encoder is not None
        frame = _read(Path(files[p])).head(most)
        inputs[p] = torch.as_tensor(np.ascontiguousarray(encoder.transform(frame[list(encoder.columns)]),
                                                         dtype=np.float32))
    out = {}
    for size in sizes:
        part = {p: x[:size] for p, x in inputs.items()}
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            floor_forward(model.method, bottoms, top, part, model.data_parties)
            samples.append((time.perf_counter() - started) * 1e3)
        out[str(size)] = float(np.median(samples))
    return out


def agreement(floor: Mapping[str, Any], scored: pd.DataFrame, id_column: str = "customer_id") -> float:
    """The largest difference between the floor's and ``score()``'s probabilities, row by row (same IDs)."""
    by_id = scored.set_index(scored[id_column].astype(str)).loc[np.asarray(floor["_ids"]).astype(str)]
    proba = by_id[[c for c in by_id.columns if c.startswith("proba_")]].to_numpy()
    return float(np.max(np.abs(proba - floor["_probabilities"])))


def public(figures: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-able figures (without the ``_``-prefixed arrays)."""
    return {k: v for k, v in figures.items() if not k.startswith("_")}


# --- the ``predict`` section of ``securevfl bench`` -------------------------------------------------------------


def measure(directory: Path, rows: int, methods: tuple[str, ...], repeats: int,
            tick: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Each method with a floor (SplitNN; EASTER with DH secagg) on ``rows`` generated rows.

    ``score()`` with PSI once, then plaintext scoring and the floor interleaved ``repeats`` times
    (torch: one thread, for both).
    """
    keys = [k for k, (m, _) in METHODS.items() if m in methods]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train = generate(directory / "train", max(500, min(5000, rows // 2)), seed=1)
        files = generate(directory / "new", rows, seed=2)
        out: dict[str, Any] = {"rows": rows, "batch_size": 4096, "repeats": repeats, "methods": {}}
        for key in keys:
            if tick:
                tick(f"scoring {rows:,} rows with a saved {key} model against the floor")
            model_dir = directory / f"model-{key}"
            train_model(train, key, model_dir)
            psi = measure_in_process(model_dir, files, batch_size=4096, alignment="psi")
            plain, floor = [], []
            for _ in range(max(1, repeats)):
                plain.append(measure_in_process(model_dir, files, batch_size=4096, alignment="plaintext"))
                floor.append(measure_floor(model_dir, files, batch_size=4096))
            out["methods"][key] = {"psi": public(psi), "plaintext": [public(p) for p in plain],
                                   "floor": [public(f) for f in floor],
                                   "max_abs_diff": agreement(floor[0], psi["_predictions"])}
        return out
    finally:
        torch.set_num_threads(threads)


def figures(data: Mapping[str, Any]) -> list[Any]:
    """``predict.<method>.*``: rows/s of scoring and of the floor, and their ratios (paired repetitions)."""
    from securevfl.bench.timing import HIGHER, Figure

    out = []
    for key, m in data["methods"].items():
        k = f"predict.{key}"
        plain, floor = m["plaintext"], m["floor"]
        out += [Figure(f"{k}.score_rows_per_s", "rows/s", tuple(p["score_rows_per_s"] for p in plain), HIGHER,
                       note="scoring phase, plaintext alignment"),
                Figure(f"{k}.floor_rows_per_s", "rows/s", tuple(f["forward_rows_per_s"] for f in floor), HIGHER,
                       note="plain torch forward pass, same weights"),
                Figure(f"{k}.ratio_scoring_phase", "x", tuple(p["score_s"] / f["forward_s"]
                                                              for p, f in zip(plain, floor, strict=True))),
                Figure(f"{k}.in_process_rows_per_s", "rows/s", (m["psi"]["rows_per_s"],), HIGHER,
                       note="score() end to end with PSI"),
                Figure(f"{k}.ratio_end_to_end", "x", (m["psi"]["wall_s"] / min(f["wall_s"] for f in floor),))]
    return out + online_figures(data.get("online") or {})


def online_cell_name(cell: Mapping[str, Any]) -> str:
    """``<clients>x<rows per request>``, with ``_wait0`` for the ``--batch-wait-ms 0`` peer: ``8x1_wait0``."""
    return f"{cell['clients']}x{cell['rows_per_request']}" + ("_wait0" if cell["batch_wait_ms"] == 0 else "")


def online_figures(online: Mapping[str, Any]) -> list[Any]:
    """``predict.online.<clients>x<rows>.*`` (requests/s, p50, p99) and ``predict.online.ratio_to_floor``.

    One sample each (one window of load per cell); a cell without an answer has no figure, and a failed
    or skipped online part (``online["status"]``) none at all.
    """
    from securevfl.bench.timing import HIGHER, Figure

    out = []
    for cell in online.get("cells", ()):
        if not cell["requests"]:
            continue
        k = f"predict.online.{online_cell_name(cell)}"
        what = f"{cell['clients']} closed-loop client(s) x {cell['rows_per_request']} row(s), batch wait " \
               f"{cell['batch_wait_ms']:g} ms"
        out += [Figure(f"{k}.requests_per_s", "requests/s", (cell["requests_per_s"],), HIGHER, note=what),
                Figure(f"{k}.p50_ms", "ms", (cell["p50_ms"],), note=what),
                Figure(f"{k}.p99_ms", "ms", (cell["p99_ms"],), note=what)]
    if online.get("ratio_to_floor"):
        out.append(Figure("predict.online.ratio_to_floor", "x", (online["ratio_to_floor"],),
                          note="1 client x 1 row p50 / plain torch forward pass of one row"))
    return out


def section(data: Mapping[str, Any]) -> Any:
    """The report section: one row per method, scoring against the floor."""
    from securevfl.bench.results import Section, Table

    s = Section("predict", f"4b. Batch scoring of a saved model ({data['rows']:,} generated rows, 3 parties)",
                text=__doc__ or "")
    t = Table("score() against the floor (minimum over repetitions; torch: one thread)",
              ["method", "scoring phase (rows/s)", "floor forward (rows/s)", "phase / floor", "score() with PSI (s)",
               "of which PSI (s)", "plaintext score() (s)", "floor end to end (s)", "with PSI / floor",
               "max |diff|"])
    for key, m in data["methods"].items():
        plain = min(m["plaintext"], key=lambda p: p["score_s"])
        floor = min(m["floor"], key=lambda f: f["forward_s"])
        floor_wall = min(f["wall_s"] for f in m["floor"])
        t.add(key, f"{plain['score_rows_per_s']:,.0f}", f"{floor['forward_rows_per_s']:,.0f}",
              f"{plain['score_s'] / floor['forward_s']:.2f}x", f"{m['psi']['wall_s']:.2f}", f"{m['psi']['psi_s']:.2f}",
              f"{min(p['wall_s'] for p in m['plaintext']):.2f}", f"{floor_wall:.2f}",
              f"{m['psi']['wall_s'] / floor_wall:.1f}x", f"{m['max_abs_diff']:.1e}")
    t.note = "the goal (issue 27): batch scoring within 2x of the floor in one process; benchmarks/predict.py " \
             "adds the deployed run, batch sizes and a profile"
    s.tables.append(t)
    s.tables.append(online_table(data.get("online") or {"status": "not run"}))
    s.data = dict(data)
    return s


def online_table(online: Mapping[str, Any]) -> Any:
    """The online part: one row per cell of load (:func:`securevfl.bench.serving.measure_online`), or its failure."""
    from securevfl.bench.results import Table

    columns = ["batch wait (ms)", "clients", "rows/request", "requests/s", "rows/s", "p50 (ms)", "p99 (ms)", "errors",
               "rows/batch (server)"]
    if "cells" not in online:
        t = Table("Online scoring: not measured", columns)
        t.add("-", "-", "-", "-", "-", "-", "-", "-", "-")
        t.note = f"online scoring {online.get('status', 'not run')}; the batch-scoring table above is unaffected"
        return t
    t = Table(f"Online scoring: SplitNN, 3 `party --serve` processes over mutual TLS, {online['rows']:,} rows per "
              f"party, no membership budget; {online['duration_s']:g} s per cell after {online['warmup_s']:g} s "
              "warm-up", columns)
    for c in online["cells"]:
        t.add(f"{c['batch_wait_ms']:g}", c["clients"], c["rows_per_request"], f"{c['requests_per_s']:,.1f}",
              f"{c['rows_per_s']:,.0f}", f"{c['p50_ms']:.2f}", f"{c['p99_ms']:.2f}", c["errors"],
              f"{c['batch_rows_mean']:.1f}")
    notes = ["closed-loop asyncio clients in the benchmark process (HTTP/1.1 keep-alive to the active party's "
             "plain endpoint on 127.0.0.1), sharing the cores with the three parties",
             "floor (plain torch forward pass, same weights): "
             + ", ".join(f"{k} row(s) {v:.3f} ms" for k, v in online["floor_ms"].items())]
    if online.get("ratio_to_floor"):
        notes.append(f"1 client x 1 row p50 / floor = {online['ratio_to_floor']:.0f}x")
    if online.get("batching_gain"):
        notes.append(f"batching gain (batch wait 2 ms vs 0): {online['batching_gain']:.2f}x requests/s")
    t.note = "; ".join(notes) + "; benchmarks/serving.py: 32 clients, HTTPS + token, the membership budget"
    return t


# --- online scoring: the three parties as `securevfl party --serve` processes --------------------------------------

#: A loopback federation over mutual TLS (``{certs}``: a development PKI) for the served SplitNN model.
SERVING_FEDERATION = """[federation]
active = "bank"

{parties}

[tls]
dir = "{certs}"

[network]
peer_timeout_s = 120
heartbeat_s = 1.0

[job]
method = "splitnn"
epochs = 1
batch_size = 256
seed = 0
id_column = "customer_id"
label_column = "label"
"""


@dataclass
class ServedParties:
    """Running ``party --serve`` processes: the endpoint's URL, the PKI folder, and each party's log."""

    url: str
    certs: Path
    logs: dict[str, Path]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    setup_s: float = 0.0
    exit_codes: dict[str, int] = field(default_factory=dict)

    def client_context(self) -> ssl.SSLContext:
        """A TLS client context trusting the federation's CA (the endpoint's ``--serve-tls`` certificate)."""
        context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        context.check_hostname = False  # the party's certificate names the party, not 127.0.0.1
        return context

    def tails(self, chars: int = 600) -> str:
        """The end of every party's log (for an error message)."""
        return "; ".join(f"{p}: {path.read_text(errors='replace')[-chars:]}" for p, path in self.logs.items()
                         if path.exists())


def _wait_healthy(served: ServedParties, timeout: float, headers: Mapping[str, str]) -> None:
    """Until ``GET /health`` answers ``{"status": "ok"}`` (every party set up), or RuntimeError."""
    import json
    import urllib.request

    context = served.client_context() if served.url.startswith("https") else None
    deadline = time.perf_counter() + timeout
    while True:
        if any(proc.poll() is not None for proc in served.procs.values()):
            raise RuntimeError(f"a serving party exited during set-up: {served.tails()}")
        try:
            request = urllib.request.Request(f"{served.url}/health", headers=dict(headers))
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                if json.loads(response.read()).get("status") == "ok":
                    return
        except OSError:
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the serving parties were not up within {timeout:g} s: {served.tails()}")
        time.sleep(0.2)


def stop_processes(procs: Mapping[str, subprocess.Popen[bytes]], first: str, wait_s: float = 30.0
                   ) -> dict[str, int]:
    """SIGINT to ``first`` (the active party: every party then stops cleanly), then kill what is left; exit codes."""
    codes: dict[str, int] = {}
    if first in procs and procs[first].poll() is None:
        procs[first].send_signal(signal.SIGINT)
    deadline = time.monotonic() + wait_s
    for p, proc in procs.items():
        try:
            codes[p] = proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[p] = proc.wait()
    return codes


@contextlib.contextmanager
def serving_parties(work: Path, model_dir: Path, files: Mapping[str, Path], *, name: str = "online",
                    active_args: Sequence[str] = (), passive_args: Sequence[str] = (), timeout: float = 300.0,
                    health_headers: Mapping[str, str] | None = None) -> Iterator[ServedParties]:
    """Every party of ``files`` as a ``securevfl party --serve`` process over mutual TLS on loopback, set up.

    The first party of ``files`` is the active one; its endpoint listens on a free 127.0.0.1 port
    (HTTPS when ``active_args`` has ``--serve-tls``). ``passive_args`` go to every other party (its
    membership budget). One torch thread per process. Every process is stopped on leaving, whatever
    happened (``exit_codes``: each party's).
    """
    import os
    import sys

    from securevfl.deploy.certs import make_dev_pki
    from securevfl.federation.loopback import free_port

    parties = tuple(files)
    active = parties[0]
    certs = work / "online-certs"
    if not (certs / "ca.pem").exists():
        make_dev_pki(list(parties), certs, overwrite=True)
    blocks = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{free_port()}"' for p in parties)
    fed = work / f"fed-{name}.toml"
    fed.write_text(SERVING_FEDERATION.format(parties=blocks, certs=certs).replace('active = "bank"',
                                                                                  f'active = "{active}"'))
    port = free_port()
    scheme = "https" if "--serve-tls" in active_args or "--serve-cert" in active_args else "http"
    served = ServedParties(f"{scheme}://127.0.0.1:{port}", certs, {p: work / f"serve-{name}-{p}.log" for p in parties})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    handles = []
    started = time.perf_counter()
    try:
        for p in parties:
            cmd = [sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed), "--as", p, "--serve",
                   "--model-dir", str(model_dir), "--data", str(files[p]), "--device", "cpu"]
            cmd += ["--listen", f"127.0.0.1:{port}", *active_args] if p == active else list(passive_args)
            handle = open(served.logs[p], "wb")  # noqa: SIM115 - closed below
            handles.append(handle)
            served.procs[p] = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env)
        _wait_healthy(served, timeout, health_headers or {})
        served.setup_s = time.perf_counter() - started
        yield served
    finally:
        served.exit_codes = stop_processes(served.procs, active)
        for handle in handles:
            handle.close()
