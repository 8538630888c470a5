"""The measured network beside the model: one run deployed over gRPC + mutual TLS, one in-process.

The same SplitNN job runs twice on the same party files: as one ``securevfl party`` process per
party on loopback (``securevfl.deploy.launch``: gRPC, mutual TLS with a development PKI, the PSI first)
and as parties of one process (``securevfl.train``, the in-process transport). Epochs are timed
between consecutive epoch ends, so process start, PSI, the first epoch and the final evaluation
are left out; the difference is what the real transport costs per epoch on this machine
(framing, TLS, syscalls, the processes' own threads). Every gap between consecutive epoch ends is a
repetition: the transport cost is the difference of the two sides' median epochs with a 95 %
bootstrap interval (:mod:`securevfl.bench.stats`), "within noise" when that includes zero. CPU
seconds per epoch (this process and its children: the party processes of the deployed run) are
measured at the same epoch ends, the steadier figure when other jobs load the machine. Beside it:
the Meter's simulated transfer time per epoch for the same recorded path on the ``lan`` preset, and
the TCP-level frame bytes the deployed run counted against the codec bytes.
``benchmarks/network.py`` uses the same runners on mnist-5k with three parties.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from securevfl.bench import stats
from securevfl.bench.timing import cpu_seconds
from securevfl.federation.loopback import free_port


def write_tables(out: Path, dataset: str, parties: int) -> dict[str, Path]:
    """``dataset`` cut into ``parties`` CSV files: ``row_id`` first, ``label`` at the active party (the first)."""
    import pandas as pd

    from securevfl.api import RunConfig, build_scenario
    from securevfl.data import PartitionSpec

    scenario = build_scenario(RunConfig(dataset=dataset, partition=PartitionSpec(parties=parties),
                                        alignment="plaintext"))
    paths = {}
    for name in (scenario.active, *scenario.passives):
        table = scenario.tables[name]
        frame = pd.DataFrame(table.features, columns=list(table.feature_names))
        frame.insert(0, "row_id", table.ids)
        if table.labels is not None:
            frame["label"] = [scenario.classes[i] for i in table.labels]
        paths[name] = out / f"{name}.csv"
        frame.to_csv(paths[name], index=False, float_format="%.6g")
    return paths


def write_federation(path: Path, pki: Path, parties: list[str], method: str, epochs: int, batch: int,
                     options: dict[str, Any] | None = None, topology: str = "mesh",
                     helpers: tuple[str, ...] = ()) -> Path:
    """A loopback federation file (free ports, mutual TLS from ``pki``) for ``method``.

    ``topology = "star"``: only the active party (the first) has an address; the others dial out to it.
    ``helpers``: parties without data (an arbiter), after ``parties``.
    """
    blocks = "\n".join(f'[parties.{p}]' + (f'\naddress = "127.0.0.1:{free_port()}"' if topology == "mesh" or i == 0
                                           else "") + ("\ndata = false" if p in helpers else "")
                       for i, p in enumerate([*parties, *helpers]))
    opts = "\n".join(f"{k} = {json.dumps(v)}" for k, v in (options or {}).items())
    path.write_text(f"""[federation]
active = "{parties[0]}"

{blocks}

[tls]
dir = "{pki}"

[job]
method = "{method}"
epochs = {epochs}
batch_size = {batch}
early_stopping = 0
seed = 0
id_column = "row_id"
label_column = "label"

