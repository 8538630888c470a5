"""Who is who in a run: ``ctx.peers`` (every other role) and ``ctx.passives`` (the passive data parties).

Helper roles that a method runs beside the data parties (hetero-lr's arbiter, VFedTrans's key
generator and server) are peers, never passives. And a role that returns early fails a peer's
pending receive at once, whichever kind of role it is.
"""

from __future__ import annotations

import time

import pytest

from securevfl.errors import ConfigError, PartyFailure, PeerFinishedError, ProtocolError
from securevfl.federation.runtime import run_parties


def noop(ctx):
    return (ctx.peers, ctx.passives)


def test_peers_are_every_other_role_and_passives_the_named_data_parties():
    roles = {"a": noop, "p1": noop, "arbiter": noop, "p2": noop}
    result = run_parties(roles, active="a", passives=("p1", "p2")).results
    assert result["a"] == (("p1", "arbiter", "p2"), ("p1", "p2"))
    assert result["arbiter"] == (("a", "p1", "p2"), ("p1", "p2"))
    assert result["p2"] == (("a", "p1", "arbiter"), ("p1", "p2"))


def test_without_passives_every_role_but_the_active_one_is_a_passive():
    result = run_parties({"a": noop, "p": noop, "q": noop}, active="a").results
    assert result["a"] == (("p", "q"), ("p", "q"))
    assert result["q"] == (("a", "p"), ("p", "q"))


@pytest.mark.parametrize("passives", [("a", "p"), ("p", "nobody"), ("p", "p")])
def test_passives_must_be_distinct_roles_other_than_the_active_one(passives):
    with pytest.raises(ConfigError, match="passives"):
        run_parties({"a": noop, "p": noop}, active="a", passives=passives)


def recording(monkeypatch, method_class):
    """Patch ``method_class.roles`` so every role records its context's peers and passives."""
    seen = {}
    original = method_class.roles

    def roles(self, scenario):
        def wrap(name, role):
            def wrapped(ctx):
                seen[name] = (set(ctx.peers), set(ctx.passives))
                return role(ctx)

            return wrapped

        return {name: wrap(name, role) for name, role in original(self, scenario).items()}

    monkeypatch.setattr(method_class, "roles", roles)
    return seen


def assert_helpers_are_peers_not_passives(seen, data_parties, helpers):
    active, *passives = data_parties
    assert set(seen) == {*data_parties, *helpers}
    for name, (peers, ctx_passives) in seen.items():
        assert peers == {*data_parties, *helpers} - {name}, name
        assert ctx_passives == set(passives), name
        assert not ctx_passives & set(helpers), name


def test_hetero_lr_arbiter_is_a_peer_not_a_passive(monkeypatch):
    import securevfl
    from securevfl.methods.hetero_lr import ARBITER, HeteroLR

    seen = recording(monkeypatch, HeteroLR)
    securevfl.train("hetero-lr", "breast-cancer", parties=3, epochs=1, batch_size=128, device="cpu",
                    alignment="plaintext", options={"key_bits": 1024, "insecure_allow_small_key": True})
    assert_helpers_are_peers_not_passives(seen, ("active", "passive1", "passive2"), (ARBITER,))


def test_vfedtrans_key_generator_and_server_are_peers_not_passives(monkeypatch):
    import securevfl
    from securevfl.methods.vfedtrans import KEYGEN, SERVER, VFedTrans

    seen = recording(monkeypatch, VFedTrans)
    securevfl.train("vfedtrans", "synthetic", n_samples=300, n_features=8, active_features=3, aligned=80,
                    unaligned="disjoint", epochs=1, batch_size=64, device="cpu", alignment="plaintext",
                    options={"cv_folds": 3})
    assert_helpers_are_peers_not_passives(seen, ("active", "passive1"), (KEYGEN, SERVER))


@pytest.mark.parametrize("quitter", ["p", "arbiter"])
def test_a_role_that_returns_early_fails_the_pending_recv_of_its_peer_within_a_second(quitter):
    """The peer is already blocked in ``recv`` when the other role returns; it fails in well under 1 s."""
    returned, raised = {}, {}

    def waiting(ctx):
        try:
            ctx.recv(quitter, "test.never_sent")
        except ProtocolError as exc:
            raised["at"], raised["error"] = time.perf_counter(), exc
            raise

    def quitting(ctx):
        time.sleep(0.3)  # the active party is waiting in recv by now
        returned["at"] = time.perf_counter()

    roles = {"active": waiting, "p": noop, "arbiter": noop, quitter: quitting}
    started = time.perf_counter()
    with pytest.raises(PartyFailure) as failure:
        run_parties(roles, active="active", passives=("p",), recv_timeout=30)
    assert failure.value.party == "active" and isinstance(failure.value.cause, PeerFinishedError)
    assert isinstance(raised["error"], PeerFinishedError) and raised["error"].peer == quitter
    assert "'test.never_sent'" in str(raised["error"])
    assert 0 <= raised["at"] - returned["at"] < 1.0
    assert time.perf_counter() - started < 5
