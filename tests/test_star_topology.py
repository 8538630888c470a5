"""The star topology: only the active party listens, the others dial out; it relays what they send each other.

Threaded loopback tests of the transport (both directions on streams the party opens, reconnects,
a tampering relay), the federation file's ``topology``, and three real processes giving the
metrics of the mesh run with no listening socket at the passive parties.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import test_deploy_processes as processes
from net_helpers import CuttingProxy, close_together, free_port
from test_deploy_processes import HELPERS, federation_file, headline, in_process, run_in_threads
from test_grpc_transport import FAST, NO_ABORT  # the same fast network settings as the mesh transport's tests

from securevfl.deploy.federation_file import job_fingerprint, load_federation, parse_federation
from securevfl.deploy.launch import launch
from securevfl.errors import ConfigError, PeerFinishedError, PeerTimeoutError, ProtocolError
from securevfl.federation.grpc_transport import (
    RELAY,
    GrpcTransport,
    LinkRefusedError,
    PeerLostError,
    RelayError,
    TlsCredentials,
    parse_relay_tag,
    relay_tag,
)
from securevfl.federation.transport import Envelope
from securevfl.methods import TrainConfig, method_names


def creds(directory: Path, party: str) -> TlsCredentials:
    return TlsCredentials((directory / f"{party}.pem").read_bytes(), (directory / f"{party}.key").read_bytes(),
                          (directory / "ca.pem").read_bytes())


class Star:
    """A hub ``a`` and parties ``b``, ``c`` (no address) in this process, each over its own transport."""

    def __init__(self, pki: Path | None = None, hub_address: str | None = None, spokes: str = "bc", **kwargs):
        self.pki = pki
        self.addresses = {"a": hub_address or f"127.0.0.1:{free_port()}", **dict.fromkeys(spokes)}
        self.kwargs = kwargs
        self.t: dict[str, GrpcTransport] = {}

    def start(self, name: str, addresses: dict | None = None, **overrides) -> GrpcTransport:
        tls = {"tls": creds(self.pki, name)} if self.pki else {"tls": None, "insecure": True}
        options = {**tls, "fingerprint": "f", "job": {"epochs": 1}, "settings": FAST, "hub": "a",
                   **self.kwargs, **overrides}
        self.t[name] = GrpcTransport(name, addresses or self.addresses, **options).start()
        return self.t[name]

    def close(self) -> None:
        close_together(self.t.values())


files = processes.files  # the three organisations' tables and their certificates (module fixtures)
certs = processes.certs


@pytest.fixture(scope="module")
def pki(dev_pki):
    return dev_pki("abcd")


@pytest.fixture
def star():
    made: list[Star] = []

    def make(*args, **kwargs):
        made.append(Star(*args, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_every_direction_and_the_relay_carry_messages_in_order(star, pki):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    assert a._server is not None and b._server is None and c._server is None  # only the hub listens
    big = bytes(range(256)) * 4096 * 3  # 3 MiB: 48 chunks on each hop
    for i in range(10):
        a.send(Envelope("a", "b", f"ab{i}", i, i.to_bytes(2, "big") * 50))
        b.send(Envelope("b", "a", f"ba{i}", i, i.to_bytes(2, "big") * 60))
        b.send(Envelope("b", "c", f"bc{i}", i, i.to_bytes(2, "big") * 70))
        c.send(Envelope("c", "b", f"cb{i}", i, i.to_bytes(2, "big") * 80))
    b.send(Envelope("b", "c", "big", 42, big))
    assert [b.recv("b", "a", NO_ABORT, 10).tag for _ in range(10)] == [f"ab{i}" for i in range(10)]
    assert [a.recv("a", "b", NO_ABORT, 10).tag for _ in range(10)] == [f"ba{i}" for i in range(10)]
    assert [b.recv("b", "c", NO_ABORT, 10).tag for _ in range(10)] == [f"cb{i}" for i in range(10)]
    got = [c.recv("c", "b", NO_ABORT, 10) for _ in range(11)]
    assert [e.tag for e in got] == [f"bc{i}" for i in range(10)] + ["big"]
    assert got[-1].payload == big and got[-1].depth == 42 and got[-1].src == "b"
    stats = b.link_stats()
    assert stats["b->c"]["payload_bytes"] == sum(len(e.payload) for e in got)  # the logical link, as in a mesh
    relayed = stats["b->a"]["relayed_bytes"]
    overhead = relayed - stats["b->c"]["payload_bytes"]  # the session key bundle, and 24 bytes a message
    assert 0 < overhead < 4000 + 24 * 12
    assert a.link_stats()["a->c"]["relayed_bytes"] == relayed  # the hub forwards the sealed bytes as they are
    for t in (a, b, c):
        t.finish(t.party)
    with pytest.raises(PeerFinishedError, match="b"):
        c.recv("c", "b", NO_ABORT, 10)
    with pytest.raises(PeerFinishedError, match="a"):
        c.recv("c", "a", NO_ABORT, 10)


def test_a_tampering_relay_is_refused_naming_the_sender_and_reads_nothing(star, pki):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    seen: list[bytes] = []
    forward = a._relay

    def tampering(src, dst, tag, depth, payload):  # a relay that reads and flips one byte of the second message
        if tag.endswith("emb"):
            seen.append(payload)
        if len(seen) == 2 and tag.endswith("emb"):
            payload = payload[:30] + bytes([payload[30] ^ 1]) + payload[31:]
        forward(src, dst, tag, depth, payload)

    a._relay = tampering
    secret = b"the-secret-embedding-rows" * 20
    b.send(Envelope("b", "c", "emb", 1, secret))
    assert c.recv("c", "b", NO_ABORT, 10).payload == secret
    b.send(Envelope("b", "c", "emb", 2, secret))
    with pytest.raises(ProtocolError, match=r"from b.*failed authentication"):
        c.recv("c", "b", NO_ABORT, 10)
    assert not any(b"the-secret" in p for p in seen)  # the relay saw only ciphertext
    a.send(Envelope("a", "c", "direct", 1, b"ok"))  # the hub's own link to c is not affected
    assert c.recv("c", "a", NO_ABORT, 10).payload == b"ok"


def test_a_relay_that_replays_or_drops_a_message_is_refused(star, pki):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    forward = a._relay
    sent: list[tuple] = []

    def replaying(src, dst, tag, depth, payload):
        forward(src, dst, tag, depth, payload)
        if tag.endswith("m"):
            sent.append((src, dst, tag, depth, payload))
        if len(sent) == 1 and tag.endswith("m"):
            forward(src, dst, tag, depth, payload)  # the same message once more

    a._relay = replaying
    b.send(Envelope("b", "c", "m", 1, b"x" * 10))
    assert c.recv("c", "b", NO_ABORT, 10).payload == b"x" * 10
    with pytest.raises(ProtocolError, match=r"from b.*replayed"):
        c.recv("c", "b", NO_ABORT, 10)


def test_a_passive_party_with_the_wrong_certificate_is_refused_by_the_hub(star, pki):
    s = star(pki)
    a = s.start("a")
    b = s.start("b", tls=creds(pki, "c"))  # c's certificate, claiming to be b
    with pytest.raises((LinkRefusedError, ProtocolError), match="certificate names"):
        b.wait_ready(timeout=5)
    assert a is not None


def test_a_cut_connection_to_the_hub_loses_nothing_in_either_direction(star):
    hub = f"127.0.0.1:{free_port()}"
    proxy = CuttingProxy(int(hub.rsplit(":", 1)[1]))
    try:
        s = star(hub_address=hub)
        a = s.start("a")
        b = s.start("b", addresses={"a": proxy.address, "b": None, "c": None})  # b reaches a through the proxy
        c = s.start("c")
        for t in (a, b, c):
            t.wait_ready()
        payload = b"\x5a" * 200_000  # 4 chunks each: cuts land inside messages
        for i in range(30):
            a.send(Envelope("a", "b", f"m{i}", i, payload + i.to_bytes(4, "big")))
            c.send(Envelope("c", "b", f"r{i}", i, payload + i.to_bytes(4, "big")))
            b.send(Envelope("b", "a", f"u{i}", i, payload + i.to_bytes(4, "big")))
            if i in (5, 17):
                proxy.cut()
        down = [b.recv("b", "a", NO_ABORT, 20) for _ in range(30)]
        relayed = [b.recv("b", "c", NO_ABORT, 20) for _ in range(30)]
        up = [a.recv("a", "b", NO_ABORT, 20) for _ in range(30)]
        for got, prefix in ((down, "m"), (relayed, "r"), (up, "u")):
            assert [e.tag for e in got] == [f"{prefix}{i}" for i in range(30)]
            assert all(e.payload == payload + i.to_bytes(4, "big") for i, e in enumerate(got))
        assert proxy.cuts == 2
        with pytest.raises(PeerTimeoutError):
            b.recv("b", "a", NO_ABORT, timeout=0.5)  # nothing duplicated
    finally:
        proxy.close()


def test_plaintext_star_relays_in_clear_and_a_spoke_abort_reaches_the_other_spoke(star):
    s = star()
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    b.send(Envelope("b", "c", "m", 1, b"plain"))
    assert c.recv("c", "b", NO_ABORT, 10).payload == b"plain"
    b.abort("b failed on purpose")
    deadline = time.monotonic() + 5
    while c.abort_reason is None:
        assert time.monotonic() < deadline, "the ABORT never reached c"
        time.sleep(0.05)
    assert "b failed on purpose" in c.abort_reason


# ------------------------------------------------------------------ the federation file


BASE = """
[federation]
active = "bank"
{extra}
[parties.bank]
address = "127.0.0.1:7101"
[parties.shop]
{shop}
[parties.clinic]
{clinic}
[tls]
dir = "certs"
[job]
method = "splitnn"
id_column = "id"
label_column = "y"
"""


def parse(extra="", shop="", clinic=""):
    return parse_federation(BASE.format(extra=extra, shop=shop, clinic=clinic), Path("."))


def test_star_is_the_default_when_only_the_active_party_has_an_address():
    fed = parse()
    assert fed.topology == "star" and fed.addresses == {"bank": "127.0.0.1:7101", "shop": None, "clinic": None}
    mesh = parse(shop='address = "127.0.0.1:7102"', clinic='address = "127.0.0.1:7103"')
    assert mesh.topology == "mesh"
    assert parse('topology = "star"').topology == "star"
    assert job_fingerprint(fed)[0] != job_fingerprint(parse('topology = "mesh"', 'address = "127.0.0.1:7102"',
                                                            'address = "127.0.0.1:7103"'))[0]
    assert job_fingerprint(fed)[1]["federation"] == {"active": "bank", "topology": "star"}
    assert "topology" not in job_fingerprint(mesh)[1]["federation"]  # mesh fingerprints are unchanged


@pytest.mark.parametrize("extra, shop, clinic, message", [
    ('topology = "ring"', "", "", "topology must be one of mesh, star, got 'ring'"),
    ('topology = "star"', 'address = "127.0.0.1:7102"', "",
     r"only the active party 'bank' listens; remove 'address' from \[parties.shop\]"),
    ("", 'address = "127.0.0.1:7102"', "", r"\[parties.clinic\] needs 'address' \(host:port\) in a mesh"),
    ('topology = "mesh"', "", "", r"\[parties.shop\] needs 'address'"),
])
def test_topology_mistakes_are_one_line_config_errors(extra, shop, clinic, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse(extra, shop, clinic)
    assert "\n" not in str(info.value)


def test_the_active_party_needs_an_address_in_a_star():
    text = BASE.format(extra="", shop="", clinic="").replace('address = "127.0.0.1:7101"', "")
    with pytest.raises(ConfigError, match=r"\[parties.bank\] needs 'address'"):
        parse_federation(text, Path("."))


# ------------------------------------------------------------------ three real processes


def star_file(directory: Path, certs: Path, method: str, options: str = "", **kwargs) -> Path:
    """The federation file of the mesh tests, with every address but the active party's removed."""
    path = federation_file(directory, certs, method, options, **kwargs)
    text = re.sub(r'(\[parties\.(?!bank\])[A-Za-z0-9_-]+\]\n)address = "[^"]*"\n', r"\1", path.read_text())
    star = path.with_name(path.stem + "-star.toml")
    star.write_text(text)
    return star