[job.options]
{opts}
""")
    return path


class StampedLines:
    """A stdout stand-in that timestamps what launch()'s pump threads print (one write per line).

    ``cpu_when``: lines matching it also get the CPU seconds of this process and its children then
    (in :attr:`cpu`, keyed by the line's index).
    """

    def __init__(self, cpu_when: re.Pattern[str] | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.cpu: dict[int, float] = {}
        self._cpu_when = cpu_when
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        now = time.perf_counter()
        with self._lock:
            for line in text.splitlines():
                if line.strip():
                    if self._cpu_when is not None and self._cpu_when.match(line):
                        self.cpu[len(self.lines)] = cpu_seconds()
                    self.lines.append((now, line))
        return len(text)

    def flush(self) -> None:
        pass


def per_epoch(marks: list[float]) -> float:
    """Seconds per epoch between the first and the last epoch end."""
    if len(marks) < 2:
        raise RuntimeError(f"need at least 2 epoch marks, got {len(marks)}")
    return (marks[-1] - marks[0]) / (len(marks) - 1)


def gaps(marks: list[float]) -> list[float]:
    """Seconds between consecutive epoch ends (the first epoch, which carries setup, is not among them)."""
    if len(marks) < 2:
        raise RuntimeError(f"need at least 2 epoch marks, got {len(marks)}")
    return [b - a for a, b in zip(marks, marks[1:])]


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """The scalar metrics of a report."""
    return {k: v for k, v in metrics.items() if k != "per_party" and isinstance(v, int | float)}


def run_network(files: dict[str, Path], pki: Path, work: Path, method: str, epochs: int, batch: int,
                options: dict[str, Any], topology: str = "mesh", helpers: tuple[str, ...] = ()) -> dict[str, Any]:
    """``method`` deployed: one ``securevfl party`` process per file (and helper), gRPC + mutual TLS on loopback."""
    from securevfl.deploy.launch import launch

    names = list(files)
    fed = write_federation(work / f"fed-{method}-{topology}.toml", pki, names, method, epochs, batch, options,
                           topology, helpers)
    report = work / f"net-{method}-{topology}.json"
    pattern = re.compile(rf"^\[{re.escape(names[0])}\] epoch (\d+)/{epochs}\b")
    lines = StampedLines(cpu_when=pattern)
    started = time.perf_counter()
    with contextlib.redirect_stdout(lines):  # a write/flush stand-in for launch()'s output
        code = launch(fed, {**files, **dict.fromkeys(helpers)}, active=names[0], report=report, device="cpu",
                      timeout=900)
    total = time.perf_counter() - started
    if code != 0:
        tail = "\n".join(text for _, text in lines.lines[-40:])
        raise RuntimeError(f"launch of {method} failed with code {code}:\n{tail}")
    marks = [t for t, text in lines.lines if pattern.match(text)]
    cpu_marks = [lines.cpu[i] for i in sorted(lines.cpu)]
    data = json.loads(report.read_text())
    return {"epoch_s": per_epoch(marks), "epoch_gaps": gaps(marks), "epoch_cpu_gaps": gaps(cpu_marks),
            "wall_s": data["wall_s"], "launch_s": total,
            "metrics": headline(data["metrics"]), "comm_bytes": data["cost"]["comm"]["bytes"],
            "first_epoch_end_s": marks[0] - started, "cost": data["cost"]}


def run_inprocess(files: dict[str, Path], method: str, epochs: int, batch: int,
                  options: dict[str, Any], torch_threads: int | None = None) -> dict[str, Any]:
    """The same job as parties of this process (the in-process transport)."""
    import torch

    import securevfl

    marks: list[float] = []
    cpu_marks: list[float] = []

    def epoch_end(**_: Any) -> None:
        marks.append(time.perf_counter())
        cpu_marks.append(cpu_seconds())

    default = torch.get_num_threads()
    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    try:
        started = time.perf_counter()
        report = securevfl.train(method, data_files={p: str(f) for p, f in files.items()}, id_column="row_id",
                                 label_column="label", epochs=epochs, batch_size=batch, seed=0, device="cpu",
                                 early_stopping=0, options=options, progress=epoch_end)  # per-epoch cost alone
    finally:
        torch.set_num_threads(default)
    return {"epoch_s": per_epoch(marks), "epoch_gaps": gaps(marks), "epoch_cpu_gaps": gaps(cpu_marks),
            "wall_s": report.wall_s, "metrics": headline(report.metrics),
            "comm_bytes": report.cost["comm"]["bytes"], "first_epoch_end_s": marks[0] - started,
            "cost": report.cost}


def transport(grpc: list[float], inprocess: list[float], grpc_cpu: list[float] | None = None,
              inprocess_cpu: list[float] | None = None) -> dict[str, Any]:
    """Per-epoch samples of both runs -> medians, the samples, and the transport cost with its interval and verdict."""
    out: dict[str, Any] = {"epoch_s_inprocess": statistics.median(inprocess), "epoch_s_grpc": statistics.median(grpc),
                           "epoch_s_inprocess_samples": list(inprocess), "epoch_s_grpc_samples": list(grpc)}
    pairs = [("measured_transport", grpc, inprocess)]
    if grpc_cpu and inprocess_cpu:
        out.update({"epoch_cpu_s_inprocess_samples": list(inprocess_cpu), "epoch_cpu_s_grpc_samples": list(grpc_cpu)})
        pairs.append(("measured_transport_cpu", grpc_cpu, inprocess_cpu))
    for prefix, a, b in pairs:
        d = stats.difference(a, b)
        out.update({f"{prefix}_s_per_epoch": d.estimate, f"{prefix}_s_per_epoch_low": d.low,
                    f"{prefix}_s_per_epoch_high": d.high, f"{prefix}_verdict": d.verdict})
    return out


def measure(work: Path, *, dataset: str = "breast-cancer", parties: int = 2, epochs: int = 3,
            batch: int = 32) -> dict[str, Any]:
    """SplitNN deployed vs in-process on ``dataset``: per-epoch seconds, the difference, the model, the bytes.

    ``epoch_s_*``: median seconds per epoch; ``*_samples``: every gap between epoch ends;
    ``measured_transport_s_per_epoch`` with ``_low`` / ``_high`` (95 % interval) and ``measured_transport_verdict``
    (:mod:`securevfl.bench.stats`); the same for CPU seconds with ``measured_transport_cpu_``.
    """
    from securevfl.deploy.certs import make_dev_pki
    from securevfl.federation.meter import NetworkModel

    tables = work / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    files = write_tables(tables, dataset, parties)
    make_dev_pki(list(files), work / "pki")
    local = run_inprocess(files, "splitnn", epochs, batch, {})
    net = run_network(files, work / "pki", work, "splitnn", epochs, batch, {})
    path = local["cost"].get("network_path", {})
    lan = NetworkModel(1000.0, 1.0)
    model_epoch_s = lan.path_seconds(int(path.get("levels", 0)), int(path.get("critical_bytes", 0))) / epochs
    wire = net["cost"].get("wire", {})
    codec = sum(local["comm_bytes"].values())
    out: dict[str, Any] = {"dataset": dataset, "parties": parties, "epochs": epochs, "batch_size": batch,
                           **transport(net["epoch_gaps"], local["epoch_gaps"], net["epoch_cpu_gaps"],
                                       local["epoch_cpu_gaps"])}
    return {**out, "model_lan_s_per_epoch": model_epoch_s,
            "frame_bytes": int(wire.get("frame_bytes", 0)), "codec_bytes_training": int(codec),
            "metrics_grpc": net["metrics"], "metrics_inprocess": local["metrics"]}
