"""Label inference by a passive party from the gradients it receives (Li et al., ICLR 2022).

"Label Leakage and Protection in Two-party Split Learning" (Li, Sun, Wang, Zhang, Zhou, Yan, Wang):
in binary split learning the gradient a passive party receives for a row is (p − y)·(something
shared by the batch), so

* **norm scoring** (``label-norm``): rows of the rare class get larger gradients (|p − y| is
  larger where the model is less sure, and it is less sure of the rare class); score = the row's
  gradient norm (times the batch size, so batches of different sizes compare);
* **direction scoring** (``label-cosine``): the gradients of the two classes point in opposite
  directions; score = minus the cosine of the row's gradient with the common class's direction,
  which the attacker follows from batch to batch (the mean direction of the rows that agreed with
  it), the larger group being taken as the common class. Li et al. assume one row of known label;
  this variant needs none.

The attacker knows which rows each gradient belongs to because the batch order is agreed (part of
the run configuration) or, in Entity Augmentation, because it chose the rows it sent (its own
schedule). Scores use each aligned training row's first gradient (the first epoch, where every
training row appears once; in Entity Augmentation the guest's other labelled rows are not scored,
for want of a ground truth the evaluator can align).
Metric: AUC of the score for "row is of the rarer class" (binary tasks), baseline 0.5. With more
classes, ``label-cosine`` clusters the first epoch's gradient directions into as many groups as
classes (k-means) and is scored by the accuracy of the best cluster-to-class matching (what a few
known labels would let the attacker name), against the majority-class share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from securevfl.attacks.base import Attack, AttackerView, Inference, as_array, register_attack
from securevfl.data.scenario import Scenario
from securevfl.methods.engine.loop import GRADIENT_ROWS, OWN_OUTPUTS, agreed_batches, split_rows
from securevfl.seeding import simulation_rng

#: Rows whose labels the model-completion attacker knows (Fu et al. use 40 for Breast Cancer-sized sets).
KNOWN_LABELS = 40

#: Methods whose passive party receives one gradient per batch, in the agreed order (Entity
#: Augmentation's guests mark their own rows instead: ``GRADIENT_ROWS``).
GRADIENT_METHODS = ("splitnn", "pyvertical", "cvfl", "aggvfl", "easter")


def epoch_rows(view: AttackerView, epoch: int) -> Iterator[np.ndarray]:
    """The training rows of each batch of ``epoch``, as the attacker derives them from the agreed settings."""
    rows, _ = split_rows(len(view.data.X_train), view.config)
    return agreed_batches(rows, view.config, epoch)


class _GradientLabelAttack(Attack):
    metric = "auc"
    paper = "Li et al., Label Leakage and Protection in Two-party Split Learning, ICLR 2022"

    def parties(self, scenario: Scenario) -> tuple[str, str]:
        return scenario.passives[0], "labels"

    def metric_for(self, view: AttackerView) -> str:
        return "accuracy" if view.data.n_classes > 2 else "auc"

    def _first_epoch(self, view: AttackerView) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """(rows, gradients) of each received gradient, keeping each aligned training row's first one."""
        grads = view.tap.received(".train.gradient", src=None)
        marked = [o.value for o in view.tap.observations if o.tag == GRADIENT_ROWS]
        if marked:  # the party's own schedule says which rows each gradient belongs to
            batches: Iterator[np.ndarray] | list[np.ndarray] = marked
        elif view.method in GRADIENT_METHODS and not view.config.options.get("drop_prob"):
            batches = epoch_rows(view, 0)
        else:
            return None
        pairs, seen = [], np.zeros(len(view.data.X_train), dtype=bool)
        for rows, grad in zip(batches, grads):
            g = as_array(grad).reshape(len(rows), -1)
            first = np.flatnonzero(rows >= 0)
            first = first[~seen[rows[first]]]
            first = np.sort(first[np.unique(rows[first], return_index=True)[1]])  # a row twice in a batch: once
            seen[rows[first]] = True
            if len(first):
                pairs.append((rows[first], g[first]))
        return pairs or None

    def score(self, inference: Inference, scenario: Scenario, view: AttackerView) -> tuple[float, float]:
        y = np.asarray(scenario.party_data(scenario.active).y_train)[inference.rows]
        if view.data.n_classes > 2:  # clusters of directions: accuracy under the best cluster -> class matching
            counts = np.zeros((view.data.n_classes, view.data.n_classes), dtype=np.int64)
            np.add.at(counts, (inference.values.astype(np.int64), y), 1)
            clusters, classes = linear_sum_assignment(-counts)
            majority = np.bincount(y).max() / len(y)
            return float(counts[clusters, classes].sum() / len(y)), float(majority)
        rare = int(np.argmin(np.bincount(y, minlength=2)))
        return float(roc_auc_score(y == rare, inference.values)), 0.5


