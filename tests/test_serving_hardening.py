"""The online scoring service under an audit's requests: nothing a caller sends stops a party.

Every party runs ``run_serving_party`` in a thread of this process (tests/serving_service.py); the
audit's requests go to the active party's endpoint, and after each an honest request must still be
answered and every party still be up.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file
from serving_service import PARTIES, Service, train_served_model

import securevfl.errors
from securevfl.deploy.federation_file import load_federation
from securevfl.deploy.serving_limits import ServeSettings
from securevfl.pipeline.serve import run_serving_party


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    return train_served_model(tmp_path_factory.mktemp("serving-hardening"))


def _held_by_all(files: dict[str, Path]) -> list[str]:
    sets = [set(pd.read_csv(files[p]).customer_id) for p in PARTIES]
    return sorted(set.intersection(*sets))


def _serve(tmp_path: Path, trained, **settings: ServeSettings) -> Service:
    model, files = trained
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB))
    return Service(fed, model, files, settings=settings)


@pytest.fixture()
def service(tmp_path, trained):
    running = _serve(tmp_path, trained)
    yield running
    running.close()


def _honest(service: Service, ids: list[str]) -> None:
    status, answer = service.post({"rows": [{"customer_id": i} for i in ids[:3]]})
    assert status == 200 and len(answer["predictions"]) == 3, answer
    assert not service.errors and all(t.is_alive() for t in service.threads), service.errors


def test_no_body_a_caller_sends_stops_a_party(trained, service):
    """Lone surrogates, huge numbers, deep nesting, NaN: each is a 400 of its own; every party stays up."""
    _, files = trained
    ids = _held_by_all(files)
    features = pd.read_csv(files["bank"]).set_index("customer_id").drop(columns=["churn"]).loc[ids[0]].to_dict()
    numeric = next(c for c, v in features.items() if isinstance(v, float))
    huge = "9" * 400
    for body, words in [
        (b'{"rows": [{"customer_id": "\\ud800"}]}', "surrogate"),
        (b'{"rows": [{"customer_id": "c0001", "x\\udfff": 1}]}', "surrogate"),
        (f'{{"rows": [{{"customer_id": {huge}}}]}}'.encode(), "digits"),
        (f'{{"rows": [{{"customer_id": "{ids[0]}", "{numeric}": {huge}}}]}}'.encode(), "digits"),
        (b'{"rows": [{"customer_id": "c1", "a": 1e400}]}', "too large"),
        (b'{"rows": [{"customer_id": "c1", "a": NaN}]}', "not JSON"),
        (b'[' * 100_000 + b']' * 100_000, "nested"),
        (b'{"rows": [{"customer_id": "c1", "a": {"b": [1]}}]}', "only text, numbers"),
        (b'\xff\xfe', "must be JSON"),
    ]:
        status, answer = service.post(body)
        assert status == 400 and words in answer["error"], (body[:60], answer)
        _honest(service, ids)
    row = {"customer_id": ids[0], **features, numeric: 1e300}  # finite in JSON, beyond float32
    status, answer = service.post({"rows": [row]})
    assert status == 400 and "range" in answer["error"], answer
    _honest(service, ids)


def test_refusals_are_logged_without_the_id(trained, service, caplog):
    _, files = trained
    with caplog.at_level(logging.INFO):
        status, _ = service.post({"rows": [{"customer_id": "secret-customer-77"}, {"customer_id":
                                                                                   "secret-customer-77"}]})
    assert status == 400
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refused and all("secret-customer-77" not in r.getMessage() for r in caplog.records)


def test_health_says_only_up_and_metrics_count_without_ids(trained, service):
    _, files = trained
    ids = _held_by_all(files)
    status, _, health = service.request("/health")
    assert status == 200 and health == {"status": "ok"}
    _honest(service, ids)
    service.post({"rows": [{"customer_id": "c1"}, {"customer_id": "c1"}]})
    status, headers, text = service.request("/metrics")
    assert status == 200 and "text/plain" in headers["content-type"]
    assert 'securevfl_serve_requests_total{outcome="ok"} 1.0' in text
    assert 'securevfl_serve_requests_total{outcome="bad_request"} 1.0' in text
    assert 'securevfl_serve_rows_total{outcome="scored"} 3.0' in text
    assert 'securevfl_serve_peer_seconds_count{peer="shop"}' in text
    assert not any(i in text for i in ids[:3])


def test_rows_say_what_their_encoding_assumed(trained, service):
    _, files = trained
    ids = _held_by_all(files)
    features = pd.read_csv(files["bank"]).set_index("customer_id").drop(columns=["churn"]).loc[ids[0]].to_dict()
    numeric = next(c for c, v in features.items() if isinstance(v, float))
    status, answer = service.post({"rows": [{"customer_id": ids[0], **features, "tier": "platinum"},
                                            {"customer_id": ids[1], **features, numeric: None},
                                            {"customer_id": ids[2]}]})
    assert status == 200, answer
    notes = {p["customer_id"]: p["warnings"] for p in answer["predictions"]}
    assert notes == {ids[0]: ["unseen category: tier"], ids[1]: [f"imputed: {numeric}"], ids[2]: []}


def test_a_passive_party_cannot_link_repeated_requests(trained, service, monkeypatch):
    """The same ID asked twice reaches a passive party as two unrelated points (a fresh factor per batch)."""
    import securevfl.deploy.serving as serving

    seen: list[bytes] = []
    original = serving._points

    def recording(message, sender, most, what):
        if what == "request":
            seen.append(bytes(message))
        return original(message, sender, most, what)

    monkeypatch.setattr(serving, "_points", recording)
    _, files = trained
    ids = _held_by_all(files)
    first = service.post({"rows": [{"customer_id": ids[0]}]})
    second = service.post({"rows": [{"customer_id": ids[0]}]})
    assert first == second and first[0] == 200
    assert len(seen) == 4 and not set(seen[:2]) & set(seen[2:])  # each passive party: two unrelated points


@pytest.mark.timebound
def test_slow_clients_and_floods_do_not_stop_honest_requests(trained, tmp_path):
    """300 clients that never finish their headers, and 16 concurrent 2,000-row requests: a 3-row request is
    still answered, the slow clients are closed after the client deadline, and no thread is started per client."""
    _, files = trained
    ids = _held_by_all(files)
    unlimited = ServeSettings(ids_per_minute=0, ids_per_session=0)  # budgets are the next test's
    running = _serve(tmp_path, trained, bank=ServeSettings(client_timeout_s=1.0), shop=unlimited, clinic=unlimited)
    try:
        host, port = running.url.removeprefix("http://").split(":")
        before = threading.active_count()
        slow = []
        for _ in range(300):
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            slow.append(sock)
        assert threading.active_count() <= before + 2
        big = {"rows": [{"customer_id": f"x{i}"} for i in range(2000)]}
        with ThreadPoolExecutor(16) as pool:
            flood = [pool.submit(running.post, big) for _ in range(16)]
            t0 = time.perf_counter()
            _honest(running, ids)
            assert time.perf_counter() - t0 < 20
            assert all(f.result()[0] in (200, 429, 503) for f in flood)
        time.sleep(1.5)
        closed = 0
        for sock in slow:
            sock.settimeout(2)
            try:
                closed += sock.recv(1) == b""
            except OSError:
                closed += 1
            sock.close()
        assert closed == len(slow)
        _honest(running, ids)
    finally:
        running.close()


def test_passive_parties_enforce_their_own_membership_budget(trained, tmp_path, caplog):
    """The shop allows 5 IDs a minute: the second 3-ID request is refused (429 with Retry-After), logged at the
    shop, and nothing of it is looked up; the clinic's budget is its own."""
    _, files = trained
    ids = _held_by_all(files)
    running = _serve(tmp_path, trained, shop=ServeSettings(ids_per_minute=5))
    try:
        status, answer = running.post({"rows": [{"customer_id": i} for i in ids[:3]]})
        assert status == 200 and len(answer["predictions"]) == 3
        with caplog.at_level(logging.WARNING):
            status, headers, answer = running.request("/score", {"rows": [{"customer_id": i} for i in ids[3:6]]})
        assert status == 429 and "shop refused" in answer["error"] and "per minute" in answer["error"], answer
        assert 1 <= int(headers["retry-after"]) <= 60
        assert any("lookup 2: 1 of 1 request(s) refused (3 of 3 IDs)" in r.getMessage() for r in caplog.records)
        status, answer = running.post({"rows": [{"customer_id": ids[6]}]})  # one more fits (5 - 3 + refill)
        assert status == 200
    finally:
        running.close()
    with pytest.raises(securevfl.errors.ConfigError, match="ids_per_session"):
        ServeSettings(ids_per_session=-1)


