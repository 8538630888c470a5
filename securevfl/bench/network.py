"""Section 4: the section 2 runs re-priced on other networks, without running them again.

Every run's report keeps its critical network path (``cost.network_path``: the number of message
depth levels and, summed over levels, the largest per-link byte count at each), so
:meth:`securevfl.federation.meter.NetworkModel.path_seconds` gives the simulated transfer time on any
link: one latency per level plus the critical bytes over the bandwidth — the same model the Meter
applies during the run. The sweep covers 10-1000 Mbit/s and 1-100 ms; the presets are
``lan`` (1000 Mbit/s, 1 ms), ``wan`` (100 Mbit/s, 20 ms) and ``intercontinental`` (10 Mbit/s, 100 ms).
"Estimated total" adds the run's measured wall time (parties in one process, so no real
transfer time) to the simulated transfer time: an upper bound, since real parties overlap some of
their compute with transfers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from securevfl.bench import stats
from securevfl.bench.timing import Figure
from securevfl.federation.meter import NetworkModel

BANDWIDTHS_MBPS = (10.0, 30.0, 100.0, 300.0, 1000.0)
LATENCIES_MS = (1.0, 3.0, 10.0, 30.0, 100.0)


def simulated_seconds(network_path: Mapping[str, int], model: NetworkModel) -> float:
    """Simulated transfer time of a recorded critical path on ``model``."""
    return model.path_seconds(int(network_path["levels"]), int(network_path["critical_bytes"]))


def reprice(runs: Sequence[Mapping[str, Any]], models: Mapping[str, NetworkModel]) -> list[dict[str, Any]]:
    """Per run: simulated seconds on every named link and on the bandwidth and latency sweeps."""
    out = []
    for r in runs:
        if r.get("status") != "ok":
            continue
        path = r["network_path"]
        recorded = NetworkModel(**r["network_model"])
        check = simulated_seconds(path, recorded)
        if abs(check - r["simulated_network_s"]) > 1e-6 * max(1.0, check):  # same model, same answer
            raise AssertionError(f"re-priced network time {check} != the run's {r['simulated_network_s']}")
        out.append({
            "run": f"{r['method']}/{r['privacy']}", "wall_s": r["wall_s"], "levels": path["levels"],
            "critical_bytes": path["critical_bytes"],
            "presets": {name: simulated_seconds(path, m) for name, m in models.items()},
            "bandwidth_sweep": {bw: simulated_seconds(path, NetworkModel(bw, 10.0)) for bw in BANDWIDTHS_MBPS},
            "latency_sweep": {lat: simulated_seconds(path, NetworkModel(100.0, lat)) for lat in LATENCIES_MS},
        })
    return out


def figures(rows: list[dict[str, Any]]) -> list[Figure]:
    """Simulated transfer seconds of every run on every named link (computed, one sample each)."""
    out = []
    for r in rows:
        for name, sec in r["presets"].items():
            out.append(Figure(f"network.{r['run'].replace('/', '.')}.{name}_s", "s", (sec,),
                              note="simulated from recorded bytes and depth levels"))
    return out


def section(rows: list[dict[str, Any]], models: Mapping[str, NetworkModel]) -> Any:
    """Section 4 of the report: per run and link, transfer time, estimated total and latency's share."""
    from securevfl.bench.results import Section, Table

    s = Section("network", "4. Network: the same runs on other links (simulated)", text=__doc__ or "")
    names = list(models)
    t = Table("Simulated transfer time per run",
              ["run", "depth levels", "critical-path bytes (B)", "measured wall (s)",
               *[f"{n} ({models[n].bandwidth_mbps:g} Mbit/s, {models[n].latency_ms:g} ms) network (s)" for n in names],
               *[f"{n}: estimated total (s)" for n in names]])
    for r in rows:
        t.add(r["run"], r["levels"], f"{r['critical_bytes']:,}", f"{r['wall_s']:.2f}",
              *[f"{r['presets'][n]:.3f}" for n in names], *[f"{r['wall_s'] + r['presets'][n]:.2f}" for n in names])
    s.tables.append(t)
    share = Table("Share of latency in the simulated time on each link (%)", ["run", *names])
    for r in rows:
        share.add(r["run"], *[f"{100 * r['levels'] * models[n].latency_ms / 1e3 / r['presets'][n]:.0f}"
                              if r["presets"][n] > 0 else "-" for n in names])
    s.tables.append(share)
    s.data = {"rows": rows, "models": {n: {"bandwidth_mbps": m.bandwidth_mbps, "latency_ms": m.latency_ms}
                                       for n, m in models.items()}}
    return s


