"""A passive party down or late during serving (issue 44, item 2): left out of the batch, never a failed request.

In-process: the active party's batch loop (``_score_batch``) against passive roles that answer late,
over the threaded transport (its receives honour a deadline), and the channel's deadline receive.
"""

from __future__ import annotations

import secrets
import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from securevfl.data.labels import CLASSIFICATION
from securevfl.deploy import serving as sv
from securevfl.deploy import serving_active as active_side
from securevfl.deploy.serving_http import ScoringJob, ServeMetrics
from securevfl.errors import PeerTimeoutError, ProtocolError, UnexpectedTagError
from securevfl.federation.meter import Meter
from securevfl.federation.runtime import Channel, run_parties
from securevfl.federation.transport import InProcessTransport

PASSIVES = ("shop", "clinic")
IDS = {"shop": ["c1", "c2", "c3"], "clinic": ["c2", "c3", "c4"]}
TIMEOUT_S = 0.6

pytestmark = pytest.mark.timebound  # deadlines of a fraction of a second: run alone (make test)


class _Side:
    """The active party's scoring side, faked: one message from each passive party not silent, recorded."""

    leave_out = True
    method = SimpleNamespace(name="fake", partial_rows=True)

    def __init__(self) -> None:
        self.present: dict[str, np.ndarray] | None = None
        self.silent: frozenset[str] = frozenset()
        self.seen: list[dict[str, Any]] = []

    def evaluate(self, ctx: Any, X: np.ndarray, phase: str) -> Any:
        got = {p: ctx.recv(p, "emb") for p in PASSIVES if p not in self.silent}
        self.seen.append({"silent": self.silent, "got": got})
        return SimpleNamespace(scores=np.tile([0.25, 0.75], (len(X), 1)))


def _passive(key: Any, delays: dict[tuple[str, int], float]) -> Any:
    """A passive party's request loop (as :func:`serving.passive_role`'s), sleeping ``delays[(step, batch)]``."""

    def role(ctx: Any) -> int:
        ids = IDS[ctx.name]
        answered = 0
        while (message := sv._next_request(ctx)) is not None:
            asked, sizes, number = sv._lookup_request(message, "bank")
            time.sleep(delays.get(("lookup", number), 0.0))
            ctx.send("bank", sv.TAG_BLINDED, {"points": sv._blind(asked, key).tobytes(), "refused": [], "reason": None,
                                               "retry_after_s": None, "batch": number})
            rows = sv._rows_message(ctx.recv("bank", sv.TAG_ROWS), "bank", len(asked), len(ids), ctx.name, number,
                                    len(asked))
            if rows.evaluate:
                time.sleep(delays.get(("evaluate", number), 0.0))
                ctx.send("bank", "emb", [ids[i] for i in rows.positions])
            answered += 1
        return answered

    return role


def _serve(every_row: bool, delays: dict[str, dict[tuple[str, int], float]], pauses: list[float]) -> dict[str, Any]:
    """Batches of one request for c1..c5 at the active party, ``pauses[i]`` s after batch i; their answers."""
    from psi.curve import BlindingKey

    salt, active_key = secrets.token_bytes(32), BlindingKey(secrets.token_bytes(32))
    keys = {p: BlindingKey(secrets.token_bytes(32)) for p in PASSIVES}
    peers = {p: active_side._Peer(active_side._PeerIndex({bytes(row): i for i, row in enumerate(
        sv._blind(sv._hash_blind(IDS[p], salt, keys[p]), active_key))})) for p in PASSIVES}
    side, metrics = _Side(), ServeMetrics()
    answers: list[dict[str, Any]] = []

    def active(ctx: Any) -> None:
        session = active_side._Session(SimpleNamespace(side=side), peers, (), active_key, salt, ("no", "yes"),
                                       CLASSIFICATION, "customer_id", metrics, "bank", every_row, TIMEOUT_S, True)
        for pause in pauses:
            ids = ["c1", "c2", "c3", "c4", "c5"]
            job = ScoringJob(ids, np.zeros((5, 0), np.float32), np.ones(5, dtype=bool), [[] for _ in ids])
            active_side._score_batch(ctx, session, [job])
            answers.append(job.answer.result(0))
            time.sleep(pause)
        active_side._tell(ctx, session, "stop")

    roles = {"bank": active, **{p: _passive(keys[p], delays.get(p, {})) for p in PASSIVES}}
    run_parties(roles, active="bank", passives=PASSIVES, scheduler="threads", recv_timeout=30)
    return {"answers": answers, "side": side, "metrics": metrics}


