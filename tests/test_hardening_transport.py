"""A deployed party's transport under a hostile or misconfigured peer (issue 26, items 1-7).

Every transport here binds 127.0.0.1 on an ephemeral port and is closed by the test; timeouts are
short so that a regression fails in seconds instead of hanging the suite.
"""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import grpc
import psutil
import pytest
from net_helpers import close_together, free_port

from securevfl.errors import ConfigError, PeerTimeoutError, ProtocolError, RunAborted
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport import GrpcTransport, LinkRefusedError, NetworkSettings, TlsCredentials
from securevfl.federation.grpc_transport import outlink as gt_outlink
from securevfl.federation.grpc_transport import server as gt_server
from securevfl.federation.transport import Envelope

FAST_KW = {"peer_timeout_s": 4, "heartbeat_s": 0.3, "connect_timeout_s": 6, "chunk_kb": 64,
           "reconnect_backoff_s": 0.05, "max_backoff_s": 0.5}
FAST = NetworkSettings(**FAST_KW)
NO_ABORT = threading.Event()
MB = 1024 * 1024
METHOD = "/securevfl.Link/Exchange"


@pytest.fixture(scope="module")
def pki(dev_pki):
    expired = dev_pki("ab", days=1, now=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=30))
    return {"good": dev_pki("abc"), "other": dev_pki("ab"), "expired": expired}


def creds(directory: Path, party: str, ca_dir: Path | None = None) -> TlsCredentials:
    ca_dir = ca_dir or directory
    return TlsCredentials((directory / f"{party}.pem").read_bytes(), (directory / f"{party}.key").read_bytes(),
                          (ca_dir / "ca.pem").read_bytes())


class Federation:
    """One transport per party in this process; all closed at the end."""

    def __init__(self, names=("a", "b")) -> None:
        self.addresses = {n: f"127.0.0.1:{free_port()}" for n in names}
        self.transports: dict[str, GrpcTransport] = {}

    def start(self, name: str, **overrides) -> GrpcTransport:
        options = {"tls": None, "insecure": True, "fingerprint": "f", "job": {"epochs": 1}, "settings": FAST,
                   **overrides}
        self.transports[name] = GrpcTransport(name, self.addresses, **options).start()
        return self.transports[name]

    def close(self) -> None:
        close_together(self.transports.values())


@pytest.fixture
def federation():
    made: list[Federation] = []

    def make(*args, **kwargs) -> Federation:
        made.append(Federation(*args, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.close()


def raw_channel(address: str, tls: TlsCredentials | None = None, name: str = "") -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.root_ca, private_key=tls.private_key,
                                               certificate_chain=tls.cert_chain)
    return grpc.secure_channel(address, credentials, options=[("grpc.ssl_target_name_override", name)])


def queued_bytes(transport: GrpcTransport, src: str) -> int:
    """What one incoming link holds: whole messages not yet taken by recv, and the message in progress."""
    inbox = transport._inboxes[src]
    partial = sum(len(p) for p in getattr(inbox.reassembly, "_parts", []))
    return sum(len(e.payload) for e in inbox.envelopes) + partial


# ------------------------------------------------------------------ item 1: a flooding peer


def test_a_flooding_peer_is_held_back_by_the_receive_buffer(federation):
    fed = federation()
    receiver = fed.start("b", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 256}, max_message_mb=2,
                                                       recv_buffer_mb=4))
    sender = fed.start("a", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 256}, send_window_mb=2))
    sender.wait_ready(), receiver.wait_ready()
    rss_before = psutil.Process().memory_info().rss
    count, sent = 150, []

    def flood() -> None:
        for i in range(count):
            sender.send(Envelope("a", "b", "flood", i, bytes([i % 256]) * MB))
            sent.append(i)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    stable_since, last = time.monotonic(), -1
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and len(sent) < count:  # until the sender blocks (or finishes)
        if len(sent) != last:
            stable_since, last = time.monotonic(), len(sent)
        elif time.monotonic() - stable_since > 1.0:
            break
        time.sleep(0.05)
    held = queued_bytes(receiver, "a")
    grown = psutil.Process().memory_info().rss - rss_before
    assert len(sent) < count, "the flood was never held back"
    assert held <= 4 * MB + 256 * 1024, f"the receiver queued {held:,} bytes from one link"
    assert grown < 60 * MB, f"RSS grew by {grown / MB:.0f} MiB during a {count} MiB flood"
    got = [receiver.recv("b", "a", NO_ABORT, timeout=10) for _ in range(count)]  # nothing lost once consumed
    assert [e.depth for e in got] == list(range(count))
    thread.join(5)
    assert not thread.is_alive() and len(sent) == count


