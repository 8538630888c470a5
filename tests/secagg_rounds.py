"""Shared steps of secure-aggregation protocol tests: every party through round 0's setup; a round's unmasking."""

from __future__ import annotations

from securevfl.privacy import secagg as sa


def set_up_round0(cfg, urandom=None, tamper=lambda party, setup: setup):
    """Round 0 set up for every party of ``cfg``; ``tamper(party, setup)`` may alter a party's setup message.

    Returns ``(parties, aggregator, bundles, setups)``: the passive states with round 0's bundle
    received (no input sent yet), the aggregator, the bundles it routed and the setups it got.
    """
    parties = {p: sa.PassiveSecAggState.create(cfg, p, urandom) for p in cfg.parties}
    agg = sa.AggregatorSecAggState.create(cfg)
    agg, directory = sa.collect_adverts(agg, [sa.advertise_keys(s) for s in parties.values()])
    parties = {p: sa.receive_keys(s, directory) for p, s in parties.items()}
    setups = []
    for p in cfg.parties:
        parties[p], setup = sa.share_keys(parties[p], 0)
        setups.append(tamper(p, setup))
    agg, bundles = sa.collect_setups(agg, setups)
    parties = {p: sa.receive_setup(parties[p], bundles[p]) for p in cfg.parties}
    return parties, agg, bundles, setups


def survivors_respond(parties, agg, masked):
    """Close a round on the ``masked`` inputs and collect every survivor's unmask response.

    ``parties`` (name -> passive state) is updated in place; returns ``(aggregator, request, responses)``.
    """
    agg, request = sa.unmask_request(agg, masked)
    responses = []
    for p in request.survivors:
        parties[p], response = sa.unmask_response(parties[p], request)
        responses.append(response)
    return agg, request, responses