def test_an_endpoint_beyond_loopback_needs_tls_and_client_authentication(trained, tmp_path):
    model, files = trained
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB))
    for settings in (ServeSettings(), ServeSettings(token_file=tmp_path / "token")):
        with pytest.raises(securevfl.errors.ConfigError, match="beyond loopback needs TLS"):
            run_serving_party(fed, "bank", files["bank"], model, listen="0.0.0.0:0", settings=settings)


@pytest.fixture(scope="module")
def endpoint_pki(tmp_path_factory):
    from securevfl.deploy.certs import make_dev_pki

    return make_dev_pki(["bank", "caller"], tmp_path_factory.mktemp("endpoint-pki"))


def test_https_with_a_bearer_token(trained, tmp_path, endpoint_pki):
    _, files = trained
    ids = _held_by_all(files)
    token = tmp_path / "token"
    token.write_text("s3cret-token-of-the-bank\n")
    token.chmod(0o600)
    settings = ServeSettings(cert=endpoint_pki.certs["bank"], key=endpoint_pki.keys["bank"], token_file=token)
    running = _serve(tmp_path, trained, bank=settings)
    try:
        assert running.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(endpoint_pki.ca_cert))
        context.check_hostname = False
        body = {"rows": [{"customer_id": ids[0]}]}
        assert running.post(body, context=context)[0] == 401
        assert running.post(body, {"Authorization": "Bearer wrong-token-of-the-bank"}, context)[0] == 401
        assert running.request("/metrics", context=context)[0] == 401
        status, answer = running.post(body, {"Authorization": "Bearer s3cret-token-of-the-bank"}, context)
        assert status == 200 and len(answer["predictions"]) == 1
        assert running.request("/health", context=context)[0] == 200  # up or not: no token needed
    finally:
        running.close()
    token.chmod(0o644)
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB, name="fed2.toml"))
    with pytest.raises(securevfl.errors.ConfigError, match="chmod 600"):
        run_serving_party(fed, "bank", files["bank"], trained[0], listen="127.0.0.1:0", settings=settings)


