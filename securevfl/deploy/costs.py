"""Phase 3 of a deployed party: the costs each party sends the active party, and how they enter the report.

Every other party sends its meter snapshots (times, bytes, messages) and its link counters: costs,
never data. The training (or scoring) is over by then, so a peer lost at this step costs the report
that peer's costs (named under ``missing``), never the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from securevfl.deploy.progress import log_event, sent_bytes
from securevfl.errors import ProtocolError, SecureVFLError
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.runtime import PartyContext

TAG_COST = "deploy.end.cost"

_log = logging.getLogger(__name__)


_WIRE_KEYS = ("frames", "frame_bytes", "payload_bytes", "resent_frames", "reconnects", "relayed_bytes")


def with_cost_exchange(role: Callable[[PartyContext], Any], setup: MeterSnapshot,
                       wire: Callable[[], dict[str, dict[str, int]]]) -> Callable[[PartyContext], Any]:
    """Run ``role``, then gather costs at the active party.

    Every other party (passive parties and helpers) sends its meter snapshot and link counters:
    costs, never data. The training is over by then: a peer lost or misbehaving at this step costs
    the report that peer's costs (named under ``missing``), never the finished run's metrics.
    """

    def wrapped(ctx: PartyContext) -> Any:
        value = role(ctx)
        ctx.stage = "cost summary"
        if not ctx.is_active:
            ctx.send(ctx.active, TAG_COST, {"train": ctx.meter.snapshot().to_wire(), "setup": setup.to_wire(),
                                            "wire": wire()})
            log_event(_log, ctx.name, "cost", "cost", f"cost summary sent to {ctx.active}", peer=ctx.active,
                      bytes=sent_bytes(ctx))
            return value
        train = {ctx.name: ctx.meter.snapshot()}
        setups = {ctx.name: setup}
        links = dict(wire())
        missing: dict[str, str] = {}
        for p in ctx.peers:
            try:
                message = ctx.recv(p, TAG_COST)
                if not isinstance(message, dict) or set(message) != {"train", "setup", "wire"}:
                    raise ProtocolError(f"malformed cost summary from {p}")
                costs = (MeterSnapshot.from_wire(message["train"], p), MeterSnapshot.from_wire(message["setup"], p),
                         _parse_wire(message["wire"], p))
            except SecureVFLError as exc:  # a lost or aborting peer, a malformed summary
                missing[p] = f"{type(exc).__name__}: {exc}"
                continue
            train[p], setups[p] = costs[0], costs[1]
            links.update(costs[2])
        got = [p for p in ctx.peers if p not in missing]
        log_event(_log, ctx.name, "cost", "cost", "cost summary: " + (f"from {', '.join(got)}" if got else "none")
                  + (f"; missing from {', '.join(sorted(missing))}" if missing else ""),
                  level=logging.WARNING if missing else logging.INFO, peers=got, missing=sorted(missing))
        return value, train, setups, links, missing

    return wrapped


def _parse_wire(message: Any, sender: str) -> dict[str, dict[str, int]]:
    ok = isinstance(message, dict) and all(
        isinstance(link, str) and link.startswith(f"{sender}->") and isinstance(stats, dict)
        and set(stats) == set(_WIRE_KEYS)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in stats.values())
        for link, stats in message.items())
    if not ok:
        raise ProtocolError(f"malformed link counters from {sender}")
    counters: dict[str, dict[str, int]] = message  # checked above
    return counters


def alignment_cost(size: int, setups: Mapping[str, MeterSnapshot]) -> dict[str, Any]:
    """The PSI phase's cost over every party's setup meter: what the report shows under ``alignment``."""
    total = MeterSnapshot()
    for snap in setups.values():
        total = total.merged(snap)
    return {"intersection_size": size, "total_bytes": sum(total.bytes.values()),
            "bytes_per_link": dict(sorted(total.bytes.items())), "rounds": total.rounds, "crypto_s": total.crypto_s}


def record_link_costs(report: Any, links: Mapping[str, Mapping[str, int]], missing: Mapping[str, str]) -> None:
    """Add the costs no peer sent (named, with a note) and every link's wire counters to ``report``."""
    if missing:
        report.cost["missing"] = missing
        report.notes.append("warning: the costs of " + ", ".join(sorted(missing)) + " are missing "
                            "(lost after training; the metrics are complete): "
                            + "; ".join(f"{p}: {r}" for p, r in sorted(missing.items())))
    report.cost["wire"] = {
        "what": "gRPC messages per directed link up to the cost summary (setup, PSI, training, ACKs, "
                "heartbeats, resends); HTTP/2 and TLS framing add a few % (benchmarks/network.py)",
        "links": dict(sorted(links.items())),
        "frame_bytes": sum(v["frame_bytes"] for v in links.values()),
        "codec_bytes": sum(v["payload_bytes"] for v in links.values()),
        # star topology: messages between two parties other than the hub cross two links, sealed
        "relayed_bytes": sum(v.get("relayed_bytes", 0) for v in links.values()),
    }