def test_a_sender_held_back_longer_than_the_receive_timeout_gets_a_named_error(federation):
    fed = federation()
    receiver = fed.start("b", settings=NetworkSettings(**FAST_KW, max_message_mb=1))
    sender = fed.start("a", settings=NetworkSettings(**FAST_KW, send_window_mb=1, recv_timeout_s=1))
    sender.wait_ready(), receiver.wait_ready()
    started = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="a waited 1 s for b to take its messages") as held:
        for i in range(64):  # b never receives: its buffer (1 MiB) and a's window (1 MiB) fill
            sender.send(Envelope("a", "b", "flood", i, b"\1" * (512 * 1024)))
    assert held.value.peer == "b" and time.monotonic() - started < 6
    assert queued_bytes(receiver, "a") <= MB + 64 * 1024


# ------------------------------------------------------------------ item 2: idle streams


def _idle_streams(address: str, n: int, tls: TlsCredentials | None = None, name: str = ""):
    """Open ``n`` Exchange streams that send nothing; returns (channels, release)."""
    release = threading.Event()

    def nothing():
        release.wait(20)
        return
        yield b""  # a generator that sends nothing

    channels, calls = [], []
    for _ in range(n):
        channel = raw_channel(address, tls, name)
        stream = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        calls.append(stream(nothing(), timeout=20))
        channels.append(channel)

    def stop() -> None:
        release.set()
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()

    return stop


def test_idle_streams_with_a_valid_certificate_do_not_starve_an_honest_party(federation, pki):
    good = pki["good"]
    fed = federation(("a", "b", "c"))
    fed.start("b", tls=creds(good, "b"), insecure=False)
    stop = _idle_streams(fed.addresses["b"], 10, creds(good, "c"), "b")  # c's certificate, ten idle streams
    try:
        time.sleep(0.5)
        a = fed.start("a", tls=creds(good, "a"), insecure=False)
        c = fed.start("c", tls=creds(good, "c"), insecure=False)
        started = time.monotonic()
        a.wait_ready(timeout=6)
        c.wait_ready(timeout=6)
        fed.transports["b"].wait_ready(timeout=6)
        assert time.monotonic() - started < 6
        a.send(Envelope("a", "b", "hi", 1, b"through"))
        assert fed.transports["b"].recv("b", "a", NO_ABORT, timeout=5).payload == b"through"
    finally:
        stop()


def test_streams_without_a_hello_are_dropped_so_an_honest_party_connects(federation, monkeypatch):
    monkeypatch.setattr(gt_server, "HELLO_TIMEOUT_S", 1.0)  # where the servicer reads it
    fed = federation()
    b = fed.start("b")
    stop = _idle_streams(fed.addresses["b"], 10)
    try:
        time.sleep(0.5)
        a = fed.start("a")
        a.wait_ready(timeout=6)
        b.wait_ready(timeout=6)
        a.send(Envelope("a", "b", "hi", 1, b"through"))
        assert b.recv("b", "a", NO_ABORT, timeout=5).payload == b"through"
    finally:
        stop()


# ------------------------------------------------------------------ item 3: a busy port


def test_a_busy_port_is_a_config_error_naming_party_and_address():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        transport = GrpcTransport("a", {"a": address, "b": f"127.0.0.1:{free_port()}"}, tls=None, insecure=True,
                                  settings=FAST)
        with pytest.raises(ConfigError, match=f"a cannot listen on {address}"):
            transport.start()


