"""Feature reconstruction by the active party from the embeddings a passive party sends it.

Model inversion with an auxiliary set (the setting of Luo et al., "Feature Inference Attack on
Model Predictions in Vertical Federated Learning", ICDE 2021, and He et al., "Model Inversion
Attacks against Collaborative Inference", ACSAC 2019): the active party knows the passive
features of a few training rows (``AUX_FRACTION`` of them, chosen by a seeded draw — granted by the
threat model, handed to the attack explicitly), pairs them with the embeddings it received for
those rows in the last training epoch, fits a ridge regression embedding -> features, and applies
it to the embeddings of the test rows it received at evaluation. Metric: R² of the reconstructed
test features (averaged over features) against predicting the auxiliary rows' mean (baseline).

Works on what the method delivers (``<method>.train.embedding`` / ``<method>.test.embedding`` in the
engine's batch order): SplitNN's embeddings, C-VFL's decompressed embeddings; with noise on the
embeddings the same code measures what the noise hides. A method that sends no embeddings to the
active party (EASTER's secure sum, APC-VFL's one-shot latents) is reported as not applicable.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import RidgeCV
from sklearn.metrics import r2_score

from securevfl.attacks.base import Attack, AttackerView, Inference, as_array, register_attack
from securevfl.attacks.label import epoch_rows
from securevfl.data.scenario import Scenario
from securevfl.seeding import simulation_rng

#: Share of the training rows whose passive features the attacker knows (its auxiliary set).
AUX_FRACTION = 0.2

def _embedding(message: Any) -> np.ndarray:
    """An embedding as the active party decodes it (a tensor, or C-VFL's compressed message)."""
    if isinstance(message, dict):
        from securevfl.methods.cvfl import decompress

        return decompress(message).astype(np.float64)
    return as_array(message)


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

    def infer(self, view: AttackerView) -> Inference | None:
        train = view.tap.received(".train.embedding", src=view.target)
        test = view.tap.received(".test.embedding", src=view.target)
        if not train or not test:
            return None
        epochs = len(train) // max(sum(1 for _ in epoch_rows(view, 0)), 1)
        last = train[-sum(1 for _ in epoch_rows(view, epochs - 1)):]
        embedding_of = {}
        for rows, message in zip(epoch_rows(view, epochs - 1), last):
            for row, e in zip(rows, _embedding(message)):
                embedding_of[int(row)] = e
        aux_rows, aux_features = view.auxiliary["rows"], view.auxiliary["features"]
        known = [i for i, r in enumerate(aux_rows) if int(r) in embedding_of]
        E = np.stack([embedding_of[int(aux_rows[i])] for i in known])
        model = RidgeCV(alphas=np.logspace(-3, 3, 13)).fit(E, aux_features[known])
        E_test = _embedding(test[-1])
        return Inference(np.arange(len(E_test)), model.predict(E_test),
                         note=f"{len(known)} auxiliary rows, ridge alpha {model.alpha_:.3g}")

    def score(self, inference: Inference, scenario: Scenario, view: AttackerView) -> tuple[float, float]:
        truth = scenario.party_data(view.target).X_test[inference.rows]
        mean_guess = np.broadcast_to(view.auxiliary["features"].mean(axis=0), truth.shape)
        return float(r2_score(truth, inference.values)), float(r2_score(truth, mean_guess))
