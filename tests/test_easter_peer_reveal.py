"""EASTER: a passive party must not be able to compute another's embedding from the global embedding.

With a featureless active party and two passive contributors, k·E − e_own is the other passive
party's embedding, whatever secure aggregation is used (hardening issue, item 3). Such a
configuration, or such a round, is refused unless the user accepts it with allow_peer_reveal.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from aggregation_harness import RecordingTransport

import securevfl
from securevfl.api import RunConfig, build_scenario
from securevfl.data import PartitionSpec
from securevfl.errors import ConfigError, PartyFailure, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig, create_method
from securevfl.methods import easter as easter_module
from securevfl.methods.engine import aggregate as aggregate_module
from securevfl.methods.engine import peer_reveal


def featureless_active(parties: int):
    return build_scenario(RunConfig(dataset="breast-cancer", alignment="plaintext",
                                    partition=PartitionSpec(parties=parties, active_features=0)))


def easter(secagg: str = "dh", **options):
    return create_method("easter", TrainConfig(epochs=1, batch_size=64, seed=3,
                                               options={"secagg": secagg, "embedding_size": 8, **options}))


@pytest.mark.parametrize("secagg", ["dh", "pairwise", "paillier"])
def test_two_passive_parties_and_a_featureless_active_party_are_refused(secagg):
    with pytest.raises(ConfigError, match="allow_peer_reveal"):
        easter(secagg).roles(featureless_active(3))


def test_the_refusal_reaches_the_api_as_one_config_error():
    with pytest.raises(ConfigError, match="compute the other's contribution"):
        securevfl.train("easter", "breast-cancer", parties=3, active_features=0, epochs=1, device="cpu",
                        alignment="plaintext", options={"secagg": "dh", "embedding_size": 8})


def test_configurations_that_hide_each_embedding_still_run():
    easter("none").roles(featureless_active(3))  # plaintext promises nothing
    easter("dh").roles(featureless_active(4))  # three passive contributors
    easter("dh").roles(build_scenario(RunConfig(dataset="breast-cancer", alignment="plaintext",
                                                partition=PartitionSpec(parties=3))))  # the active adds e_active


def test_simulated_dropouts_never_leave_two_passive_contributors():
    # 3 passive parties, featureless active: any drop leaves two, so dropouts are refused ...
    with pytest.raises(ConfigError, match="two passive contributors"):
        easter("dh", drop_prob=0.2).roles(featureless_active(4))
    # ... while with 4 passive parties at most one may drop (dh alone would allow two).
    method = easter("dh", drop_prob=0.5)
    scenario = featureless_active(5)
    assert method._max_drops(False, 4, method.options.aggregation()) == 1
    report = securevfl.run(RunConfig(method="easter", dataset="breast-cancer", alignment="plaintext", device="cpu",
                                     partition=PartitionSpec(parties=5, active_features=0),
                                     train=TrainConfig(epochs=1, batch_size=64, seed=3,
                                                       options={"secagg": "dh", "drop_prob": 0.5,
                                                                "embedding_size": 8})),
                           scenario=scenario)
    assert report.extra["secagg_stats"]["dropouts"] > 0


def test_a_round_with_two_survivors_is_refused_before_broadcasting():
    with pytest.raises(ProtocolError, match="only 2 passive parties"):
        peer_reveal.refuse_round("easter", "dh", False, 2, False)
    peer_reveal.refuse_round("easter", "dh", True, 2, False)  # the active party contributes
    peer_reveal.refuse_round("easter", "dh", False, 3, False)
    peer_reveal.refuse_round("easter", "dh", False, 2, True)  # accepted by the user
    peer_reveal.refuse_round("easter", "none", False, 2, False)  # plaintext promises nothing


def test_a_real_round_with_two_survivors_fails_instead_of_leaking(monkeypatch):
    """A dropout the plan did not foresee (a deployment) stops the run before E is broadcast."""
    scenario = featureless_active(4)
    method = easter("dh")
    monkeypatch.setattr(easter_module, "drop_schedule",
                        lambda passives, *args: frozenset(passives[:1]))  # one of three drops every round
    transport = RecordingTransport(list(scenario.tables))
    with pytest.raises(PartyFailure) as info:
        run_parties(method.roles(scenario), active=scenario.active, transport=transport)
    assert isinstance(info.value.cause, ProtocolError) and info.value.party == scenario.active
    assert not any(e.tag == "easter.train.global" for e in transport.envelopes)


def test_with_allow_peer_reveal_the_leak_is_real_and_reported(monkeypatch):
    """What the flag accepts, measured: passive1 recovers passive2's embedding as k·E − e_own."""
    embeddings: dict[str, list[np.ndarray]] = {}
    lock = threading.Lock()
    original = aggregate_module.build_local_model

    def recording_model(data, arch, size, n_classes, seed, name):
        model = original(data, arch, size, n_classes, seed, name)

        def record(module, inputs, output):
            with lock:
                embeddings.setdefault(name, []).append(output.detach().cpu().numpy().copy())

        model.embed.register_forward_hook(record)
        return model

    monkeypatch.setattr(aggregate_module, "build_local_model", recording_model)
    scenario = featureless_active(3)
    transport = RecordingTransport(list(scenario.tables))
    result = run_parties(easter("dh", allow_peer_reveal=True).roles(scenario), active=scenario.active,
                         transport=transport)
    p1, p2 = [n for n in scenario.tables if n != scenario.active]
    first = next(codec.decode(e.payload) for e in transport.envelopes
                 if e.tag == "easter.train.global" and e.dst == p1)
    recovered = first["k"] * first["E"].numpy() - embeddings[p1][0]
    error = np.max(np.abs(recovered - embeddings[p2][0]))
    print("peer embedding recovered to", error)
    assert error < 1e-3  # fixed-point resolution (2^-16 per value, times k), not a guess
    assert result.results[scenario.active].extra["warnings"] == [peer_reveal.warning("easter", "dh")]
    assert isinstance(first["E"], torch.Tensor)


def test_the_warning_reaches_the_report_notes():
    report = securevfl.train("easter", "breast-cancer", parties=3, active_features=0, epochs=1, device="cpu",
                             alignment="plaintext",
                             options={"secagg": "dh", "embedding_size": 8, "allow_peer_reveal": "true"})
    assert any("allow_peer_reveal" in note for note in report.notes)


def test_aggvfl_refuses_the_same_configuration():
    method = create_method("aggvfl", TrainConfig(epochs=1, options={"secagg": "dh"}))
    with pytest.raises(ConfigError, match="allow_peer_reveal"):
        method.roles(featureless_active(3))
    create_method("aggvfl", TrainConfig(epochs=1, options={"secagg": "dh", "allow_peer_reveal": True})).roles(
        featureless_active(3))
    create_method("aggvfl", TrainConfig(epochs=1, options={"secagg": "dh"})).roles(featureless_active(4))
