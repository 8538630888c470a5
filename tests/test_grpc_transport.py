"""The gRPC transport on loopback: delivery, chunking, mutual TLS, job agreement, faults.

Every transport here binds 127.0.0.1 on an ephemeral port and is closed by the test; timeouts are
short so a failure cannot hang the suite.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from net_helpers import CuttingProxy, close_together, free_port

from securevfl.deploy.federation_file import job_differences
from securevfl.errors import ConfigError, PeerFinishedError, PeerTimeoutError, ProtocolError, RunAborted
from securevfl.federation import frames as fr
from securevfl.federation.grpc_transport import (
    GrpcTransport,
    LinkRefusedError,
    NetworkSettings,
    PeerLostError,
    TlsCredentials,
)
from securevfl.federation.runtime import run_party
from securevfl.federation.transport import Envelope

FAST = NetworkSettings(peer_timeout_s=4, heartbeat_s=0.3, connect_timeout_s=6, chunk_kb=64,
                       reconnect_backoff_s=0.05, max_backoff_s=0.5)
NO_ABORT = threading.Event()


@pytest.fixture(scope="module")
def pki(dev_pki):
    return dev_pki("abc"), dev_pki("ab")  # a federation's CA, and another


def creds(directory, party, ca_dir=None):
    ca_dir = ca_dir or directory
    return TlsCredentials((directory / f"{party}.pem").read_bytes(), (directory / f"{party}.key").read_bytes(),
                          (ca_dir / "ca.pem").read_bytes())


class Federation:
    """Start one transport per party in this process; close them all at the end."""

    def __init__(self, names=("a", "b"), addresses=None, **kwargs):
        self.addresses = addresses or {n: f"127.0.0.1:{free_port()}" for n in names}
        self.kwargs = kwargs
        self.transports: dict[str, GrpcTransport] = {}

    def start(self, name, **overrides):
        options = {"tls": None, "insecure": True, "fingerprint": "f", "job": {"epochs": 1}, "settings": FAST,
                   **self.kwargs, **overrides}
        self.transports[name] = GrpcTransport(name, self.addresses, **options).start()
        return self.transports[name]

    def close(self):
        close_together(self.transports.values())


@pytest.fixture
def federation():
    made = []

    def make(*args, **kwargs):
        made.append(Federation(*args, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.close()


def test_messages_arrive_in_order_and_large_ones_in_chunks(federation):
    fed = federation()
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    big = bytes(range(256)) * (5 * 4096)  # 5 MiB: 80 chunks of 64 KiB
    for i in range(20):
        a.send(Envelope("a", "b", f"t{i}", i, i.to_bytes(2, "big") * 100))
    a.send(Envelope("a", "b", "big", 99, big))
    got = [b.recv("b", "a", NO_ABORT, timeout=10) for _ in range(21)]
    assert [e.tag for e in got] == [f"t{i}" for i in range(20)] + ["big"]
    assert got[-1].payload == big and got[-1].depth == 99
    assert a.link_stats()["a->b"]["payload_bytes"] == sum(len(e.payload) for e in got)


def test_finished_peer_and_aborting_peer_stop_the_receiver(federation):
    fed = federation(("a", "b", "c"))
    a, b, c = fed.start("a"), fed.start("b"), fed.start("c")
    for t in (a, b, c):
        t.wait_ready()
    a.send(Envelope("a", "b", "last", 1, b"x"))
    a.finish("a")
    assert b.recv("b", "a", NO_ABORT, timeout=10).tag == "last"
    with pytest.raises(PeerFinishedError, match="a"):
        b.recv("b", "a", NO_ABORT, timeout=10)
    c.abort("c failed during epoch 3: ValueError: disk on fire")
    started = time.monotonic()
    with pytest.raises(RunAborted, match="c aborted the run: c failed during epoch 3"):
        b.recv("b", "c", NO_ABORT, timeout=10)
    assert time.monotonic() - started < 3


def test_oversize_messages_are_refused_at_both_ends(federation):
    small = NetworkSettings(peer_timeout_s=4, heartbeat_s=0.3, connect_timeout_s=6, chunk_kb=16,
                            max_message_mb=0.05)
    fed = federation(settings=small)
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    with pytest.raises(ProtocolError, match="max_message_mb"):
        a.send(Envelope("a", "b", "huge", 1, b"\0" * 60_000))
    # A sender with a larger limit: the receiver still refuses, naming the sender.
    fed2 = federation(settings=small)
    fed2.start("b")
    loose = fed2.start("a", settings=NetworkSettings(peer_timeout_s=4, heartbeat_s=0.3, connect_timeout_s=6,
                                                     chunk_kb=16))
    loose.wait_ready()
    loose.send(Envelope("a", "b", "huge", 1, b"\0" * 60_000))
    with pytest.raises(ProtocolError, match="from a.*exceeds"):
        fed2.transports["b"].recv("b", "a", NO_ABORT, timeout=10)


def test_plaintext_is_refused_off_loopback():
    with pytest.raises(ConfigError, match="loopback only"):
        GrpcTransport("a", {"a": "127.0.0.1:1", "b": "10.1.2.3:7000"}, tls=None, insecure=True)
    with pytest.raises(ConfigError, match="needs TLS"):
        GrpcTransport("a", {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, tls=None)


def test_mutual_tls_carries_data(federation, pki):
    good, _ = pki
    fed = federation(insecure=False)
    a, b = fed.start("a", tls=creds(good, "a")), fed.start("b", tls=creds(good, "b"))
    a.wait_ready(), b.wait_ready()
    b.send(Envelope("b", "a", "hello", 1, b"over tls"))
    assert a.recv("a", "b", NO_ABORT, timeout=10).payload == b"over tls"


def test_a_certificate_from_another_ca_is_refused_before_any_data(federation, pki):
    good, other = pki
    fed = federation(insecure=False)
    a = fed.start("a", tls=creds(good, "a"))
    b = fed.start("b", tls=creds(other, "b", ca_dir=good))  # b's certificate is from another CA
    with pytest.raises(LinkRefusedError, match="'b'.*not signed by the federation CA|not signed by the federation CA"):
        a.wait_ready(timeout=6)
    assert all(not inbox.envelopes for inbox in a._inboxes.values())
    assert b.received_frame_bytes["a"] == 0  # a never got past b's handshake


def test_a_valid_certificate_for_the_wrong_party_is_refused(federation, pki):
    good, _ = pki
    fed = federation(insecure=False)
    a = fed.start("a", tls=creds(good, "a"))
    fed.start("b", tls=creds(good, "c"))  # at b's address: c's (valid) certificate
    with pytest.raises(LinkRefusedError, match="does not name 'b'|names \\['c'\\], but the stream claims"):
        a.wait_ready(timeout=6)
    b = fed.transports["b"]
    with pytest.raises(LinkRefusedError, match="names \\['c'\\], but the stream claims to come from b"):
        b.wait_ready(timeout=6)
    assert b.received_frame_bytes["a"] == 0 and a.received_frame_bytes["b"] == 0


def test_a_job_mismatch_is_refused_with_the_differing_keys(federation):
    fed = federation()
    a = fed.start("a", fingerprint="f1", job={"job": {"epochs": 20, "method": "splitnn", "seed": 0}},
                  differences=job_differences)
    b = fed.start("b", fingerprint="f2", job={"job": {"epochs": 10, "method": "splitnn", "seed": 1}},
                  differences=job_differences)
    for t in (a, b):
        with pytest.raises(LinkRefusedError, match="differing keys: job.epochs, job.seed"):
            t.wait_ready(timeout=6)


def test_a_dead_peer_is_reported_within_the_peer_timeout(federation):
    fed = federation()
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    # b's process "dies": its server and links stop without FIN or ABORT.
    for link in b._links.values():
        link.closing = True
        link._call.cancel()
    b._server.stop(grace=0)
    started = time.monotonic()
    with pytest.raises(PeerLostError, match="nothing from b|link to b"):
        a.recv("a", "b", NO_ABORT, timeout=30)
    assert time.monotonic() - started <= FAST.peer_timeout_s + 2
    fed.transports.pop("b")


def test_a_cut_connection_reconnects_without_loss_duplication_or_reordering(federation):
    addresses = {"a": f"127.0.0.1:{free_port()}", "b": f"127.0.0.1:{free_port()}"}
    proxy = CuttingProxy(int(addresses["b"].rsplit(":", 1)[1]))
    try:
        sender = federation(addresses={"a": addresses["a"], "b": proxy.address})  # a reaches b through the proxy
        receiver = federation(addresses=addresses)
        a, b = sender.start("a"), receiver.start("b")
        a.wait_ready(), b.wait_ready()
        received = []
        payload = b"\x5a" * 200_000  # 4 chunks each, so cuts land inside messages too
        for i in range(40):
            a.send(Envelope("a", "b", f"m{i}", i, payload + i.to_bytes(4, "big")))
            if i in (5, 17, 30):
                proxy.cut()
            if i % 4 == 3:
                while len(received) <= i - 2:
                    received.append(b.recv("b", "a", NO_ABORT, timeout=15))
        while len(received) < 40:
            received.append(b.recv("b", "a", NO_ABORT, timeout=15))
        assert [e.tag for e in received] == [f"m{i}" for i in range(40)]
        assert all(e.payload == payload + i.to_bytes(4, "big") for i, e in enumerate(received))
        assert a.link_stats()["a->b"]["reconnects"] >= 1 and proxy.cuts == 3
        with pytest.raises(PeerTimeoutError):
            b.recv("b", "a", NO_ABORT, timeout=0.5)  # nothing duplicated behind the 40 messages
    finally:
        proxy.close()


def test_garbage_frames_are_a_protocol_error_naming_the_peer(federation):
    fed = federation()
    b = fed.start("b")
    channel = grpc.insecure_channel(fed.addresses["b"])
    stream = channel.stream_stream("/securevfl.Link/Exchange", request_serializer=None, response_deserializer=None)
    hello = fr.encode_frame(fr.Frame(fr.Kind.HELLO, src="a", dst="b", text="f", job={"epochs": 1}))
    answers = list(stream(iter([hello, b"\x93\x01\x04\xff garbage"]), timeout=10))
    channel.close()
    kinds = [fr.decode_frame(x, max_chunk=4096).kind for x in answers]
    assert kinds == [fr.Kind.HELLO_ACK, fr.Kind.REFUSE]
    with pytest.raises(ProtocolError, match="malformed frame from a"):
        b.recv("b", "a", NO_ABORT, timeout=5)
    assert b._known_gone("a")  # closing b does not wait out the 2 s ABORT flush for a peer nothing reaches (issue 47)


def test_the_runtime_runs_one_party_per_transport(federation):
    fed = federation()
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    assert not a._known_gone("b") and not b._known_gone("a")
    results = {}

    def active(ctx):
        total = 0
        for i in range(5):
            ctx.send("b", "ping", i)
            total += ctx.recv("b", "pong")
        return total

    def passive(ctx):
        for _ in range(5):
            ctx.send("a", "pong", ctx.recv("a", "ping") * 10)
        return "done"

    thread = threading.Thread(target=lambda: results.update(
        b=run_party(passive, name="b", active="a", parties=("a", "b"), transport=b)))
    thread.start()
    results["a"] = run_party(active, name="a", active="a", parties=("a", "b"), transport=a)
    thread.join(10)
    assert results["a"][0] == 100 and results["b"][0] == "done"
    assert results["a"][1].snapshot().merged(results["b"][1].snapshot()).rounds == 10


# ------------------------------------------------------------------ fuzz: link frames

frames_strategy = st.one_of(
    st.builds(fr.Frame, st.just(fr.Kind.DATA), seq=st.integers(0, 2**40), tag=st.text(max_size=20),
              depth=st.integers(0, 1000), chunk=st.just(0), chunks=st.just(1), total=st.integers(0, 64),
              payload=st.binary(max_size=64)),
    st.builds(fr.Frame, st.sampled_from([fr.Kind.ACK, fr.Kind.FIN, fr.Kind.HELLO_ACK]), seq=st.integers(0, 2**40)),
    st.builds(fr.Frame, st.sampled_from([fr.Kind.ABORT, fr.Kind.REFUSE]), text=st.text(max_size=50)),
    st.builds(fr.Frame, st.just(fr.Kind.HELLO), src=st.text(max_size=10), dst=st.text(max_size=10),
              text=st.text(max_size=64), session=st.text(max_size=16),
              job=st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=3)),
)


@settings(max_examples=300, deadline=None)
@given(frames_strategy, st.data())
def test_fuzz_link_frames_round_trip_or_raise_protocol_error(frame, data):
    encoded = fr.encode_frame(frame)
    assert fr.decode_frame(encoded, max_chunk=4096) == frame
    mutated = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] ^= data.draw(st.integers(1, 255))
    try:
        fr.decode_frame(bytes(mutated), max_chunk=4096)
    except ProtocolError:
        pass
    with pytest.raises(ProtocolError):
        fr.decode_frame(encoded[: data.draw(st.integers(0, len(encoded) - 1))], max_chunk=4096)


_field = st.one_of(st.integers(-3, 3), st.integers(2**63 - 2, 2**64 - 1), st.booleans(), st.floats(0, 3),
                   st.text(max_size=3), st.binary(max_size=3), st.none())


@settings(max_examples=300, deadline=None)
@given(st.lists(_field, min_size=7, max_size=7), st.sampled_from([4, 4.0, True]), st.text(min_size=199, max_size=202))
def test_fuzz_the_data_fast_path_accepts_exactly_the_valid_data_frames(fields, kind, long_tag):
    """DATA frames skip the generic checks (the per-message hot path): they must accept and refuse the same."""
    seq, tag, depth, chunk, chunks, total, payload = fields
    tag = long_tag if isinstance(tag, str) and len(tag) == 3 else tag  # names of 199..202 characters too

    def whole(value, low=0):
        return type(value) is int and low <= value <= 2**63 - 1

    valid = (kind == 4 and type(kind) is int and whole(seq) and whole(depth) and whole(chunks, 1)
             and whole(chunk) and chunk < chunks and whole(total) and isinstance(tag, str) and len(tag) <= 200
             and isinstance(payload, bytes))
    import msgpack

    data = msgpack.packb([fr.VERSION, kind, seq, tag, depth, chunk, chunks, total, payload], use_bin_type=True)
    if not valid:
        with pytest.raises(ProtocolError):
            fr.decode_frame(data, max_chunk=4096)
        return
    frame = fr.Frame(fr.Kind.DATA, seq=seq, tag=tag, depth=depth, chunk=chunk, chunks=chunks, total=total,
                     payload=payload)
    assert fr.decode_frame(data, max_chunk=4096) == frame
    assert fr.encode_data(seq, tag, depth, chunk, chunks, total, payload) == fr.encode_frame(frame) == data


@pytest.mark.parametrize("size", [0, 255, 256, 4095, 4096, 65535, 65536, 1 << 20])
def test_data_frame_of_a_large_payload_is_msgpacks_bytes(size):
    """From 4 KiB on the header is packed alone and the payload joined: the bytes are msgpack's all the same."""
    import msgpack

    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    data = fr.encode_data(7, "t", 3, 0, 1, size, memoryview(payload))
    assert data == msgpack.packb([fr.VERSION, 4, 7, "t", 3, 0, 1, size, payload], use_bin_type=True)
    assert fr.decode_frame(data, max_chunk=1 << 20).payload == payload


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 20), st.binary(max_size=8)),
                min_size=1, max_size=6))
def test_fuzz_reassembly_never_yields_a_message_that_does_not_add_up(chunks):
    reassembly = fr.Reassembly(max_message=16)
    for index, count, total, payload in chunks:
        frame = fr.Frame(fr.Kind.DATA, seq=0, tag="t", chunk=min(index, count - 1), chunks=count, total=total,
                         payload=payload)
        try:
            done = reassembly.add(frame)
        except ProtocolError:
            break  # refused: nothing after it is reassembled
        if done is not None:
            assert len(done[2]) == total <= 16


@pytest.mark.slow
def test_a_200_mb_message_is_streamed_not_refused(federation):
    import os

    fed = federation()
    a, b = fed.start("a"), fed.start("b")
    a.wait_ready(), b.wait_ready()
    big = os.urandom(200 * 1024 * 1024)
    a.send(Envelope("a", "b", "paillier.batch", 1, big))
    assert b.recv("b", "a", NO_ABORT, timeout=120).payload == big