def _parties(answer: dict[str, Any]) -> dict[str, str]:
    return {row["customer_id"]: row["parties"] for row in answer["predictions"]}


def test_a_late_lookup_answer_leaves_the_party_out_and_is_dropped_never_taken_for_a_later_batch():
    """clinic answers batch 1 after the deadline: batch 1 is scored without it; its late answer is drained."""
    run = _serve(True, {"clinic": {("lookup", 1): 3 * TIMEOUT_S}}, [4 * TIMEOUT_S, 0.0, 0.0])
    first, second, third = run["answers"]
    assert first["left_out"] == {"clinic": "late"}
    assert _parties(first) == {"c1": "bank+shop", "c2": "bank+shop", "c3": "bank+shop", "c4": "bank",
                               "c5": "bank"}
    assert first["not_scored"] == []
    for answer in (second, third):  # back: its answer to batch 1 dropped, batch 2 answered in step
        assert "left_out" not in answer
        assert _parties(answer) == {"c1": "bank+shop", "c2": "bank+shop+clinic", "c3": "bank+shop+clinic",
                                    "c4": "bank+clinic", "c5": "bank"}
    assert run["side"].seen[0]["silent"] == {"clinic"}
    assert run["side"].seen[1]["got"]["clinic"] == ["c2", "c3", "c4"]  # batch 2's rows, not a late message
    text = run["metrics"].exposition()[0].decode()
    assert 'securevfl_serve_left_out_batches_total{peer="clinic",reason="late"} 1.0' in text
    assert 'securevfl_serve_peer_up{peer="clinic"} 1.0' in text
    assert 'securevfl_serve_peer_outages_total{peer="clinic"} 1.0' in text


def test_a_late_evaluation_message_leaves_the_party_out_of_that_batch_only():
    """clinic's lookup answer is in time, its evaluation message is not: the rows are scored with its absent part."""
    run = _serve(True, {"clinic": {("evaluate", 1): 3 * TIMEOUT_S}}, [4 * TIMEOUT_S, 0.0])
    first, second = run["answers"]
    assert first["left_out"] == {"clinic": "late"}
    assert set(_parties(first).values()) == {"bank+shop", "bank"}
    assert run["side"].seen[0]["silent"] == {"clinic"}
    assert "left_out" not in second and run["side"].seen[1]["got"]["clinic"] == ["c2", "c3", "c4"]


def test_a_model_trained_on_the_intersection_scores_no_row_while_a_party_is_left_out():
    run = _serve(False, {"shop": {("lookup", 1): 3 * TIMEOUT_S}}, [4 * TIMEOUT_S, 0.0])
    first, second = run["answers"]
    assert first == {"predictions": [], "not_scored": ["c1", "c2", "c3", "c4", "c5"], "left_out": {"shop": "late"}}
    assert [row["customer_id"] for row in second["predictions"]] == ["c2", "c3"]  # held by every party
    assert "left_out" not in second


def test_a_receive_with_a_deadline_times_out_and_leaves_the_message_for_the_next_one():
    transport = InProcessTransport(["a", "b"])
    meters = {n: Meter(n) for n in "ab"}
    abort = threading.Event()
    a, b = (Channel(n, transport, meters[n], abort, recv_timeout=30) for n in "ab")
    started = time.monotonic()
    with pytest.raises(PeerTimeoutError, match="waited 0.2 s for 'x' from b"):
        a.recv("b", "x", timeout=0.2)
    assert 0.15 < time.monotonic() - started < 1.0
    assert not a.poll("b", 0.0)
    b.send("a", "x", 1)
    b.send("a", "y", 2)
    assert a.poll("b", 0.5) and a.poll("b", 0.0)  # kept: polled twice, received once
    assert a.recv("b", "x", timeout=0.0) == 1
    with pytest.raises(ProtocolError, match="expected 'x' from b but received 'y'"):
        a.recv("b", "x")
    b.send("a", "z", 3)
    assert a.take("b", 0.5) == ("z", 3)
    b.send("a", "w", 4)
    assert a.poll("b", 0.5)
    a.discard("b")
    assert a.take("b", 0.0) is None
    with a.receive_timeout(0.2):  # a receive without its own timeout waits the block's, not the channel's 30 s
        started = time.monotonic()
        with pytest.raises(PeerTimeoutError, match="waited 0.2 s for 'x' from b"):
            a.recv("b", "x")
        assert time.monotonic() - started < 1.0
    b.send("a", "v", 5)
    with pytest.raises(UnexpectedTagError, match="expected 'x' from b but received 'v'") as caught:
        a.recv("b", "x")  # the serving parties catch it for the one tag that cuts an evaluation short
    assert caught.value.received == "v"