def transport_cost(measured: Mapping[str, Any], cpu: bool = False) -> stats.Difference | None:
    """The measured transport cost per epoch (deployed minus in-process) with its interval; None for an older run."""
    prefix = "measured_transport_cpu" if cpu else "measured_transport"
    if f"{prefix}_verdict" not in measured:
        return None
    return stats.Difference(measured[f"{prefix}_s_per_epoch"], measured[f"{prefix}_s_per_epoch_low"],
                            measured[f"{prefix}_s_per_epoch_high"], measured[f"{prefix}_verdict"],
                            len(measured.get("epoch_s_grpc_samples", ())),
                            len(measured.get("epoch_s_inprocess_samples", ())))


def transport_cell(measured: Mapping[str, Any], cpu: bool = False) -> str:
    """The transport cost as a table cell: a cost only when its interval lies above zero, never a negative one."""
    d = transport_cost(measured, cpu)
    if d is None:
        if cpu:
            return "-"
        value = measured.get("measured_transport_s_per_epoch")  # an older run: one difference, no interval
        if value is None or value <= 0:
            return "not measurable (a single difference, not above zero)"
        return f"{value:+.3f} (a single difference, no interval)"
    if d.verdict == stats.ABOVE:
        return stats.describe(d, "{:+.3f}")
    if d.verdict == stats.BELOW:
        return (f"none measurable: the deployed epochs ran faster by {-d.estimate:.3f} [{-d.high:.3f}, {-d.low:.3f}], "
                "load during the in-process run, not a saving")
    if d.verdict == stats.NOISE:
        return f"none measurable: within noise ({d.low:+.3f} … {d.high:+.3f})"
    return f"none measurable: too few epochs for an interval ({d.estimate:+.3f})"


def _spread(samples: Sequence[float] | None, median: float) -> str:
    if not samples:
        return f"{median:.3f}"
    return f"{median:.3f} ({min(samples):.3f} – {max(samples):.3f}, {len(samples)} epochs)"


def add_measured(s: Any, measured: Mapping[str, Any] | None) -> None:
    """The deployed (gRPC + mutual TLS) run beside the in-process one and the model (:mod:`.wire`)."""
    import statistics

    from securevfl.bench.results import Table

    if not measured:
        s.notes.append("no deployed run at this size (--quick and --full run one): the times above are the "
                       "model's only")
        return
    m = measured
    t = Table(f"Measured on loopback: SplitNN, {m['dataset']}, {m['parties']} parties, {m['epochs']} epochs, "
              f"one process per party over gRPC + mutual TLS vs in-process parties",
              ["per epoch", "wall (s): median (min – max)", "CPU (s): median (min – max)"])
    cpu_local, cpu_net = m.get("epoch_cpu_s_inprocess_samples"), m.get("epoch_cpu_s_grpc_samples")
    t.add("in-process (one process, no transport)", _spread(m.get("epoch_s_inprocess_samples"), m["epoch_s_inprocess"]),
          _spread(cpu_local, statistics.median(cpu_local)) if cpu_local else "-")
    t.add("deployed (processes, gRPC + mutual TLS)", _spread(m.get("epoch_s_grpc_samples"), m["epoch_s_grpc"]),
          _spread(cpu_net, statistics.median(cpu_net)) if cpu_net else "-")
    t.add("measured transport cost (difference of medians, 95 % interval)", transport_cell(m),
          transport_cell(m, cpu=True))
    t.add("the model's transfer time on lan (1000 Mbit/s, 1 ms)", f"{m['model_lan_s_per_epoch']:.3f}", "-")
    t.note = ("every gap between epoch ends is a repetition; the cost is 'none measurable' when its interval "
              "includes zero or lies below it (the transport cannot make an epoch faster: that is load). CPU: this "
              "process and its children (the deployed run's party processes)")
    s.tables.append(t)
    if m["codec_bytes_training"]:
        s.notes.append(f"the deployed run's gRPC frames carried {m['frame_bytes']:,} bytes (setup, PSI and training) "
                       f"against {m['codec_bytes_training']:,} codec bytes of training messages in-process")
    s.data["measured"] = dict(m)


def measured_figures(measured: Mapping[str, Any] | None) -> list[Figure]:
    """The deployed run's per-epoch figures (every epoch a sample); the transport cost only when measurable."""
    if not measured:
        return []
    out = [Figure("network.measured.splitnn_epoch_grpc_s", "s",
                  tuple(measured.get("epoch_s_grpc_samples") or (measured["epoch_s_grpc"],))),
           Figure("network.measured.splitnn_epoch_inprocess_s", "s",
                  tuple(measured.get("epoch_s_inprocess_samples") or (measured["epoch_s_inprocess"],)))]
    d = transport_cost(measured)
    if d is not None and d.verdict == stats.ABOVE:
        out.append(Figure("network.measured.transport_s_per_epoch", "s", (d.estimate,),
                          note="deployed minus in-process, median epochs, per epoch",
                          extra={"low": d.low, "high": d.high}))
    return out