@register_attack
class LabelNorm(_GradientLabelAttack):
    """Norm scoring: rows of the rarer class receive larger gradients."""

    name = "label-norm"
    summary = "passive party scores rows by the norm of the gradient it receives (Li et al. 2022)"

    def infer(self, view: AttackerView) -> Inference | str | None:
        pairs = self._first_epoch(view)
        if view.data.n_classes > 2:
            return "norm scoring separates a rare class from the rest: binary tasks only (see label-cosine)"
        if pairs is None:
            return None
        rows = np.concatenate([r for r, _ in pairs])
        values = np.concatenate([np.linalg.norm(g, axis=1) * len(r) for r, g in pairs])
        return Inference(rows, values)


@register_attack
class LabelCosine(_GradientLabelAttack):
    """Direction scoring: the two classes' gradients point in opposite directions."""

    name = "label-cosine"
    summary = "passive party scores rows by the direction of their gradient within the batch (Li et al. 2022)"

    def infer(self, view: AttackerView) -> Inference | str | None:
        pairs = self._first_epoch(view)
        if pairs is None:
            return None
        if view.data.n_classes > 2:
            return self._clusters(pairs, view.data.n_classes, view.config.seed)
        scores, common = [], None  # the common class's gradient direction, followed from batch to batch
        for _, g in pairs:
            unit = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
            if common is None:
                first = unit @ unit[0]
                common = unit[0] if (first >= 0).sum() * 2 >= len(first) else -unit[0]
            score = -(unit @ common)  # high: points away from the common class
            scores.append(score)
            if (score < 0).any():
                mean = unit[score < 0].mean(axis=0)
                common = mean / max(float(np.linalg.norm(mean)), 1e-12)
        values = np.concatenate(scores)
        if (values > 0).sum() > (values < 0).sum():  # the larger group is the common class
            values = -values
        return Inference(np.concatenate([r for r, _ in pairs]), values)

    @staticmethod
    def _clusters(pairs: list[tuple[np.ndarray, np.ndarray]], n_classes: int, seed: int) -> Inference:
        rows = np.concatenate([r for r, _ in pairs])
        g = np.concatenate([g for _, g in pairs])
        unit = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
        labels = KMeans(n_clusters=n_classes, n_init=10, random_state=seed).fit_predict(unit)
        return Inference(rows, labels.astype(np.float64), note=f"{n_classes} direction clusters (k-means)")


@register_attack
class ModelCompletion(Attack):
    """A passive party completes its bottom model with a head trained on a few labelled rows (Fu et al. 2022).

    "Label Inference Attacks Against Vertical Federated Learning" (Fu, Zhang, Ji, Wang, Yang, Wang;
    USENIX Security 2022), passive model completion: after training, the passive party's bottom model
    has learnt features useful for the task; with ``KNOWN_LABELS`` rows whose labels it knows (granted
    by the threat model) it fits a logistic-regression head on its bottom's outputs and labels all its
    other training rows. Metric: accuracy on those rows, against the majority share; the own-data
    baseline is the same head on its raw features (what it would learn without the federation).
    """

    name = "model-completion"
    summary = "passive party fits a head on its own bottom model's outputs with 40 known labels (Fu et al. 2022)"
    paper = "Fu et al., Label Inference Attacks Against Vertical Federated Learning, USENIX Security 2022"
    metric = "accuracy"

    def parties(self, scenario: Scenario) -> tuple[str, str]:
        return scenario.passives[0], "labels"

    def auxiliary(self, scenario: Scenario, attacker: str, target: str) -> dict[str, np.ndarray]:
        y = np.asarray(scenario.party_data(scenario.active).y_train)
        rows = np.sort(simulation_rng(0, "model-completion", attacker).choice(len(y), min(KNOWN_LABELS, len(y) - 1),
                                                                              replace=False))
        return {"rows": rows, "labels": y[rows]}

    def infer(self, view: AttackerView) -> Inference | str | None:
        outputs = [o.value for o in view.tap.observations if o.tag == OWN_OUTPUTS and o.value is not None]
        if not outputs:
            return None
        known = view.auxiliary["rows"]
        if len(np.unique(view.auxiliary["labels"])) < 2:
            return "the known rows hold a single class"
        rest = np.setdiff1d(np.arange(len(outputs[-1])), known)
        head = _head().fit(outputs[-1][known], view.auxiliary["labels"])
        return Inference(rest, head.predict(outputs[-1][rest]).astype(np.float64),
                         note=f"{len(known)} known labels, logistic-regression head")

    def score(self, inference: Inference, scenario: Scenario, view: AttackerView) -> tuple[float, float]:
        y = np.asarray(scenario.party_data(scenario.active).y_train)[inference.rows]
        return float((inference.values.astype(np.int64) == y).mean()), float(np.bincount(y).max() / len(y))

    def own_data(self, inference: Inference, scenario: Scenario, view: AttackerView) -> float | None:
        X = view.data.X_train
        head = _head().fit(X[view.auxiliary["rows"]], view.auxiliary["labels"])
        y = np.asarray(scenario.party_data(scenario.active).y_train)[inference.rows]
        return float((head.predict(X[inference.rows]) == y).mean())


def _head() -> Any:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