def test_killing_a_passive_party_during_serve_fails_no_request_and_its_restart_takes_it_back(tmp_path):
    """Three `party --serve` processes, a model trained on every row, clinic SIGKILLed under load, then restarted."""
    from script_module import ROOT, script_module

    with script_module(ROOT / "tools" / "serving_outage.py", "serving_outage") as tool:
        run = tool.run_outage(tmp_path, rows=400, before_s=2.0, down_s=2.0, after_s=2.0, how="kill")
    phases = run["phases"]
    assert run["failed"] == 0 and run["sent"] > 50, run["errors"]
    assert all(phases[p]["requests"] > 5 for p in phases), phases
    assert run["health_during"]["status"] == "degraded" and "clinic" in run["health_during"]["left_out"]
    assert phases["outage"]["with_party"] < 0.05  # scored with shop's part alone (and the absent embedding)
    assert phases["after"]["with_party"] > 0.95  # the restarted clinic set up again and back in every answer
    assert '{"clinic": "down"}' in run["left_out_seen"]
    assert run["exit_codes"] == {"bank": 0, "shop": 0, "clinic": 0}
    log = (tmp_path / "bank.log").read_text()
    assert log.count("clinic is left out of scoring") == 1 and "clinic takes part in scoring again" in log


def test_the_transport_takes_a_new_process_of_a_replaceable_peer_and_keeps_its_abort_to_its_own_link():
    """A serving session's passive party: its ABORT fails only its link; a new process of it replaces the old one."""
    from securevfl.federation.grpc_transport import GrpcTransport, NetworkSettings, PeerLostError
    from securevfl.federation.loopback import free_port
    from securevfl.federation.transport import Envelope

    fast = NetworkSettings(peer_timeout_s=6, heartbeat_s=0.2, connect_timeout_s=6, reconnect_backoff_s=0.05,
                           max_backoff_s=0.3)
    addresses = {n: f"127.0.0.1:{free_port()}" for n in ("a", "b")}
    options = {"tls": None, "insecure": True, "fingerprint": "f", "settings": fast}
    never = threading.Event()
    a = GrpcTransport("a", addresses, replaceable=("b",), **options).start()
    b = GrpcTransport("b", addresses, **options).start()
    b2 = None
    try:
        a.wait_ready(), b.wait_ready()
        a.send(Envelope("a", "b", "t", 1, b"one"))
        assert b.recv("b", "a", never, timeout=5).payload == b"one"
        assert a.peer_status("b").up and a.peer_status("b").epoch == 0
        b.abort("b stopped: SIGTERM")  # its process ends with an ABORT: only what comes from b fails at a
        with pytest.raises(PeerLostError, match="b stopped"):
            a.recv("a", "b", never, timeout=5)
        assert a.abort_reason is None and not a.peer_status("b").up
        b.close()
        b2 = GrpcTransport("b", addresses, **options).start()  # a new process of b: another session id
        b2.wait_ready()
        deadline = time.monotonic() + 10
        while not (a.peer_status("b").up and a.peer_status("b").epoch == 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert a.peer_status("b").up and a.peer_status("b").epoch == 1
        a.send(Envelope("a", "b", "t", 1, b"two"))  # numbered afresh: the new process gets it, and only it
        assert b2.recv("b", "a", never, timeout=5).payload == b"two"
        b2.send(Envelope("b", "a", "t", 1, b"three"))
        assert a.recv("a", "b", never, timeout=5).payload == b"three"
        a.finish("a"), b2.finish("b")
    finally:
        for t in (a, b2):
            if t is not None:
                t.close()
