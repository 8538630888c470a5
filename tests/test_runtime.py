import time

import pytest

from securevfl.errors import PartyFailure, ProtocolError
from securevfl.federation.runtime import run_parties


def test_ping_pong_rounds_and_bytes():
    def active(ctx):
        total = 0
        for i in range(3):
            ctx.send("p", "ping", i)
            total += ctx.recv("p", "pong")
        return total

    def passive(ctx):
        for _ in range(3):
            ctx.send("active", "pong", ctx.recv("active", "ping") * 10)

    r = run_parties({"active": active, "p": passive}, active="active")
    assert r.results["active"] == 30
    snap = r.meters["active"].snapshot().merged(r.meters["p"].snapshot())
    assert snap.messages == {"active->p": 3, "p->active": 3}
    assert snap.rounds == 6  # each message depends on the previous one


def test_failure_in_one_party_stops_the_others_quickly():
    def active(ctx):
        ctx.recv("p", "never")  # would block forever without abort

    def passive(ctx):
        ctx.stage = "train epoch 2"
        raise ValueError("disk on fire")

    started = time.perf_counter()
    with pytest.raises(PartyFailure) as info:
        run_parties({"active": active, "p": passive}, active="active")
    assert time.perf_counter() - started < 5
    assert info.value.party == "p" and info.value.stage == "train epoch 2"
    assert "disk on fire" in info.value.traceback_text


def test_wrong_tag_is_a_protocol_error():
    def active(ctx):
        ctx.send("p", "b", 1)

    def passive(ctx):
        ctx.recv("active", "a")

    with pytest.raises(PartyFailure) as info:
        run_parties({"active": active, "p": passive}, active="active")
    assert isinstance(info.value.cause, ProtocolError)


def test_compute_blocks_do_not_overlap_and_receive_inside_compute_does_not_deadlock():
    import threading

    inside = []
    overlap = threading.Event()

    def busy(ctx):
        for _ in range(20):
            with ctx.meter.compute():
                inside.append(ctx.name)
                if len(inside) > 1:
                    overlap.set()
                time.sleep(0.001)
                inside.remove(ctx.name)

    def active(ctx):
        busy(ctx)
        with ctx.meter.compute():  # a receive inside a compute block must let the others compute
            value = ctx.recv("p", "done")
        return value

    def passive(ctx):
        busy(ctx)
        ctx.send("active", "done", 1)

    r = run_parties({"active": active, "p": passive, "q": busy}, active="active")
    assert r.results["active"] == 1
    assert not overlap.is_set()
