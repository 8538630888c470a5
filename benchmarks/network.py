"""The network transport (gRPC + mutual TLS, one process per party) against its floors, on loopback.

Everything binds 127.0.0.1 on ephemeral ports, with certificates from ``make_dev_pki`` in a
temporary folder; every process this script starts is stopped before it returns.

Part 1 — messages between two :class:`GrpcTransport` s (parties ``a`` and ``b``, default
``NetworkSettings``: 1024 KB chunks). ``b`` is an echo loop in a **separate process** (this script
re-run with ``--echo-peer``), so the two transports do not share a GIL. Round trip: ``a`` sends a
payload, ``b`` sends the same bytes back; p50/p90 over the timed pings (after a warm-up) for 1 KB,
64 KB and 16 MB. The transport and its two floors (below) are open at the same time and each size's
pings are timed in ten turns of each, so a load that comes and goes on the machine falls on all alike.
One-way throughput: ``a`` sends N messages back to back, ``b`` acknowledges the last
one with a 1-byte message; MB/s = N x size / (first send -> acknowledgement), MB = 10^6 bytes.
The peer (floor) is the same exchange over a raw TLS 1.3 socket (Python ``ssl``, the same
certificates, mutual authentication, 9-byte length header, echo in a separate process): what any
Python TLS transport needs. Keys ``rtt_us_p50_1k`` / ``_64k`` / ``_16m``, ``rtt_us_p90_*``,
``throughput_mb_s_64k`` / ``_16m`` and the ``tls_socket_*`` figures with the ratios. A second floor
is bare gRPC in the transport's own layout: each side a sync gRPC server (the same certificates,
mutual TLS) and one bidirectional stream to the other's server, payloads handed between the
application thread and gRPC's threads over queues, no frames, acknowledgements or checks
(``grpc_bare_rtt_us_p50_1k`` / ``_64k``, ``grpc_bare_rtt_p50_ratio_vs_tls_socket_*``,
``rtt_p50_ratio_vs_grpc_bare_*``): what any transport on grpcio's threaded API pays per round
trip, so the share of the gap that is the transport's own is ``rtt_p50_ratio_vs_grpc_bare_1k``.

Part 2 — bytes on the wire. The same two transports, but each link goes through a counting TCP
proxy (it never cuts): everything on both directed streams is counted in both directions (TLS
handshake, HTTP/2 setup, gRPC framing, our frames, ACKs, heartbeats, keepalive pings, FIN). For a
batch of N 64 KB messages ``wire_bytes_over_codec_bytes`` = all TCP bytes of the session, handshake
and close included / payload bytes handed to ``send``; ``..._steady`` counts only the bytes during
the batch. Then a SplitNN run on mnist-5k (3 parties, each with its own transport, all in this
process because a proxy must sit in front of every party's server): TCP bytes on all six directed
streams / payload bytes of every message (setup, PSI and training), key
``splitnn_wire_bytes_over_codec_bytes``.

Part 3 — epoch time, 3 processes vs threads. mnist-5k is cut into three tables (``build_scenario``
with 3 parties, plaintext alignment) written as CSV with an ID column, the labels at the active
party. The network run is ``securevfl.deploy.launch`` (one ``securevfl party`` process each, mutual TLS,
``OMP_NUM_THREADS`` set by launch to cores // parties); the peer is ``securevfl.train`` on the same
files (party threads in one process, the in-process transport). Both run PSI first. **Per epoch**
= (time of the last epoch end - time of the first epoch end) / (E - 1): the first epoch (warm-up),
process start, PSI and the final evaluation are excluded. Epoch ends are the active party's
progress callback in the threaded run and the arrival of its ``[active] epoch k/E`` line at the
launcher (the party prints it unbuffered from the same callback) in the network run. SplitNN and
EASTER (``secagg = "dh"``, ``embedding_size = 32``). The threaded run is done twice: with torch's
default thread count (the peer of the headline ratios) and with the party processes' count (1 on
2 cores): torch's thread count changes float summation order, so only the latter must give
metrics equal to the network run's (``metrics_identical_*``; tolerance 1e-6; measured: EASTER's
accuracy differs by one test row between 1 and 2 torch threads, in-process alone). Keys ``splitnn_epoch_s_network``,
``splitnn_epoch_s_inprocess``, ``splitnn_epoch_ratio_vs_inprocess`` (goal <= 1.5),
``easter_epoch_ratio_vs_inprocess``.

Part 4 — star vs mesh topology (``--topology-only`` runs just this part). The same two jobs
deployed with ``[federation] topology = "star"`` (only the active party listens; the passive parties
dial out to it, and it relays what they send each other, sealed end to end): per-epoch seconds as
in part 3, and the message bytes the physical links carried (from the report's ``cost.wire.links``:
``payload_bytes`` + ``relayed_bytes`` of every link with the active party at one end (in a mesh: of
every link), so a relayed message counts on both hops, sealed; frame
bytes are also recorded but are a snapshot taken while the last frames may still be queued). SplitNN has no
passive-to-passive traffic, nor has EASTER ``dh`` (its secure aggregation already routes every key
and share through the active party); hetero-lr's passive parties talk with its arbiter (a fourth
process, ``data = false``) in every round, so a star relays that traffic. Keys
``{method}_epoch_s_star`` / ``_mesh``, ``{method}_epoch_ratio_star_vs_mesh``,
``{method}_link_bytes_star`` / ``_mesh``, ``{method}_bytes_ratio_star_vs_mesh``,
``{method}_relayed_bytes_star`` (sealed payloads the hub forwarded: each relayed message once),
``{method}_relay_overhead_bytes`` (star link bytes - mesh link bytes: the second hop, 24 bytes a
sealed message, the session-key bundles) and
``comm_bytes_identical_{method}_star`` / ``metrics_identical_{method}_star`` (codec bytes per logical
link and metrics equal to the mesh run's).

    .venv/bin/python benchmarks/network.py --quick --out out/network.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from securevfl.bench import wire
from securevfl.bench.results import write_json
from securevfl.bench.wire import run_inprocess, run_network, write_federation
from securevfl.federation.loopback import LoopbackProxy, free_port

NO_ABORT = threading.Event()
KB, MB = 1024, 1024 * 1024
SIZES = {"1k": KB, "64k": 64 * KB, "16m": 16 * MB}
BARE_SIZES = ("1k", "64k")  # bare gRPC's own 4 MB message limit: the floor is for small messages
RTT_BLOCKS = 10  # each pair's pings of one size are timed in this many turns with the other pairs
TIMEOUT = 120.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# ------------------------------------------------------------------ the echo peer (separate process)


def _credentials(pki: Path, party: str):
    from securevfl.deploy.certs import load_tls_material

    return load_tls_material(pki / f"{party}.pem", pki / f"{party}.key", pki / "ca.pem")


def _grpc_echo(config: dict[str, Any]) -> None:
    """Party ``b``: answer ``ping`` with ``pong`` (same bytes), ``bulk.last`` with a 1-byte ``ack``."""
    from securevfl.federation.grpc_transport import GrpcTransport
    from securevfl.federation.network import NetworkSettings
    from securevfl.federation.transport import Envelope

    t = GrpcTransport("b", config["addresses"], tls=_credentials(Path(config["pki"]), "b"), fingerprint="bench",
                      settings=NetworkSettings(**config.get("settings", {}))).start()
    try:
        t.wait_ready()
        while True:
            env = t.recv("b", "a", NO_ABORT, timeout=TIMEOUT)
            if env.tag == "ping":
                t.send(Envelope("b", "a", "pong", env.depth + 1, env.payload))
            elif env.tag == "bulk.last":
                t.send(Envelope("b", "a", "ack", env.depth + 1, b"k"))
            elif env.tag == "stop":
                break
        t.finish("b")
    finally:
        t.close()


_HEADER = struct.Struct("<BQ")
_PING, _PONG, _BULK, _LAST, _ACK, _STOP = range(1, 7)


def _recv_exact(sock: ssl.SSLSocket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the TLS socket")
        got += k
    return buf


def _tls_send(sock: ssl.SSLSocket, kind: int, payload: bytes | bytearray) -> None:
    sock.sendall(_HEADER.pack(kind, len(payload)))
    if payload:
        sock.sendall(payload)


def _tls_recv(sock: ssl.SSLSocket) -> tuple[int, bytearray]:
    kind, n = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    return kind, _recv_exact(sock, n) if n else bytearray()


def _tls_echo(config: dict[str, Any]) -> None:
    """The floor's echo: one mutual-TLS socket, same certificates; prints its port, then serves one client."""
    pki = Path(config["pki"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(pki / "b.pem", pki / "b.key")
    context.load_verify_locations(pki / "ca.pem")
    context.verify_mode = ssl.CERT_REQUIRED
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(TIMEOUT)
        print(listener.getsockname()[1], flush=True)
        raw, _ = listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with context.wrap_socket(raw, server_side=True) as sock:
            sock.settimeout(TIMEOUT)
            while True:
                kind, payload = _tls_recv(sock)
                if kind == _PING:
                    _tls_send(sock, _PONG, payload)
                elif kind == _LAST:
                    _tls_send(sock, _ACK, b"k")
                elif kind == _STOP:
                    break


class EchoProcess:
    """This script re-run as the echo peer; always stopped on exit."""

    def __init__(self, mode: str, config: dict[str, Any]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--echo-peer", mode,
                                      json.dumps(config)], stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


_BARE_SERVICE, _BARE_METHOD = "bench.Bare", "/bench.Bare/Echo"
_BARE_STOP = b"stop"


class _BareParty:
    """Bare gRPC in the transport's layout: a server receives, one bidirectional stream to the peer sends."""

    def __init__(self, me: str, other: str, pki: Path, addresses: dict[str, str]) -> None:
        import queue
        from concurrent import futures

        import grpc

        self.inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

        def handler(requests, context):
            for request in requests:
                self.inbox.put(request)
            return
            yield  # a response stream that stays empty

        key, cert, ca = ((pki / name).read_bytes() for name in (f"{me}.key", f"{me}.pem", "ca.pem"))
        generic = grpc.method_handlers_generic_handler(_BARE_SERVICE, {
            "Echo": grpc.stream_stream_rpc_method_handler(handler)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=(generic,))
        self.server.add_secure_port(addresses[me], grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True))
        self.server.start()
        self.channel = grpc.secure_channel(addresses[other], grpc.ssl_channel_credentials(ca, key, cert),
                                           options=[("grpc.ssl_target_name_override", other)])

        def requests():
            while (item := self.outbox.get()) is not None:
                yield item

        self.call = self.channel.stream_stream(_BARE_METHOD)(requests(), wait_for_ready=True)
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self) -> None:
        try:
            for _ in self.call:
                pass
        except Exception:  # noqa: BLE001 - the stream ends with the run
            pass

    def close(self) -> None:
        self.outbox.put(None)
        self.channel.close()
        self.server.stop(0)


def _bare_echo(config: dict[str, Any]) -> None:
    """Echo until told to stop; idle while the other pairs are timed, for as long as this script runs."""
    import queue

    parent = os.getppid()
    party = _BareParty("b", "a", Path(config["pki"]), config["addresses"])
    try:
        while True:
            try:
                payload = party.inbox.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the script is gone
                    return
                continue
            if payload == _BARE_STOP:
                return
            party.outbox.put(payload)
    finally:
        party.close()


class BarePair:
    """The second floor: bare gRPC, party ``a`` here and the echo ``b`` in its own process."""

    def __init__(self, pki: Path) -> None:
        addresses = {"a": f"127.0.0.1:{free_port()}", "b": f"127.0.0.1:{free_port()}"}
        self.a = _BareParty("a", "b", pki, addresses)
        self.echo = EchoProcess("bare", {"pki": str(pki), "addresses": addresses})

    def rtt(self, payload: bytes) -> float:
        started = time.perf_counter()
        self.a.outbox.put(payload)
        got = self.a.inbox.get(timeout=TIMEOUT)
        elapsed = time.perf_counter() - started
        assert len(got) == len(payload)
        return elapsed

    def close(self) -> None:
        try:
            self.a.outbox.put(_BARE_STOP)
            self.echo.wait()
        finally:
            self.echo.stop()
            self.a.close()


# ------------------------------------------------------------------ part 1: round trips and throughput


class GrpcPair:
    """Party ``a`` here, the echo party ``b`` in its own process; optional proxies in front of both servers."""

    def __init__(self, pki: Path, *, proxied: bool = False) -> None:
        from securevfl.federation.grpc_transport import GrpcTransport

        real = {"a": f"127.0.0.1:{free_port()}", "b": f"127.0.0.1:{free_port()}"}
        self.proxies: dict[str, LoopbackProxy] = {}
        if proxied:  # the proxy in front of X's server carries the stream X receives on
            self.proxies = {p: LoopbackProxy(int(real[p].rsplit(":", 1)[1])) for p in real}
        view_a = {"a": real["a"], "b": self.proxies["b"].address if proxied else real["b"]}
        view_b = {"a": self.proxies["a"].address if proxied else real["a"], "b": real["b"]}
        self.echo = EchoProcess("grpc", {"pki": str(pki), "addresses": view_b})
        self.a = GrpcTransport("a", view_a, tls=_credentials(pki, "a"), fingerprint="bench").start()
        self.a.wait_ready()
        self.depth = 0

    def send(self, tag: str, payload: bytes) -> None:
        from securevfl.federation.transport import Envelope

        self.depth += 1
        self.a.send(Envelope("a", "b", tag, self.depth, payload))

    def recv(self):
        return self.a.recv("a", "b", NO_ABORT, timeout=TIMEOUT)

    def rtt(self, payload: bytes) -> float:
        started = time.perf_counter()
        self.send("ping", payload)
        got = self.recv()
        elapsed = time.perf_counter() - started
        assert got.tag == "pong" and len(got.payload) == len(payload)
        return elapsed

    def stream(self, payload: bytes, n: int) -> float:
        started = time.perf_counter()
        for _ in range(n - 1):
            self.send("bulk", payload)
        self.send("bulk.last", payload)
        assert self.recv().tag == "ack"
        return time.perf_counter() - started

    def close(self) -> None:
        try:
            self.send("stop", b"")
            self.a.finish("a")
            self.a.close()
            self.echo.wait()
        finally:
            self.echo.stop()
            for p in self.proxies.values():
                p.close()


class TlsPair:
    """The floor: one mutual-TLS socket to the echo process."""

    def __init__(self, pki: Path) -> None:
        self.echo = EchoProcess("tls", {"pki": str(pki)})
        port = int(self.echo.readline())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_cert_chain(pki / "a.pem", pki / "a.key")
        context.load_verify_locations(pki / "ca.pem")
        raw = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(raw, server_hostname="b")
        self.version = self.sock.version()

    def rtt(self, payload: bytes) -> float:
        started = time.perf_counter()
        _tls_send(self.sock, _PING, payload)
        kind, got = _tls_recv(self.sock)
        elapsed = time.perf_counter() - started
        assert kind == _PONG and len(got) == len(payload)
        return elapsed

    def stream(self, payload: bytes, n: int) -> float:
        started = time.perf_counter()
        for _ in range(n - 1):
            _tls_send(self.sock, _BULK, payload)
        _tls_send(self.sock, _LAST, payload)
        assert _tls_recv(self.sock)[0] == _ACK
        return time.perf_counter() - started

    def close(self) -> None:
        try:
            _tls_send(self.sock, _STOP, b"")
            self.sock.close()
            self.echo.wait()
        finally:
            self.echo.stop()


def measure_messages(pairs: dict[str, Any], plan: dict[str, Any],
                     sizes: dict[str, tuple[str, ...]]) -> dict[str, dict[str, float]]:
    """Round trips of every pair, interleaved in blocks so the machine's load falls on each alike; then throughput.

    ``sizes``: the payload sizes each pair is timed at (bare gRPC: the small ones only, no throughput).
    """
    out: dict[str, dict[str, float]] = {name: {} for name in pairs}
    for label, size in SIZES.items():
        payload = os.urandom(size)
        names = [name for name in pairs if label in sizes[name]]
        for name in names:
            for _ in range(plan["warmup"][label]):
                pairs[name].rtt(payload)
        times: dict[str, list[float]] = {name: [] for name in names}
        blocks = min(RTT_BLOCKS, plan["pings"][label])
        for block in range(blocks):
            count = plan["pings"][label] * (block + 1) // blocks - plan["pings"][label] * block // blocks
            for name in names:
                times[name] += [pairs[name].rtt(payload) for _ in range(count)]
        for name in names:
            out[name][f"rtt_us_p50_{label}"] = _percentile(times[name], 0.5) * 1e6
            out[name][f"rtt_us_p90_{label}"] = _percentile(times[name], 0.9) * 1e6
    for name, pair in pairs.items():
        for label in ("64k", "16m"):
            if label not in sizes[name] or not hasattr(pair, "stream"):
                continue
            payload = os.urandom(SIZES[label])
            n = plan["stream"][label]
            pair.stream(payload, max(2, n // 8))  # warm-up
            seconds = min(pair.stream(payload, n) for _ in range(plan["stream_repeats"]))
            out[name][f"throughput_mb_s_{label}"] = n * len(payload) / seconds / 1e6
            out[name][f"throughput_messages_{label}"] = n
    return out


# ------------------------------------------------------------------ part 2: wire bytes


def measure_wire_64k(pki: Path, n: int) -> dict[str, Any]:
    pair = GrpcPair(pki, proxied=True)
    payload = os.urandom(64 * KB)
    try:
        at_ready = sum(p.total for p in pair.proxies.values())
        before = at_ready
        pair.stream(payload, n)
        after = sum(p.total for p in pair.proxies.values())
        stats = pair.a.link_stats()["a->b"]
    finally:
        pair.close()  # stop frames, FIN, acknowledgements and TLS close are counted too
    total = sum(p.total for p in pair.proxies.values())
    codec = n * len(payload) + 1  # a's messages and b's 1-byte acknowledgement (the "stop" message is empty)
    return {
        "wire_messages_64k": n,
        "wire_codec_bytes_64k": codec,
        "wire_tcp_bytes_64k": total,
        "wire_tcp_bytes_handshake_64k": at_ready,
        "wire_frame_bytes_64k": stats["frame_bytes"],
        "wire_bytes_over_codec_bytes": total / codec,
        "wire_bytes_over_codec_bytes_steady": (after - before) / (n * len(payload)),
        "wire_link_bytes_64k": {f"stream to {p}": {"client->server": x.upstream_bytes,
                                                    "server->client": x.downstream_bytes}
                                for p, x in pair.proxies.items()},
    }


def measure_wire_splitnn(pki: Path, files: dict[str, Path], work: Path, epochs: int, batch: int) -> dict[str, Any]:
    """Three transports in this process, each party's server behind a counting proxy; one SplitNN run."""
    from securevfl.deploy.federation_file import job_differences, job_fingerprint, load_federation
    from securevfl.deploy.links import ordered_addresses
    from securevfl.federation.grpc_transport import GrpcTransport
    from securevfl.pipeline.train import run_deployed_party

    fed = load_federation(write_federation(work / "fed-wire.toml", pki, list(files), "splitnn", epochs, batch))
    digest, job = job_fingerprint(fed)
    real = ordered_addresses(fed)
    proxies = {p: LoopbackProxy(int(a.rsplit(":", 1)[1])) for p, a in real.items()}
    transports: dict[str, Any] = {}
    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    try:
        for p in real:
            view = {q: (real[q] if q == p else proxies[q].address) for q in real}
            transports[p] = GrpcTransport(p, view, tls=_credentials(pki, p), fingerprint=digest, job=job,
                                          settings=fed.limits, differences=job_differences).start()
        for t in transports.values():
            t.wait_ready()

        def run(p: str) -> None:
            try:
                results[p] = run_deployed_party(fed, p, files[p], device="cpu", transport=transports[p])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[p] = exc

        threads = [threading.Thread(target=run, args=(p,)) for p in real]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
    finally:
        for t in transports.values():
            if errors:
                t.abort("benchmark failed")
        for t in transports.values():
            t.close()
        for x in proxies.values():
            x.close()
    if errors:
        raise RuntimeError(f"SplitNN over proxies failed: {errors}")
    payload = sum(s["payload_bytes"] for r in results.values() for s in r.link_stats.values())
    frames = sum(s["frame_bytes"] for r in results.values() for s in r.link_stats.values())
    tcp = sum(x.total for x in proxies.values())
    train_codec = results[fed.active].report.cost["comm"]["bytes"]
    return {"splitnn_wire_epochs": epochs, "splitnn_tcp_bytes": tcp, "splitnn_frame_bytes": frames,
            "splitnn_codec_bytes": payload, "splitnn_train_codec_bytes": train_codec,
            "splitnn_wire_bytes_over_codec_bytes": tcp / payload}


# ------------------------------------------------------------------ part 3: epochs, processes vs threads


def write_tables(out: Path) -> dict[str, Path]:
    """mnist-5k cut into three parties' CSV files: ``row_id`` first, ``label`` at the active party."""
    return wire.write_tables(out, "mnist-5k", 3)


def _compare(net: dict[str, Any], local: dict[str, Any]) -> tuple[bool, float]:
    keys = set(net["metrics"]) | set(local["metrics"])
    diffs = [abs(float(net["metrics"].get(k, float("nan"))) - float(local["metrics"].get(k, float("nan"))))
             for k in keys]
    worst = max(diffs) if diffs else 0.0
    return bool(diffs) and all(d <= 1e-6 for d in diffs), worst


# ------------------------------------------------------------------ part 4: star vs mesh

TOPOLOGY_RUNS = {"splitnn": {}, "easter": {"secagg": "dh", "embedding_size": 32},
                 "hetero-lr": {"key_bits": 1024, "insecure_allow_small_key": True}}
TOPOLOGY_HELPERS = {"hetero-lr": ("arbiter",)}  # its passive parties talk with the arbiter: relayed in a star
TOPOLOGY_DATASETS = {"hetero-lr": "breast-cancer"}  # binary logistic regression; the others: mnist-5k


def measure_topologies(work: Path, epochs: int, batch: int, console: Any, files: dict[str, Path] | None = None,
                       mesh: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """SplitNN and EASTER ``dh`` in 3 processes, mesh and star: epoch seconds, wire bytes, relayed bytes."""
    from securevfl.deploy.certs import make_dev_pki

    console.print("[bold]part 4[/]: star vs mesh topology, 3 processes (launch)")
    if files is None:
        tables = work / "tables"
        tables.mkdir(exist_ok=True)
        files = write_tables(tables)
    pki = work / "pki3"
    if not (pki / "arbiter.pem").exists():
        make_dev_pki([*files, "arbiter"], pki, overwrite=True)
    mesh = dict(mesh or {})
    hub = next(iter(files))
    out: dict[str, Any] = {"topology_dataset": {m: TOPOLOGY_DATASETS.get(m, "mnist-5k") for m in TOPOLOGY_RUNS},
                           "topology_parties": 3, "topology_epochs": epochs,
                           "topology_easter_options": TOPOLOGY_RUNS["easter"]}
    for method, options in TOPOLOGY_RUNS.items():
        helpers = TOPOLOGY_HELPERS.get(method, ())
        tables = files
        if method in TOPOLOGY_DATASETS:
            (work / method).mkdir(exist_ok=True)
            tables = wire.write_tables(work / method, TOPOLOGY_DATASETS[method], 3)
        if method not in mesh:
            mesh[method] = run_network(tables, pki, work, method, epochs, batch, options, helpers=helpers)
        star = run_network(tables, pki, work, method, epochs, batch, options, topology="star", helpers=helpers)
        m_wire, s_wire = mesh[method]["cost"]["wire"], star["cost"]["wire"]

        def carried(wire_: dict[str, Any], star: bool) -> int:
            """Message bytes the physical links carried: relayed ones on both hops, sealed. In a star every physical
            link has the hub at one end; a link between two others is logical (its bytes are in the relayed ones)."""
            return sum(v["payload_bytes"] + v.get("relayed_bytes", 0) for k, v in wire_["links"].items()
                       if not star or hub in k.split("->"))

        same, worst = _compare(star, mesh[method])
        if helpers:  # hetero-lr's Paillier masks are fresh in every run: its codec bytes vary by a byte or so
            m_bytes, s_bytes = mesh[method]["comm_bytes"], star["comm_bytes"]
            same_bytes = set(m_bytes) == set(s_bytes) and all(abs(s_bytes[k] - v) <= 1e-3 * v
                                                              for k, v in m_bytes.items())
        else:
            same_bytes = star["comm_bytes"] == mesh[method]["comm_bytes"]
        out.update({
            f"{method}_epoch_s_mesh": mesh[method]["epoch_s"], f"{method}_epoch_s_star": star["epoch_s"],
            f"{method}_epoch_ratio_star_vs_mesh": star["epoch_s"] / mesh[method]["epoch_s"],
            f"{method}_wall_s_mesh": mesh[method]["wall_s"], f"{method}_wall_s_star": star["wall_s"],
            f"{method}_link_bytes_mesh": carried(m_wire, False), f"{method}_link_bytes_star": carried(s_wire, True),
            f"{method}_bytes_ratio_star_vs_mesh": carried(s_wire, True) / carried(m_wire, False),
            f"{method}_frame_bytes_mesh": m_wire["frame_bytes"], f"{method}_frame_bytes_star": s_wire["frame_bytes"],
            f"{method}_codec_bytes_mesh": m_wire["codec_bytes"], f"{method}_codec_bytes_star": s_wire["codec_bytes"],
            # each relayed message once: as the hub forwarded it (the report's total counts both hops)
            f"{method}_relayed_bytes_star": sum(v.get("relayed_bytes", 0) for k, v in s_wire["links"].items()
                                                if k.startswith(f"{hub}->")),
            f"{method}_relay_overhead_bytes": carried(s_wire, True) - carried(m_wire, False),
            f"{method}_wire_links_mesh": m_wire["links"],
            f"comm_bytes_identical_{method}_star": same_bytes,
            f"metrics_identical_{method}_star": same, f"{method}_metrics_max_abs_diff_star": worst,
            f"{method}_wire_links_star": s_wire["links"],
        })
    return out


def print_topologies(console: Any, figures: dict[str, Any], epochs: int, batch: int) -> None:
    from rich.table import Table

    if "splitnn_epoch_s_star" not in figures:
        return
    table = Table(title=f"mnist-5k (hetero-lr: breast-cancer), 3 processes, batch {batch}: star (only the "
                        "active party listens, it relays "
                        f"passive<->passive sealed) vs mesh; seconds per epoch (epochs 2..{epochs}); message bytes "
                        "all links carried (a relayed message on both hops, sealed)")
    for col in ("method", "mesh s/epoch", "star s/epoch", "ratio", "mesh bytes", "star bytes", "ratio",
                "relayed (sealed)", "codec bytes equal", "metrics equal"):
        table.add_column(col, justify="right")
    for method in TOPOLOGY_RUNS:
        label = {"easter": "easter (dh, emb 32)", "hetero-lr": "hetero-lr (+arbiter)"}.get(method, method)
        table.add_row(label, f"{figures[f'{method}_epoch_s_mesh']:.3f}", f"{figures[f'{method}_epoch_s_star']:.3f}",
                      f"{figures[f'{method}_epoch_ratio_star_vs_mesh']:.2f}",
                      f"{figures[f'{method}_link_bytes_mesh']:,}", f"{figures[f'{method}_link_bytes_star']:,}",
                      f"{figures[f'{method}_bytes_ratio_star_vs_mesh']:.4f}",
                      f"{figures[f'{method}_relayed_bytes_star']:,}",
                      str(figures[f"comm_bytes_identical_{method}_star"]),
                      str(figures[f"metrics_identical_{method}_star"]))
    console.print(table)


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages and epochs (~1-2 min)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--epochs", type=int, default=None, help="epochs of each training run (>= 2)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--skip-training", action="store_true", help="parts 1 and 2 (64 KB) only")
    parser.add_argument("--topology-only", action="store_true", help="part 4 only: star vs mesh (3 processes)")
    args = parser.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    from securevfl.deploy.certs import make_dev_pki

    console = Console(width=140)
    quick = args.quick
    epochs = args.epochs or (4 if quick else 8)
    if epochs < 2:
        parser.error("--epochs must be at least 2 (per-epoch time is measured between epoch ends)")
    plan = {
        "warmup": {"1k": 50, "64k": 20, "16m": 2} if quick else {"1k": 200, "64k": 50, "16m": 3},
        "pings": {"1k": 500, "64k": 300, "16m": 10} if quick else {"1k": 3000, "64k": 1000, "16m": 30},
        "stream": {"64k": 2000, "16m": 16} if quick else {"64k": 5000, "16m": 64},
        "stream_repeats": 1 if quick else 3,
    }
    wire_n = 500 if quick else 2000
    figures: dict[str, Any] = {"quick": quick, "cpu_count": os.cpu_count(), "settings": "NetworkSettings() defaults "
                               "(chunk_kb 1024, send_window_mb 256, heartbeat_s 2)",
                               "echo_peer": "separate process (this script with --echo-peer)", "plan": plan}
    with tempfile.TemporaryDirectory(prefix="securevfl-netbench-") as tmp:
        work = Path(tmp)
        if args.topology_only:
            figures.update(measure_topologies(work, epochs, args.batch_size, console))
            print_topologies(console, figures, epochs, args.batch_size)
            if args.out:
                write_json(args.out, figures, default=str)
                console.print(f"figures: {args.out}")
            return
        pki = work / "pki"
        console.print("[bold]part 1[/]: round trips and throughput, echo peer in its own process")
        make_dev_pki(["a", "b"], pki)
        pairs: dict[str, Any] = {}
        try:  # all three open at once: their round trips are timed in turns
            pairs["grpc"] = GrpcPair(pki)
            pairs["tls"] = TlsPair(pki)
            pairs["bare"] = BarePair(pki)
            figures["tls_socket_version"] = pairs["tls"].version
            measured = measure_messages(pairs, plan, {"grpc": tuple(SIZES), "tls": tuple(SIZES), "bare": BARE_SIZES})
        finally:
            for pair in pairs.values():
                pair.close()
        grpc_figs, tls_figs, bare_figs = measured["grpc"], measured["tls"], measured["bare"]
        figures.update(grpc_figs)
        figures.update({f"tls_socket_{k}": v for k, v in tls_figs.items() if not k.startswith("throughput_messages")})
        figures.update({f"grpc_bare_{k}": v for k, v in bare_figs.items()})
        for label in SIZES:
            figures[f"rtt_p50_ratio_vs_tls_socket_{label}"] = grpc_figs[f"rtt_us_p50_{label}"] / tls_figs[
                f"rtt_us_p50_{label}"]
        for label in BARE_SIZES:
            figures[f"grpc_bare_rtt_p50_ratio_vs_tls_socket_{label}"] = bare_figs[f"rtt_us_p50_{label}"] / tls_figs[
                f"rtt_us_p50_{label}"]
            figures[f"rtt_p50_ratio_vs_grpc_bare_{label}"] = grpc_figs[f"rtt_us_p50_{label}"] / bare_figs[
                f"rtt_us_p50_{label}"]
        for label in ("64k", "16m"):
            figures[f"throughput_ratio_vs_tls_socket_{label}"] = grpc_figs[f"throughput_mb_s_{label}"] / tls_figs[
                f"throughput_mb_s_{label}"]

        console.print("[bold]part 2[/]: bytes on the wire through counting proxies")
        figures.update(measure_wire_64k(pki, wire_n))

        if not args.skip_training:
            console.print("[bold]part 3[/]: mnist-5k, 3 processes (launch) vs party threads (securevfl.train)")
            tables = work / "tables"
            tables.mkdir()
            files = write_tables(tables)
            make_dev_pki(list(files), work / "pki3")
            figures.update(measure_wire_splitnn(work / "pki3", files, work, 1 if quick else 2, args.batch_size))
            runs = {"splitnn": {}, "easter": {"secagg": "dh", "embedding_size": 32}}
            figures.update({"dataset": "mnist-5k", "parties": 3, "epochs": epochs, "batch_size": args.batch_size,
                            "easter_options": runs["easter"], "torch_threads_inprocess": torch.get_num_threads(),
                            "omp_threads_per_party_process": max(1, (os.cpu_count() or 1) // 3)})
            per_process = figures["omp_threads_per_party_process"]
            mesh_runs: dict[str, dict[str, Any]] = {}
            for method, options in runs.items():
                local = run_inprocess(files, method, epochs, args.batch_size, options)
                net = run_network(files, work / "pki3", work, method, epochs, args.batch_size, options)
                mesh_runs[method] = net
                # The same arithmetic as the party processes (torch's thread count changes float sums).
                local1 = run_inprocess(files, method, epochs, args.batch_size, options, torch_threads=per_process)
                same, worst = _compare(net, local1)
                same_default, worst_default = _compare(net, local)
                figures.update({
                    f"{method}_epoch_s_network": net["epoch_s"], f"{method}_epoch_s_inprocess": local["epoch_s"],
                    f"{method}_epoch_ratio_vs_inprocess": net["epoch_s"] / local["epoch_s"],
                    f"{method}_wall_s_network": net["wall_s"], f"{method}_wall_s_inprocess": local["wall_s"],
                    f"{method}_launch_s_network": net["launch_s"],
                    f"{method}_first_epoch_end_s_network": net["first_epoch_end_s"],
                    f"{method}_first_epoch_end_s_inprocess": local["first_epoch_end_s"],
                    f"{method}_metrics_network": net["metrics"], f"{method}_metrics_inprocess": local["metrics"],
                    f"{method}_epoch_s_inprocess_same_threads": local1["epoch_s"],
                    f"{method}_epoch_ratio_vs_inprocess_same_threads": net["epoch_s"] / local1["epoch_s"],
                    f"{method}_metrics_inprocess_same_threads": local1["metrics"],
                    f"metrics_identical_{method}": same, f"{method}_metrics_max_abs_diff": worst,
                    f"metrics_identical_{method}_vs_default_threads": same_default,
                    f"{method}_metrics_max_abs_diff_vs_default_threads": worst_default,
                    f"comm_bytes_identical_{method}": net["comm_bytes"] == local["comm_bytes"],
                    f"{method}_comm_bytes": local["comm_bytes"],
                })
            figures["goal_splitnn_epoch_ratio"] = 1.5
            figures.update(measure_topologies(work, epochs, args.batch_size, console, files=files, mesh=mesh_runs))

    table = Table(title="gRPC + mutual TLS transport vs raw TLS socket (loopback, echo peer in its own process)")
    for col in ("payload", "gRPC p50 µs", "gRPC p90 µs", "TLS socket p50 µs", "p50 ratio",
                "gRPC MB/s", "TLS socket MB/s", "MB/s ratio"):
        table.add_column(col, justify="right")
    for label in SIZES:
        tp = f"throughput_mb_s_{label}"
        table.add_row(label.upper().replace("K", " KB").replace("M", " MB"),
                      f"{figures[f'rtt_us_p50_{label}']:,.0f}", f"{figures[f'rtt_us_p90_{label}']:,.0f}",
                      f"{figures[f'tls_socket_rtt_us_p50_{label}']:,.0f}",
                      f"{figures[f'rtt_p50_ratio_vs_tls_socket_{label}']:.2f}",
                      f"{figures[tp]:,.1f}" if tp in figures else "-",
                      f"{figures['tls_socket_' + tp]:,.1f}" if tp in figures else "-",
                      f"{figures[f'throughput_ratio_vs_tls_socket_{label}']:.2f}" if tp in figures else "-")
    console.print(table)
    console.print("bare gRPC in the same layout (no frames, ACKs or checks): " + "; ".join(
        f"{label.upper().replace('K', ' KB')} p50 {figures[f'grpc_bare_rtt_us_p50_{label}']:,.0f} µs = "
        f"{figures[f'grpc_bare_rtt_p50_ratio_vs_tls_socket_{label}']:.2f}x the TLS socket, the transport "
        f"{figures[f'rtt_p50_ratio_vs_grpc_bare_{label}']:.2f}x bare gRPC" for label in BARE_SIZES))
    wire = Table(title="TCP bytes on the wire (both directions, TLS handshake + HTTP/2 + gRPC + frames + ACKs + "
                       "heartbeats) / payload bytes")
    for col in ("traffic", "payload bytes", "TCP bytes", "ratio"):
        wire.add_column(col, justify="right")
    wire.add_row(f"{figures['wire_messages_64k']} x 64 KB, whole session",
                 f"{figures['wire_codec_bytes_64k']:,}", f"{figures['wire_tcp_bytes_64k']:,}",
                 f"{figures['wire_bytes_over_codec_bytes']:.4f}")
    wire.add_row("  of which connection set-up (TLS, HTTP/2, HELLO)", "0",
                 f"{figures['wire_tcp_bytes_handshake_64k']:,}", "-")
    wire.add_row("  during the batch only", "", "", f"{figures['wire_bytes_over_codec_bytes_steady']:.4f}")
    if "splitnn_tcp_bytes" in figures:
        wire.add_row(f"SplitNN mnist-5k, {figures['splitnn_wire_epochs']} epoch(s), PSI + setup + training",
                     f"{figures['splitnn_codec_bytes']:,}", f"{figures['splitnn_tcp_bytes']:,}",
                     f"{figures['splitnn_wire_bytes_over_codec_bytes']:.4f}")
    console.print(wire)
    if "splitnn_epoch_s_network" in figures:
        train = Table(title=f"mnist-5k, 3 parties, batch {args.batch_size}: seconds per epoch "
                            f"(epochs 2..{epochs}), 3 processes over gRPC+mTLS vs party threads")
        t_def, t_pp = figures["torch_threads_inprocess"], figures["omp_threads_per_party_process"]
        for col in ("method", f"threads x{t_def} (peer)", "3 procs", "ratio", f"threads x{t_pp}", "ratio",
                    "metrics equal*", "max |diff|*", "wall thr.", "wall procs"):
            train.add_column(col, justify="right")
        for method in ("splitnn", "easter"):
            train.add_row(method if method == "splitnn" else "easter (dh, emb 32)",
                          f"{figures[f'{method}_epoch_s_inprocess']:.3f}",
                          f"{figures[f'{method}_epoch_s_network']:.3f}",
                          f"{figures[f'{method}_epoch_ratio_vs_inprocess']:.2f}",
                          f"{figures[f'{method}_epoch_s_inprocess_same_threads']:.3f}",
                          f"{figures[f'{method}_epoch_ratio_vs_inprocess_same_threads']:.2f}",
                          str(figures[f"metrics_identical_{method}"]),
                          f"{figures[f'{method}_metrics_max_abs_diff']:.1e}",
                          f"{figures[f'{method}_wall_s_inprocess']:.1f}", f"{figures[f'{method}_wall_s_network']:.1f}")
        console.print(train)
        print_topologies(console, figures, epochs, args.batch_size)
        console.print(f"goal: splitnn ratio <= 1.5 (against the peer). Each party process runs torch with {t_pp} "
                      f"thread(s) (launch sets OMP_NUM_THREADS); the threaded run uses {t_def}. *Metrics are "
                      f"compared with the threaded run at {t_pp} torch thread(s): same float arithmetic. Against "
                      f"{t_def} threads: splitnn identical = {figures['metrics_identical_splitnn_vs_default_threads']},"
                      f" easter identical = {figures['metrics_identical_easter_vs_default_threads']} (max |diff| "
                      f"{figures['easter_metrics_max_abs_diff_vs_default_threads']:.1e}): torch's thread count "
                      "changes float sums, not the transport. Walls include PSI and start-up.")
    if args.out:
        write_json(args.out, figures, default=str)
        console.print(f"figures: {args.out}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--echo-peer":
        {"grpc": _grpc_echo, "tls": _tls_echo, "bare": _bare_echo}[sys.argv[2]](json.loads(sys.argv[3]))
    else:
        main()
