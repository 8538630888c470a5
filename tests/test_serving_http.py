"""The scoring endpoint's parts alone: strict JSON, the request queue, the membership budget, the ASGI app."""

from __future__ import annotations

import asyncio
import queue

import numpy as np
import pytest

from securevfl.deploy.serving_http import (
    RequestError,
    RequestQueue,
    ScoringApp,
    ScoringJob,
    ServeMetrics,
    decode_rows,
)
from securevfl.deploy.serving_limits import MembershipBudget, ServeSettings


def _job(n: int) -> ScoringJob:
    return ScoringJob([f"c{i}" for i in range(n)], np.zeros((n, 1), np.float32), np.ones(n, bool), [[]] * n)


def test_decode_rows_takes_flat_rows_of_plain_values():
    assert decode_rows(b'{"rows": [{"id": "a", "x": 1.5, "y": null, "z": true, "n": -12}]}') == [
        {"id": "a", "x": 1.5, "y": None, "z": True, "n": -12}]
    for body in (b'{"rows": {}}', b'{"rows": [1]}', b'{"rows": [{"a": [1]}]}', b'"rows"',
                 b'{"rows": [{"a": -Infinity}]}', ('{"rows": [{"a": ' + "1" * 65 + "}]}").encode(),
                 b'{"rows": [{"a": "\\udc00"}]}'):
        with pytest.raises(RequestError):
            decode_rows(body)
    with pytest.raises(RequestError, match="at most 2 rows"):
        decode_rows(b'{"rows": [{}, {}, {}]}', max_rows=2)


def test_small_requests_go_first_and_the_queue_is_bounded():
    jobs = RequestQueue(3)
    big, small, other = _job(500), _job(2), _job(1)
    jobs.put(big)
    jobs.put(small)
    jobs.put(other)
    with pytest.raises(queue.Full):
        jobs.put(_job(1))
    assert [jobs.get(0), jobs.get(0), jobs.get(0)] == [small, other, big]
    with pytest.raises(queue.Empty):
        jobs.get(0)
    jobs.put(big)
    jobs.stop()  # the end marker goes ahead of what waits
    assert jobs.get(0) is None


def test_stopping_a_full_queue_answers_what_waits():
    jobs = RequestQueue(1)
    waiting = _job(1)
    jobs.put(waiting)
    jobs.stop()
    assert jobs.get(0) is None
    with pytest.raises(Exception, match="stopped"):
        waiting.answer.result(0)


def test_the_membership_budget_is_a_token_bucket_and_a_session_total():
    now = [0.0]
    budget = MembershipBudget(60, 100, clock=lambda: now[0])
    assert budget.admit(50) is None
    reason, retry = budget.admit(20)
    assert "per minute" in reason and retry == pytest.approx(10.0)  # 10 tokens left, one a second
    now[0] = 10.0
    assert budget.admit(20) is None
    assert budget.admit(61)[1] is None  # more than a minute's budget: never
    now[0] = 1000.0
    assert budget.admit(30) is None  # 100 in all
    reason, retry = budget.admit(1)
    assert "per session" in reason and retry is None
    assert MembershipBudget(0, 0).admit(10**9) is None  # 0: no limit


class _Client:
    """An ASGI client of one request: its body, then (optionally) a disconnect."""

    def __init__(self, body: bytes, disconnect_after_body: bool) -> None:
        self.messages = [{"type": "http.request", "body": body, "more_body": False}]
        self.disconnect = disconnect_after_body
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        if self.messages:
            return self.messages.pop(0)
        if self.disconnect:
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def send(self, message: dict) -> None:
        self.sent.append(message)


def test_a_client_that_goes_away_cancels_its_request_and_a_full_queue_is_503():
    submitted: list[ScoringJob] = []
    full = [False]

    def submit(job: ScoringJob) -> None:
        if full[0]:
            raise queue.Full
        submitted.append(job)

    app = ScoringApp("bank", lambda rows: _job(len(rows)), submit, lambda: "ok", ServeMetrics(), ServeSettings())
    scope = {"type": "http", "path": "/score", "method": "POST", "headers": []}
    client = _Client(b'{"rows": [{"id": "a"}]}', disconnect_after_body=True)
    asyncio.run(app(scope, client.receive, client.send))
    assert submitted and submitted[0].cancelled and client.sent == []  # nothing answered: nobody listens
    full[0] = True
    client = _Client(b'{"rows": [{"id": "a"}]}', disconnect_after_body=False)
    asyncio.run(app(scope, client.receive, client.send))
    start = client.sent[0]
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    text = app.metrics.exposition()[0].decode()
    assert 'securevfl_serve_requests_total{outcome="cancelled"} 1.0' in text
    assert 'securevfl_serve_requests_total{outcome="overloaded"} 1.0' in text