class ListenWatch:
    """Polls this process's children: which party processes ever held a listening socket."""

    def __init__(self) -> None:
        self.listening: dict[str, bool] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for child in psutil.Process().children(recursive=True):
                try:
                    cmd = child.cmdline()
                    if "--as" not in cmd:
                        continue
                    party = cmd[cmd.index("--as") + 1]
                    listens = any(conn.status == psutil.CONN_LISTEN for conn in child.net_connections("inet"))
                    self.listening[party] = self.listening.get(party, False) or listens
                except (psutil.Error, ValueError, IndexError):
                    continue
            self.stop.wait(0.2)

    def __enter__(self) -> ListenWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.mark.parametrize("method, options, toml_options", [
    pytest.param("splitnn", {}, "", marks=pytest.mark.slow),  # relays nothing; the suite's time budget
    pytest.param("easter", {"secagg": "dh", "embedding_size": 16}, 'secagg = "dh"\nembedding_size = 16',
                 marks=pytest.mark.slow),  # relays nothing; the suite's time budget
    ("hetero-lr", {"key_bits": 1024, "insecure_allow_small_key": True},
     "key_bits = 1024\ninsecure_allow_small_key = true"),
])
def test_star_over_real_processes_matches_the_mesh_run_with_no_listening_port(
        tmp_path, files, certs, method, options, toml_options, monkeypatch):
    """Only bank listens. EASTER's ``dh`` routes its key agreement through the active party at the method level;
    hetero-lr's passive parties talk with the arbiter (a fourth process) all the time: relayed, sealed."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    helpers = HELPERS.get(method, ())
    fed = star_file(tmp_path, certs, method, toml_options, epochs=2, helpers=helpers)
    assert load_federation(fed).topology == "star"
    report = tmp_path / "run.json"
    with ListenWatch() as watch:
        code = launch(fed, {**files, **dict.fromkeys(helpers)}, active="bank", report=report, device="cpu",
                      timeout=240)
    assert code == 0
    # only the active party listens
    assert watch.listening == {"bank": True, "shop": False, "clinic": False, **dict.fromkeys(helpers, False)}
    network = json.loads(report.read_text())
    mesh = in_process(files, method, options, epochs=2)  # the mesh run gives these exactly (test_deploy_processes)
    for key, value in headline(mesh.metrics).items():
        assert headline(network["metrics"])[key] == pytest.approx(value, abs=1e-6), key
    assert network["cost"]["rounds"] == mesh.cost["rounds"]
    assert network["cost"]["comm"]["messages"] == mesh.cost["comm"]["messages"]  # per logical link
    for link, size in mesh.cost["comm"]["bytes"].items():  # hetero-lr's random residues vary by a byte
        assert network["cost"]["comm"]["bytes"][link] == pytest.approx(size, rel=1e-3 if helpers else 0), link
    relayed = network["cost"]["wire"]["relayed_bytes"]
    passive_pairs = sum(size for link, size in mesh.cost["comm"]["bytes"].items() if "bank" not in link)
    assert relayed > passive_pairs if helpers else relayed < 5000  # splitnn, easter: only the session keys


EVERY_METHOD = sorted(method_names())  # every registered method


@pytest.mark.slow
@pytest.mark.parametrize("method", EVERY_METHOD)
def test_every_method_in_the_star_gives_the_mesh_metrics(tmp_path, files, certs, method):
    options, opts = "", {}
    if method == "hetero-lr":
        options, opts = "key_bits = 1024\ninsecure_allow_small_key = true", {"key_bits": 1024,
                                                                           "insecure_allow_small_key": True}
    elif method == "easter":
        options, opts = 'secagg = "dh"', {"secagg": "dh"}
    epochs = 1
    if method == "secureboost":  # trees, not epochs (it refuses --epochs)
        options, opts = "trees = 2\nkey_bits = 1024\ninsecure_allow_small_key = true", {
            "trees": 2, "key_bits": 1024, "insecure_allow_small_key": True}
        epochs = TrainConfig().epochs
    if method == "fewshot-vfl":  # its active party holds the labels only
        import pandas as pd

        bank = pd.read_csv(files["bank"])[["customer_id", "churn"]]
        files = {**files, "bank": tmp_path / "bank-labels.csv"}
        bank.to_csv(files["bank"], index=False)
    fed = load_federation(star_file(tmp_path, certs, method, options, epochs=epochs,
                                    helpers=HELPERS.get(method, ())))
    assert fed.topology == "star"
    results, errors = run_in_threads(fed, files)
    assert not errors, errors
    mesh = in_process(files, method, opts, epochs=epochs)
    network = results["bank"].report
    tolerance = 0.02 if method == "vfedtrans" else 1e-6  # FedSVD's fresh masks: see test_deploy_processes
    for key, value in headline(mesh.metrics).items():
        assert headline(network.metrics)[key] == pytest.approx(value, abs=tolerance), key
    assert network.cost["comm"]["messages"] == mesh.cost["comm"]["messages"]
    for link, size in mesh.cost["comm"]["bytes"].items():  # big random residues (hetero-lr, vfedtrans) vary a byte
        assert network.cost["comm"]["bytes"][link] == pytest.approx(size, rel=1e-3), link



def test_a_job_mismatch_in_a_star_is_refused_at_both_ends_with_the_differing_keys(star):
    from securevfl.deploy.federation_file import job_differences

    s = star(differences=job_differences)
    s.start("a", fingerprint="f1", job={"job": {"epochs": 1}})
    b = s.start("b", fingerprint="f2", job={"job": {"epochs": 2}})
    with pytest.raises(LinkRefusedError, match=r"job mismatch between b and a; differing keys: job.epochs"):
        b.wait_ready(timeout=5)


def test_the_hubs_own_messages_and_relayed_ones_share_a_link_without_mixing_chunks(star, pki):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    payload = bytes(range(256)) * 1200  # 300 KB: 5 chunks of 64 KB
    n = 60

    def flood(t, src):
        for i in range(n):
            t.send(Envelope(src, "b", f"{src}{i}", i, payload + bytes([i])))
            time.sleep(0.001)

    senders = [threading.Thread(target=flood, args=(a, "a")), threading.Thread(target=flood, args=(c, "c"))]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: the hub's role and its relay thread write at once
    try:
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(20)
    finally:
        sys.setswitchinterval(interval)
    for src in ("a", "c"):
        got = [b.recv("b", src, NO_ABORT, 20) for _ in range(n)]
        assert [e.tag for e in got] == [f"{src}{i}" for i in range(n)]
        assert all(e.payload == payload + bytes([i]) for i, e in enumerate(got))


def test_idle_pull_streams_with_a_valid_certificate_do_not_starve_the_hub(star, pki):
    import grpc

    s = star(pki)
    a = s.start("a")
    tls = creds(pki, "c")
    release = threading.Event()

    def nothing():
        release.wait(20)
        return
        yield b""  # a generator that sends nothing

    channels, calls = [], []
    for _ in range(10):  # c's certificate, ten pull streams that never send a HELLO
        channel = grpc.secure_channel(s.addresses["a"], grpc.ssl_channel_credentials(
            tls.root_ca, tls.private_key, tls.cert_chain), options=[("grpc.ssl_target_name_override", "a")])
        calls.append(channel.stream_stream("/securevfl.Link/Pull", request_serializer=None,
                                           response_deserializer=None)(nothing(), timeout=20))
        channels.append(channel)
    try:
        time.sleep(0.5)
        b, c = s.start("b"), s.start("c")
        started = time.monotonic()
        for t in (b, c, a):
            t.wait_ready(timeout=6)
        assert time.monotonic() - started < 6
        c.send(Envelope("c", "b", "hi", 1, b"through"))
        assert b.recv("b", "c", NO_ABORT, 5).payload == b"through"
    finally:
        release.set()
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()


def test_a_lost_party_is_reported_by_the_hub_to_a_party_waiting_on_it(star, pki):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    c._pulls["a"].close()  # c dies: its streams end without FIN or ABORT
    c._links["a"].close()
    started = time.monotonic()
    with pytest.raises(PeerLostError, match="a lost c"):
        b.recv("b", "c", NO_ABORT, 30)  # b cannot see c; the hub can, and tells it
    assert time.monotonic() - started < FAST.peer_timeout_s + 3


@pytest.mark.parametrize("fingerprint", ["f-predict", "f"])  # the shop's batch scoring; the same job (a duplicate)
def test_a_second_process_of_a_party_is_refused_and_the_live_star_goes_on(star, pki, fingerprint):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    b.send(Envelope("b", "c", "before", 1, b"relayed"))
    assert c.recv("c", "b", NO_ABORT, 5).payload == b"relayed"
    started = time.monotonic()
    second = GrpcTransport("b", s.addresses, tls=creds(pki, "b"), fingerprint=fingerprint, job={"epochs": 1},
                           settings=FAST, hub="a")
    try:
        second.start()
        with pytest.raises(LinkRefusedError) as refused:
            second.wait_ready(timeout=6)
        assert time.monotonic() - started < 4
    finally:
        second.abort("test over")
        second.close()
    time.sleep(0.3)
    for x, y in (("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"), ("b", "c"), ("c", "b")):
        s.t[x].send(Envelope(x, y, "after", 1, f"{x}->{y}".encode()))
        assert s.t[y].recv(y, x, NO_ABORT, 5).payload == f"{x}->{y}".encode()
    assert all(t._inboxes[p].error is None for t in (a, b, c) for p in t.peers)
    assert refused.value.peer == "a" and "live link from b" in str(refused.value)


def _send_and_finish(t: GrpcTransport, dst: str, tags: list[str]) -> None:
    for tag in tags:
        t.send(Envelope(t.party, dst, tag, 1, tag.encode() * 10))
    t.finish(t.party)


@pytest.mark.parametrize("end", ["dropped", "relayed"])  # b's sealed end-of-messages marker dropped too, or not
def test_a_relay_that_drops_the_last_message_of_a_direction_is_named_when_it_finishes(star, pki, end):
    s = star(pki)
    a, b, c = (s.start(n) for n in "abc")
    for t in (a, b, c):
        t.wait_ready()
    forward = a._relay
    held: list[tuple] = []

    def dropping(src, dst, tag, depth, payload):  # holds each b -> c message back by one; drops the last and the end
        if src != "b" or dst != "c":
            return forward(src, dst, tag, depth, payload)
        if held:
            last = held.pop()
            if parse_relay_tag(tag)[1] == RELAY + "fin":  # the last message never reaches c, nor (end=dropped) the end
                return forward(src, dst, tag, depth, payload) if end == "relayed" else None
            forward(*last)
        held.append((src, dst, tag, depth, payload))
        return None

    a._relay = dropping
    _send_and_finish(b, "c", ["m0", "m1", "m2"])
    assert [c.recv("c", "b", NO_ABORT, 5).tag for _ in range(2)] == ["m0", "m1"]
    a.finish("a")
    started = time.monotonic()
    expected = r"a dropped the last message\(s\) from b" if end == "dropped" else r"from b.*dropped.*relay a is to"
    with pytest.raises(RelayError, match=expected) as dropped:
        c.recv("c", "b", NO_ABORT, 10)
    assert dropped.value.peer == "a" and time.monotonic() - started < 3  # the hub is named, at its FIN


def test_a_relay_that_relabels_a_message_as_from_another_party_is_named_at_once(star, pki):
    s = star(pki, spokes="bcd")
    a, b, c, d = (s.start(n) for n in "abcd")
    for t in (a, b, c, d):
        t.wait_ready()
    forward = a._relay

    def relabelling(src, dst, tag, depth, payload):  # passes b's messages to d off as c's
        if src == "b" and dst == "d" and parse_relay_tag(tag)[1] == "m1":
            return forward(src, dst, relay_tag("c", "m1"), depth, payload)
        return forward(src, dst, tag, depth, payload)

    a._relay = relabelling
    b.send(Envelope("b", "d", "m0", 1, b"first"))
    assert d.recv("d", "b", NO_ABORT, 5).payload == b"first"
    started = time.monotonic()
    b.send(Envelope("b", "d", "m1", 1, b"second"))
    with pytest.raises(RelayError, match=r"a relabelled a message from b as from c") as relabelled:
        d.recv("d", "b", NO_ABORT, 10)  # d waits on b, the honest sender: the hub is named, at once
    assert relabelled.value.peer == "a" and time.monotonic() - started < 3
    with pytest.raises(RelayError, match="a relabelled"):
        d.recv("d", "c", NO_ABORT, 1)
