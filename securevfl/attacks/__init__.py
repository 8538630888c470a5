"""Measured privacy: attacks that see exactly what one party receives in a real run.

``securevfl.train(..., attacks=["label-norm", "feature-inversion"])`` (CLI: ``--attack NAME``)
taps the attacking party's channel (:mod:`.tap`), lets each attack infer from that party's own
view only (:class:`~securevfl.attacks.base.AttackerView`), and scores the inference against the
ground truth afterwards, next to a random-guess baseline: the report's ``privacy`` section.

Attacks: ``label-norm`` and ``label-cosine`` (a passive party infers labels from its gradients),
``model-completion`` (from its own trained bottom and a few known labels; :mod:`.label`),
``feature-inversion`` (the active party reconstructs a passive party's features from its
embeddings or the aggregate it learns) and ``peer-inversion`` (a passive party from EASTER's global
embedding; :mod:`.inversion`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from securevfl.attacks import inversion as _inversion  # noqa: F401 - registers its attack
from securevfl.attacks import label as _label  # noqa: F401 - registers its attacks
from securevfl.attacks.base import (
    Attack,
    AttackerView,
    AttackResult,
    Inference,
    attack_names,
    create_attack,
    register_attack,
)
from securevfl.attacks.tap import ChannelTap, Observation, tapped
from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.methods.base import Role, TrainConfig


@dataclass
class PlannedAttack:
    """An attack attached to a run: who attacks whom, and the attacker's tap."""

    attack: Attack
    attacker: str
    target: str
    tap: ChannelTap


def attach(roles: dict[str, Role], scenario: Scenario, names: Sequence[str]
           ) -> tuple[dict[str, Role], list[PlannedAttack]]:
    """Tap the attacking parties' channels (one tap per party, shared by its attacks)."""
    attacks = [create_attack(n) for n in dict.fromkeys(names)]  # unknown names fail before the run
    if attacks and not scenario.passives:
        raise ConfigError("attacks need at least one passive party")
    taps: dict[str, ChannelTap] = {}
    planned = []
    for attack in attacks:
        attacker, target = attack.parties(scenario)
        tap = taps.setdefault(attacker, ChannelTap(attacker))
        planned.append(PlannedAttack(attack, attacker, target, tap))
    wrapped = {name: tapped(role, taps[name]) if name in taps else role for name, role in roles.items()}
    return wrapped, planned


def evaluate(planned: Sequence[PlannedAttack], scenario: Scenario, method: str,
             config: TrainConfig) -> list[AttackResult]:
    """Run every attack on its party's view, then score it against the ground truth."""
    results = []
    for p in planned:
        view = AttackerView(p.attacker, method, scenario.party_data(p.attacker), config, p.tap, p.target,
                            p.attack.auxiliary(scenario, p.attacker, p.target))
        observed = f"{len(p.tap.observations)} messages received by {p.attacker}"
        inference: Inference | str | None
        if p.target == "labels" and scenario.task == "regression":
            inference = "label attacks score class labels; this is a regression task"
        else:
            inference = p.attack.infer(view)
        if not isinstance(inference, Inference):
            reason = inference or f"{p.attacker} received nothing this attack can use"
            results.append(AttackResult(p.attack.name, p.attacker, p.target, p.attack.metric_for(view), None,
                                        float("nan"),
                                        observed, f"not applicable to {method}: {reason}"))
            continue
        value, baseline = p.attack.score(inference, scenario, view)
        results.append(AttackResult(p.attack.name, p.attacker, p.target, p.attack.metric_for(view), value, baseline,
                                    observed, inference.note, p.attack.own_data(inference, scenario, view)))
    return results


__all__ = ["Attack", "AttackResult", "AttackerView", "ChannelTap", "Inference", "Observation", "PlannedAttack",
           "attach", "attack_names", "create_attack", "evaluate", "register_attack", "tapped"]