def test_mutual_tls_refuses_a_caller_without_a_certificate(trained, tmp_path, endpoint_pki):
    _, files = trained
    ids = _held_by_all(files)
    settings = ServeSettings(cert=endpoint_pki.certs["bank"], key=endpoint_pki.keys["bank"],
                             client_ca=endpoint_pki.ca_cert)
    running = _serve(tmp_path, trained, bank=settings)
    try:
        context = ssl.create_default_context(cafile=str(endpoint_pki.ca_cert))
        context.check_hostname = False
        with pytest.raises(OSError):
            running.post({"rows": [{"customer_id": ids[0]}]}, context=context)
        context.load_cert_chain(endpoint_pki.certs["caller"], endpoint_pki.keys["caller"])
        status, answer = running.post({"rows": [{"customer_id": ids[0]}]}, context=context)
        assert status == 200 and len(answer["predictions"]) == 1
    finally:
        running.close()


def test_a_passive_party_may_serve_only_the_customers_it_trained_on(trained, tmp_path):
    """The shop's current table has customers it did not have in training: served by default, not with
    --serve-ids training (whose membership the training's PSI already showed the active party)."""
    from org_tables import organisation_frames, write_tables

    model, files = trained
    full_shop = write_tables({"shop": organisation_frames(7, keep=1.0)["shop"]}, tmp_path / "now")["shop"]
    bank, clinic, shop = (set(pd.read_csv(files[p]).customer_id) for p in ("bank", "clinic", "shop"))
    new_at_shop = sorted((bank & clinic) - shop)[:3]
    trained_ids = sorted(bank & clinic & shop)[:2]
    body = {"rows": [{"customer_id": i} for i in new_at_shop + trained_ids]}
    fed = load_federation(loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB))
    for serve_ids, scored in (("all", new_at_shop + trained_ids), ("training", trained_ids)):
        running = Service(fed, model, {**files, "shop": full_shop},
                          settings={"shop": ServeSettings(serve_ids=serve_ids)})
        try:
            status, answer = running.post(body)
        finally:
            running.close()
        assert status == 200 and sorted(p["customer_id"] for p in answer["predictions"]) == sorted(scored), answer
    with pytest.raises(securevfl.errors.ConfigError, match="serve_ids must be one of all, training"):
        ServeSettings(serve_ids="some")