def test_a_busy_port_is_one_line_and_exit_code_2_from_the_cli(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        federation_file = tmp_path / "fed.toml"
        federation_file.write_text(textwrap.dedent(f"""
            [federation]
            active = "bank"
            insecure = true

            [parties.bank]
            address = "127.0.0.1:{free_port()}"

            [parties.shop]
            address = "127.0.0.1:{free_port()}"

            [parties.arbiter]
            address = "{address}"
            data = false

            [job]
            method = "hetero-lr"
            id_column = "customer_id"
            label_column = "churn"
        """))
        child = subprocess.run([sys.executable, "-m", "securevfl.cli", "party", "--federation", str(federation_file),
                                "--as", "arbiter", "--insecure"], capture_output=True, text=True, timeout=120)
    errors = [line for line in child.stderr.splitlines() if not line.startswith("[arbiter]")]
    assert child.returncode == 2, child.stderr
    assert len(errors) == 1 and errors[0].startswith("error: arbiter cannot listen on " + address), child.stderr


# ------------------------------------------------------------------ item 4: TLS handshake failures


def test_a_party_from_another_federation_is_told_which_side_failed(federation, pki):
    fed = federation()
    a = fed.start("a", tls=creds(pki["good"], "a"), insecure=False)
    b = fed.start("b", tls=creds(pki["other"], "b"), insecure=False)  # b's certificate and CA: another federation
    started = time.monotonic()
    with pytest.raises(LinkRefusedError) as at_a:
        a.wait_ready(timeout=6)
    with pytest.raises(LinkRefusedError) as at_b:
        b.wait_ready(timeout=6)
    assert time.monotonic() - started < 4
    assert at_a.value.peer == "b" and at_b.value.peer == "a"
    assert "a rejected the certificate of b" in str(at_a.value)
    assert "not signed by the federation CA" in str(at_a.value) and "unknown CA" in str(at_a.value)
    assert "b rejected the certificate of a" in str(at_b.value) and "b's [tls] ca" in str(at_b.value)


def test_an_expired_certificate_is_named_as_expired(federation, pki):
    fed = federation()
    a = fed.start("a", tls=creds(pki["expired"], "a"), insecure=False)
    fed.start("b", tls=creds(pki["expired"], "b"), insecure=False)  # the CA and both certificates expired
    with pytest.raises(LinkRefusedError, match="a rejected the certificate of b .*expired"):
        a.wait_ready(timeout=6)


def test_grpc_core_logs_do_not_reach_the_terminal(pki):
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from net_helpers import free_port
        from securevfl.federation.grpc_transport import GrpcTransport, NetworkSettings, TlsCredentials
        def creds(d, party):
            d = Path(d)
            return TlsCredentials((d / f"{{party}}.pem").read_bytes(), (d / f"{{party}}.key").read_bytes(),
                                  (d / "ca.pem").read_bytes())
        s = NetworkSettings(peer_timeout_s=4, heartbeat_s=0.3, connect_timeout_s=3, reconnect_backoff_s=0.05,
                            max_backoff_s=0.2)
        addresses = {{"a": f"127.0.0.1:{{free_port()}}", "b": f"127.0.0.1:{{free_port()}}"}}
        a = GrpcTransport("a", addresses, tls=creds({str(pki["good"])!r}, "a"), settings=s).start()
        b = GrpcTransport("b", addresses, tls=creds({str(pki["other"])!r}, "b"), settings=s).start()
        for t in (a, b):
            try:
                t.wait_ready()
            except Exception as exc:
                print(type(exc).__name__)
            t.abort("over")
        a.close(), b.close()
    """)], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in __import__("os").environ.items() if k != "GRPC_VERBOSITY"})
    assert child.stdout.split() == ["LinkRefusedError", "LinkRefusedError"], child.stderr
    assert "Handshake failed" not in child.stderr and "ssl_transport_security" not in child.stderr, child.stderr


# ------------------------------------------------------------------ item 5: a forged HELLO


def _hello_then_refuse(address: str, hello: fr.Frame, tls: TlsCredentials | None = None, name: str = "") -> fr.Frame:
    channel = raw_channel(address, tls, name)
    try:
        stream = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        answers = list(stream(iter([fr.encode_frame(hello)]), timeout=5))
    finally:
        channel.close()
    return fr.decode_frame(answers[0], max_chunk=4096)


def test_a_forged_hello_does_not_break_the_honest_partys_link(federation):
    fed = federation()
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    answer = _hello_then_refuse(fed.addresses["b"], fr.Frame(fr.Kind.HELLO, src="a", dst="b", text="forged"))
    assert answer.kind == fr.Kind.REFUSE
    a.send(Envelope("a", "b", "hi", 1, b"still here"))
    assert b.recv("b", "a", NO_ABORT, timeout=5).payload == b"still here"


def test_a_hello_claiming_another_party_is_charged_to_the_certificate(federation, pki):
    good = pki["good"]
    fed = federation(("a", "b", "c"))
    a, b, c = (fed.start(n, tls=creds(good, n), insecure=False) for n in ("a", "b", "c"))
    for t in (a, b, c):
        t.wait_ready(timeout=6)
    # c holds a valid certificate for c and claims to be a
    answer = _hello_then_refuse(fed.addresses["b"], fr.Frame(fr.Kind.HELLO, src="a", dst="b", text="f",
                                                             job={"epochs": 1}), creds(good, "c"), "b")
    assert answer.kind == fr.Kind.REFUSE and "claims to come from a" in answer.text
    a.send(Envelope("a", "b", "hi", 1, b"still here"))
    assert b.recv("b", "a", NO_ABORT, timeout=5).payload == b"still here"
    with pytest.raises(LinkRefusedError, match="c") as refused:
        b.recv("b", "c", NO_ABORT, timeout=5)
    assert refused.value.peer == "c" and "claims to come from a" in str(refused.value)


# ------------------------------------------------------------------ item 6: oversized frames and messages


def test_different_chunk_sizes_are_refused_at_once_naming_the_key(federation):
    fed = federation()
    a = fed.start("a", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 256}))
    b = fed.start("b", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 16}))
    started = time.monotonic()
    for t in (a, b):
        with pytest.raises(LinkRefusedError, match="a sends chunks of 256 KiB but b accepts 16 KiB.*chunk_kb"):
            t.wait_ready(timeout=6)
    assert time.monotonic() - started < 3


def test_an_oversized_message_is_refused_at_once_at_both_ends(federation):
    fed = federation()
    b = fed.start("b", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 16}, max_message_mb=0.05))
    a = fed.start("a", settings=NetworkSettings(**{**FAST_KW, "chunk_kb": 16}))
    a.wait_ready(), b.wait_ready()
    started = time.monotonic()
    a.send(Envelope("a", "b", "huge", 1, b"\0" * 60_000))
    with pytest.raises(ProtocolError, match="from a.*60,000 bytes.*b's max_message_mb = 0.05.*a's is 1024") as at_b:
        b.recv("b", "a", NO_ABORT, timeout=10)
    assert "malformed" not in str(at_b.value)
    with pytest.raises(LinkRefusedError, match="b refused.*max_message_mb") as at_a:
        a.recv("a", "b", NO_ABORT, timeout=10)
    assert at_a.value.peer == "b"
    assert time.monotonic() - started < 3


# ------------------------------------------------------------------ item 7: absurd settings


@pytest.mark.parametrize("key, value, limit", [
    ("max_message_mb", 1e12, "4096"),
    ("peer_timeout_s", 1e9, "86400"),
    ("connect_timeout_s", 1e7, "86400"),
    ("recv_timeout_s", 1e7, "86400"),
    ("send_window_mb", 1e9, "4096"),
    ("recv_buffer_mb", 1e9, "16384"),
    ("max_backoff_s", 1e6, "3600"),
    ("heartbeat_s", 1e-6, "0.05"),
])
def test_absurd_network_settings_are_refused_naming_key_and_range(key, value, limit):
    with pytest.raises(ConfigError, match=rf"\[network\] {key} must be .*{limit}"):
        NetworkSettings(**{key: value})


def test_the_receive_buffer_must_hold_one_whole_message():
    with pytest.raises(ConfigError, match="recv_buffer_mb .*at least max_message_mb"):
        NetworkSettings(max_message_mb=64, recv_buffer_mb=32)
    assert NetworkSettings(max_message_mb=64).recv_buffer_bytes == 64 * MB  # by default: one whole message


def test_a_new_stream_from_the_same_peer_ends_the_old_one(federation):
    fed = federation()
    b = fed.start("b")
    hello = fr.encode_frame(fr.Frame(fr.Kind.HELLO, src="a", dst="b", text="f", job={"epochs": 1}, chunk_kb=64,
                                     max_message=FAST.max_message_bytes))
    release = threading.Event()

    def hello_then_idle():
        yield hello
        release.wait(10)

    channel = raw_channel(fed.addresses["b"])
    try:
        stream = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        first = stream(hello_then_idle(), timeout=10)
        assert fr.decode_frame(next(first), max_chunk=4096).kind == fr.Kind.HELLO_ACK
        second = stream(hello_then_idle(), timeout=10)
        assert fr.decode_frame(next(second), max_chunk=4096).kind == fr.Kind.HELLO_ACK
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as ended:  # the old stream's handler returned: its thread is free
            next(first)
        assert ended.value.code() == grpc.StatusCode.CANCELLED and time.monotonic() - started < 2
        assert b._inboxes["a"].context is not None
        second.cancel()
    finally:
        release.set()
        channel.close()


# ------------------------------------------------------------------ a second process of a party


def _exchange_both_ways(x: GrpcTransport, y: GrpcTransport, tag: str) -> None:
    x.send(Envelope(x.party, y.party, tag, 1, b"from " + x.party.encode()))
    y.send(Envelope(y.party, x.party, tag, 1, b"from " + y.party.encode()))
    assert y.recv(y.party, x.party, NO_ABORT, timeout=5).payload == b"from " + x.party.encode()
    assert x.recv(x.party, y.party, NO_ABORT, timeout=5).payload == b"from " + y.party.encode()


@pytest.mark.parametrize("fingerprint", ["f-predict", "f"])  # another phase of the job; the same job (a duplicate)
def test_a_second_process_of_a_party_is_refused_and_the_live_session_goes_on(federation, pki, fingerprint):
    good = pki["good"]
    fed = federation(("a", "b", "c"))
    a, b, c = (fed.start(n, tls=creds(good, n), insecure=False) for n in ("a", "b", "c"))
    for t in (a, b, c):
        t.wait_ready(timeout=6)
    _exchange_both_ways(a, b, "before")
    started = time.monotonic()
    second = GrpcTransport("b", {**fed.addresses, "b": f"127.0.0.1:{free_port()}"}, tls=creds(good, "b"),
                           fingerprint=fingerprint, job={"epochs": 1}, settings=FAST)
    try:
        second.start()
        with pytest.raises(LinkRefusedError) as refused:
            second.wait_ready(timeout=6)
        assert time.monotonic() - started < 4
    finally:
        second.abort("test over")
        second.close()
    time.sleep(0.3)  # what a refusal would break has happened by now
    for x, y in ((a, b), (b, c), (a, c)):
        _exchange_both_ways(x, y, "after")
    assert all(t._inboxes[p].error is None for t in (a, b, c) for p in t.peers)
    assert refused.value.peer in ("a", "c") and "live link from b" in str(refused.value)  # says what happened


# ------------------------------------------------------------------ a frame over the receiver's limit


@pytest.mark.parametrize("size, chunk_kb", [(200_000, 256), (1_000_000, 1024)])  # over the frame limit; over gRPC's
def test_an_oversized_frame_is_named_at_once_at_both_ends(federation, monkeypatch, size, chunk_kb):
    fed = federation()
    b = fed.start("b")  # accepts frames of chunk_kb = 64 (plus the frame header)
    big = NetworkSettings(**{**FAST_KW, "chunk_kb": chunk_kb})
    opened = gt_outlink._open_channel  # where the links look it up
    with monkeypatch.context() as patch:  # a claims chunk_kb = 64 in its HELLO, but its channel sends larger frames
        patch.setattr(gt_outlink, "_open_channel", lambda owner, *args, **kw: opened(
            type("Owner", (), {"settings": big, "tls": owner.tls})(), *args, **kw))
        a = fed.start("a")
    a.wait_ready(), b.wait_ready()
    a._links["b"].settings = big  # ... and cuts chunk_kb-sized ones
    started = time.monotonic()
    a.send(Envelope("a", "b", "huge", 1, b"\0" * size))
    said = rf"a sent a frame of {size // 1000:,},\d{{3}} bytes, over b's limit of [\d,]+ bytes"
    with pytest.raises((ProtocolError, RunAborted), match=said) as at_b:
        b.recv("b", "a", NO_ABORT, timeout=10)
    assert time.monotonic() - started < 2.5
    with pytest.raises(LinkRefusedError, match=said) as at_a:
        a.recv("a", "b", NO_ABORT, timeout=10)
    assert at_a.value.peer == "b" and "lost" not in str(at_b.value)
    assert time.monotonic() - started < 2.5
