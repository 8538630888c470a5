"""Feature reconstruction by the active party from the embeddings a passive party sends it.

Model inversion with an auxiliary set (the setting of Luo et al., "Feature Inference Attack on
Model Predictions in Vertical Federated Learning", ICDE 2021, and He et al., "Model Inversion
Attacks against Collaborative Inference", ACSAC 2019): the active party knows the passive
features of a few training rows (``AUX_FRACTION`` of them, chosen by a seeded draw — granted by the
threat model, handed to the attack explicitly), pairs them with the embeddings it received for
those rows in the last training epoch, fits a ridge regression embedding -> features, and applies
it to the embeddings of the test rows it received at evaluation. Metric: R² of the reconstructed
test features (averaged over features) against predicting the auxiliary rows' mean (baseline).

Works on what the method delivers, in the engine's batch order: SplitNN's embeddings, C-VFL's
decompressed embeddings, EASTER's and Agg-VFL's plaintext contributions (``secagg=none``) or, under
secure aggregation, the *sum* of the passive contributions that each round reveals to the active
party — so the number falls for the right reason. With noise on the embeddings the same code
measures what the noise hides. APC-VFL's one-shot latents of the aligned training rows are inverted
the same way and scored on the training rows outside the auxiliary set.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.metrics import r2_score

from securevfl.attacks.base import Attack, AttackerView, Inference, as_array, register_attack
from securevfl.attacks.label import epoch_rows
from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError
from securevfl.methods.engine.loop import EMBEDDING_ROWS
from securevfl.seeding import simulation_rng

#: Share of the training rows whose passive features the attacker knows (its auxiliary set).
AUX_FRACTION = 0.2

def _embedding(message: Any) -> np.ndarray:
    """An embedding as the active party decodes it (a tensor, or C-VFL's compressed message)."""
    if isinstance(message, dict):
        from securevfl.methods.cvfl import decompress

        return decompress(message).astype(np.float64)
    return as_array(message)


def _ridge() -> RidgeCV:
    """The inversion model: ridge regression, its penalty chosen by leave-one-out on the auxiliary rows."""
    return RidgeCV(alphas=np.logspace(-3, 3, 13))


def _rows(data: Any, inference: Inference) -> np.ndarray:
    """The rows of ``data`` an inference is about (aligned training or test rows)."""
    return (data.X_train if inference.split == "train" else data.X_test)[inference.rows]


def _per_round_views(view: AttackerView) -> tuple[list[Any], Any]:
    """What the active party holds about the target, per training round, and for the test rows.

    The target's own embeddings when the method sends them (SplitNN, C-VFL; EASTER/Agg-VFL with
    ``secagg=none``, whose plaintext contributions arrive one per round); otherwise the sum of the
    passive contributions the aggregation reveals (``secagg=dh|pairwise|paillier``). The last round
    is the evaluation of the test rows.
    """
    tap = view.tap
    train = tap.received(".train.embedding", src=view.target)
    if train:
        test = tap.received(".test.embedding", src=view.target)
        return train, test[-1] if test else None
    options = view.config.options
    if options.get("drop_prob") or options.get("embed_grad", "own") != "own" or view.config.early_stopping:
        return [], None  # rounds with dropouts, gradient sums or validation do not map to batches simply
    rounds = tap.received("agg.plain", src=view.target) or [
        o.value for o in tap.observations if o.tag == "aggregate.sum"]
    return rounds[:-1], (rounds[-1] if rounds else None)


@register_attack
class FeatureInversion(Attack):
    """The active party reconstructs a passive party's features from its embeddings."""

    name = "feature-inversion"
    summary = "active party inverts a passive party's embeddings with a ridge model fitted on auxiliary rows"
    paper = "Luo et al., Feature Inference Attack on Model Predictions in VFL, ICDE 2021; He et al., ACSAC 2019"
    metric = "r2"

    def parties(self, scenario: Scenario) -> tuple[str, str]:
        return scenario.active, scenario.passives[0]

    def auxiliary(self, scenario: Scenario, attacker: str, target: str) -> dict[str, np.ndarray]:
        X = scenario.party_data(target).X_train
        n_aux = max(int(round(AUX_FRACTION * len(X))), 2)
        rows = np.sort(simulation_rng(0, "feature-inversion", target).choice(len(X), n_aux, replace=False))
        return {"rows": rows, "features": X[rows]}

    def rounds(self, view: AttackerView) -> tuple[list[Any], Any]:
        """Per training round and for the test rows: what the attacker holds about the target."""
        return _per_round_views(view)

    def infer(self, view: AttackerView) -> Inference | None:
        embedding_of, test = self._marked(view)
        if not embedding_of:
            train, test = self.rounds(view)
            if not train or test is None:
                return self._one_shot(view)
            per_epoch = len(list(epoch_rows(view, 0)))
            epochs = len(train) // max(per_epoch, 1)
            if epochs < 1 or len(train) != epochs * per_epoch:
                return None  # rounds do not line up with the agreed batches (dropouts, validation rounds)
            for rows, message in zip(epoch_rows(view, epochs - 1), train[-per_epoch:]):
                for row, e in zip(rows, _embedding(message)):
                    embedding_of[int(row)] = e
        if test is None:
            return None
        aux_rows, aux_features = view.auxiliary["rows"], view.auxiliary["features"]
        known = [i for i, r in enumerate(aux_rows) if int(r) in embedding_of]
        if len(known) < 2:
            return None
        E = np.stack([embedding_of[int(aux_rows[i])] for i in known])
        model = _ridge().fit(E, aux_features[known])
        E_test = _embedding(test)
        return Inference(np.arange(len(E_test)), model.predict(E_test),
                         note=f"{len(known)} auxiliary rows, ridge alpha {model.alpha_:.3g}")

    def _marked(self, view: AttackerView) -> tuple[dict[int, np.ndarray], Any]:
        """Entity Augmentation: the target's newest activation of each aligned row, by the entity keys it sent."""
        marks = [rows for src, rows in (o.value for o in view.tap.observations if o.tag == EMBEDDING_ROWS)
                 if src == view.target]
        if not marks:
            return {}, None
        sent = [m for m in view.tap.received(".train.activation", src=view.target) if m is not None]
        embedding_of: dict[int, np.ndarray] = {}
        for rows, (activation, _) in zip(marks, sent, strict=True):
            for row, e in zip(rows, as_array(activation)):
                if row >= 0:
                    embedding_of[int(row)] = e
        test = view.tap.received(".test.embedding", src=view.target)
        return embedding_of, (test[-1] if test else None)

    def _one_shot(self, view: AttackerView) -> Inference | None:
        """APC-VFL: the latents of the aligned training rows, received once; scored on the non-auxiliary rows."""
        latents = view.tap.received(".exchange.aligned_latents", src=view.target)
        if not latents:
            return None
        Z = _embedding(latents[-1])[: len(view.data.X_train)]
        aux_rows, aux_features = view.auxiliary["rows"], view.auxiliary["features"]
        model = _ridge().fit(Z[aux_rows], aux_features)
        rest = np.setdiff1d(np.arange(len(Z)), aux_rows)
        return Inference(rest, model.predict(Z[rest]), split="train",
                         note=f"one-shot latents; {len(aux_rows)} auxiliary rows, ridge alpha {model.alpha_:.3g}")

    def score(self, inference: Inference, scenario: Scenario, view: AttackerView) -> tuple[float, float]:
        truth = _rows(scenario.party_data(view.target), inference)
        mean_guess = np.broadcast_to(view.auxiliary["features"].mean(axis=0), truth.shape)
        return float(r2_score(truth, inference.values)), float(r2_score(truth, mean_guess))

    def own_data(self, inference: Inference, scenario: Scenario, view: AttackerView) -> float | None:
        """R² of the same ridge regression from the attacker's own features: what it knew without the run."""
        own = view.data
        if not own.n_features:
            return None
        model = _ridge().fit(own.X_train[view.auxiliary["rows"]], view.auxiliary["features"])
        truth = _rows(scenario.party_data(view.target), inference)
        return float(r2_score(truth, model.predict(_rows(own, inference))))


@register_attack
class PeerInversion(FeatureInversion):
    """A passive party reconstructs another passive party's features from EASTER's global embedding.

    Party k receives E and K each round and knows its own contribution e_k, so it holds
    K·E − e_k: the sum of every *other* contribution. With two passive contributors and a
    featureless active party that is the other party's embedding exactly (the case EASTER refuses
    unless ``allow_peer_reveal=true``); with more it is a sum, inverted the same way as
    ``feature-inversion`` (auxiliary rows of the target's features, ridge regression).
    """

    name = "peer-inversion"
    summary = "passive party inverts K*E - e_own (EASTER's global embedding) into another passive party's features"

    def parties(self, scenario: Scenario) -> tuple[str, str]:
        if len(scenario.passives) < 2:
            raise ConfigError("peer-inversion needs two passive parties")
        return scenario.passives[0], scenario.passives[1]

    def rounds(self, view: AttackerView) -> tuple[list[Any], Any]:
        options = view.config.options
        if options.get("drop_prob") or view.config.early_stopping:
            return [], None
        globals_ = view.tap.received(".train.global") + view.tap.received(".test.global")
        own = [o.value for o in view.tap.observations if o.tag == "aggregate.contribution"]
        if not globals_ or len(globals_) != len(own):
            return [], None
        others = [int(g["k"]) * as_array(g["E"]) - np.asarray(e, dtype=np.float64) for g, e in zip(globals_, own)]
        return others[:-1], others[-1]