@pytest.mark.timebound
@pytest.mark.parametrize("second", ["serve", "predict"])
def test_a_second_process_of_a_party_is_refused_and_the_service_goes_on(trained, tmp_path, second):
    """In a star (only the bank listens), the shop started again — a second `--serve`, or a batch `--predict`
    with the same federation file — while the service runs: the newcomer is refused at its handshake; every
    live party stays up and requests are answered (before: the refusal failed the live session everywhere)."""
    import re

    from securevfl.pipeline.score import run_deployed_scoring

    model, files = trained
    ids = _held_by_all(files)
    path = loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB)
    path.write_text(re.sub(r'(\[parties\.(shop|clinic)\])\naddress = "[^"]*"', r"\1", path.read_text()))
    fed = load_federation(path)
    assert fed.topology == "star"
    service = Service(fed, model, files)
    outcome: dict[str, BaseException | None] = {}

    def newcomer() -> None:
        try:
            if second == "serve":
                run_serving_party(fed, "shop", files["shop"], model, device="cpu")
            else:
                run_deployed_scoring(fed, "shop", files["shop"], model, device="cpu")
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            outcome["error"] = exc

    try:
        thread = threading.Thread(target=newcomer, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while thread.is_alive() and time.monotonic() < deadline:
            _honest(service, ids)
            time.sleep(0.2)
        thread.join(1)
        assert not thread.is_alive() and isinstance(outcome.get("error"), securevfl.errors.SecureVFLError), outcome
        assert "refused" in str(outcome["error"]), outcome
        _honest(service, ids)
    finally:
        service.close()


def test_a_client_gone_while_its_request_is_scored_does_not_stop_the_service(trained, service, monkeypatch):
    """The answer of a request whose client went away mid-batch is dropped; the service goes on."""
    import urllib.request

    import securevfl.deploy.serving_active as serving_active

    _, files = trained
    ids = _held_by_all(files)
    original = serving_active._answer

    def slow(*args, **kwargs):
        time.sleep(1.0)
        return original(*args, **kwargs)

    monkeypatch.setattr(serving_active, "_answer", slow)
    body = json.dumps({"rows": [{"customer_id": ids[0]}]}).encode()
    request = urllib.request.Request(f"{service.url}/score", data=body, method="POST")
    with pytest.raises(OSError):  # the client gives up after 0.3 s and closes its connection
        urllib.request.urlopen(request, timeout=0.3)
    time.sleep(1.5)
    monkeypatch.setattr(serving_active, "_answer", original)
    _honest(service, ids)
