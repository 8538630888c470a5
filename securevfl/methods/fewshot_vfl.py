"""One-shot and few-shot VFL (Sun et al., ICCV 2023): the baseline of Entity Augmentation's Table 1.

Sun, Xu, Yang, Nath, Li, Zhao, Xu, Chen, Roth, "Communication-Efficient Vertical Federated Learning
with Limited Overlapping Samples", ICCV 2023, pp. 5203-5212. The paper's server is our active party
(label holder, no features): it knows the labels ``Y_o`` of the overlapping rows only; each of the
paper's clients is a passive party, which holds its columns of the overlapping rows ``X_o^k`` and of
its own unaligned rows ``X_u^k``.

**One-shot VFL** (two uploads and one download per passive party):

1. each passive party sends ``H_o^k = f_k(X_o^k)`` from its randomly initialised extractor ``f_k``;
2. the active party concatenates them, computes the loss of its classifier ``f_c`` against ``Y_o``
   and returns each passive party its partial gradient ``dL/dH_o^k`` and the class count ``C``;
3. the passive party clusters its gradients with k-means into ``C`` clusters: the cluster indices
   are temporary labels of its overlapping rows (gradients of one class point the same way);
4. the passive party trains ``f_k`` with a local head semi-supervised (FixMatch): cross-entropy on
   ``(X_o^k, cluster labels)`` plus ``lambda_u`` times the consistency loss on ``X_u^k``
   (pseudo-label of a weak augmentation, kept above a confidence ``threshold``, as the target of a
   strong augmentation);
5. the passive party sends ``H_o^k' = f_k(X_o^k)``; the active party trains ``f_c`` on them with
   ``Y_o``.

**Few-shot VFL** (one more round): with the step-5 upload each passive party also sends ``H_u^k`` of
its unaligned rows. For each such row the active party estimates the other passives' missing
representations with ``T(H_u^k, H_o^k, H_o^j) = softmax(H_u^k H_o^k^T / sqrt(d)) H_o^j`` (an
attention over the overlapping rows), predicts the class with ``f_c`` on the completed row and with
an auxiliary classifier ``f_c^k`` trained on ``H_o^k`` alone, and keeps the rows where both agree
with confidence >= ``select_threshold``. It sends each passive party the positions and predicted
classes of its kept rows; the passive party trains ``f_k`` again with them as extra labelled rows (a
second head in the active party's class space; the cluster head keeps the overlapping rows) and
sends ``H_o^k''`` and the kept rows' representations; the active party retrains ``f_c`` on the
overlapping rows (true labels) plus the kept rows (completed by ``T``, pseudo-labels).

Where Sun et al. leave a choice open here, ours is stated (docs/entity_aug.md, "Few-shot VFL"):
augmentations (tabular: the paper's mask-to-mean weak and mask + Gaussian noise strong; image
strips: a random shift weak and shift + cutout + noise strong, in place of RandAugment), the
attention form of ``T``, and fresh classifier weights for the final training.

What each party learns: the active party, every passive party's representations of its overlapping,
unaligned and test rows; each passive party, the active party's per-row gradients on its overlapping
rows — which k-means turns into the overlapping rows' label classes up to a renaming (that is the
method's design) — and, in few-shot VFL, the active party's predicted classes of its kept unaligned
rows.

**Saved model and scoring** (``--model-dir``, ``securevfl predict``): each passive party keeps its
extractor ``f_k`` as trained at the end (its local heads serve training only); the active party
keeps the final classifier ``f_c`` (in few-shot VFL the one retrained on overlap + pseudo-labelled
rows) and the width of each passive party's representation. Scoring runs the training's test
evaluation on the new rows (after the same PSI as training): each passive party sends the active
party ``f_k`` of its rows of each batch; the active party concatenates them in the passives'
training order and applies ``f_c``. What each party learns at scoring: the active party, every
passive party's representations of the scored rows (and the predictions); each passive party,
nothing beyond what PSI tells it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, DataError, ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    Role,
    TrainConfig,
    as_tensor,
    batch_plan,
    predict_scores,
    register_method,
)
from securevfl.methods.engine import checked_tensor
from securevfl.methods.engine.kept import Keep, KeptRole, ScoringSide, kept_side
from securevfl.methods.engine.local_fit import StepLoss, fit_local
from securevfl.methods.engine.loop import Evaluation, SavedSide
from securevfl.methods.engine.objective import Objective
from securevfl.methods.engine.split import side_role
from securevfl.networks import MLP, StripCNN, init_parameters, mlp_bottom
from securevfl.seeding import label_number, party_generator, simulation_rng, torch_generator
from securevfl.settings import setting

ONE_SHOT, FEW_SHOT = "one-shot", "few-shot"
VARIANTS = (ONE_SHOT, FEW_SHOT)
OVERLAP = "fewshot.overlap_representations"
GRADIENTS = "fewshot.partial_gradients"
AFTER_SSL = "fewshot.representations_after_ssl"
PSEUDO = "fewshot.pseudo_labels"
FINAL = "fewshot.final_representations"
TEST = "fewshot.test_representations"
SCORE = "fewshot.score.representations"
#: The active's saved model state: each passive party's representation width (the classifier's input, in order).
WIDTHS = "input_widths"


@dataclass(frozen=True)
class FewShotOptions:
    """Options of ``fewshot-vfl``.

    ``variant``: ``few-shot`` (3 uploads, 2 downloads per passive party) or ``one-shot`` (2 uploads, 1
    download). ``local_epochs``: epochs of each local semi-supervised training (0: the run's
    ``--epochs``); an epoch is one pass over the passive party's unlabelled rows in batches of
    ``mu * batch_size`` (or over its labelled rows, if longer). ``active_epochs``: epochs of the
    active party's classifier training (formerly ``server_epochs``). ``mu``, ``lambda_u``,
    ``threshold``: FixMatch's unlabelled batch ratio, loss weight and confidence threshold (its
    defaults 7, 1, 0.95). ``select_threshold``: the confidence both classifiers of the active party
    need for a pseudo-label. ``mask_prob`` / ``noise_std``: the tabular augmentations; ``shift``:
    the image weak augmentation's translation in pixels.
    """

    variant: str = setting(
        FEW_SHOT, help="few-shot (3 uploads, 2 downloads per passive party) | one-shot (2 uploads, 1 download).")
    local_epochs: int = setting(0, help="Epochs of each passive party's local semi-supervised training (0: --epochs).")
    active_epochs: int = setting(50, help="Epochs of the active party's classifier training, >= 1.")
    mu: int = setting(7, help="FixMatch's unlabelled batch size, in multiples of --batch-size, >= 1.")
    lambda_u: float = setting(1.0, help="FixMatch's weight of the unlabelled consistency loss, >= 0.")
    threshold: float = setting(0.95, help="FixMatch's confidence a pseudo-label needs, in (0, 1].")
    select_threshold: float = setting(
        0.9, help="Confidence both active classifiers need to pseudo-label an unaligned row, in (0, 1].")
    mask_prob: float = setting(
        0.2, help="Tabular augmentation: probability a value is replaced by its column mean, in [0, 1).")
    noise_std: float = setting(0.1, help="Strong augmentation: standard deviation of the added Gaussian noise, >= 0.")
    shift: int = setting(2, help="Image strips' weak augmentation: largest random translation, in pixels.")
    kmeans_init: int = setting(10, help="k-means restarts when clustering the gradients into temporary labels, >= 1.")

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        if self.local_epochs < 0 or self.active_epochs < 1 or self.mu < 1 or self.kmeans_init < 1:
            raise ConfigError("local_epochs >= 0 (0: the run's epochs), active_epochs, mu and kmeans_init >= 1")
        if self.lambda_u < 0 or not 0 < self.threshold <= 1 or not 0 < self.select_threshold <= 1:
            raise ConfigError("lambda_u >= 0; threshold and select_threshold in (0, 1]")
        if not 0 <= self.mask_prob < 1 or self.noise_std < 0 or self.shift < 0:
            raise ConfigError("mask_prob in [0, 1), noise_std >= 0, shift >= 0")


# -- pure pieces ---------------------------------------------------------------------------------

def cluster_gradients(gradients: np.ndarray, n_clusters: int, *, seed: int, n_init: int = 10) -> np.ndarray:
    """Step 3: k-means cluster index of every row's partial gradient (the temporary labels)."""
    from sklearn.cluster import KMeans

    if len(gradients) < n_clusters:
        raise DataError(f"{len(gradients)} overlapping rows cannot form {n_clusters} clusters")
    km = KMeans(n_clusters=n_clusters, n_init=n_init, random_state=seed)
    return km.fit_predict(np.asarray(gradients, dtype=np.float64)).astype(np.int64)


def estimate_missing(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``T``: another passive party's representation of unaligned rows, attention over the overlapping rows.

    ``softmax(query keys^T / sqrt(d)) values``: ``query`` are a passive party's representations of its
    unaligned rows, ``keys`` its representations of the overlapping rows, ``values`` the other
    passive party's representations of the same overlapping rows.
    """
    if len(keys) != len(values):
        raise ConfigError(f"keys and values must cover the same overlapping rows ({len(keys)} vs {len(values)})")
    weights = torch.softmax(query @ keys.T / math.sqrt(keys.shape[1]), dim=1)
    return weights @ values


def select_pseudo_labels(joint: np.ndarray, auxiliary: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows where both classifiers' class probabilities agree on the arg-max, each >= ``threshold``.

    Returns the kept row positions and their classes.
    """
    a, b = joint.argmax(axis=1), auxiliary.argmax(axis=1)
    keep = (a == b) & (joint.max(axis=1) >= threshold) & (auxiliary.max(axis=1) >= threshold)
    rows = np.flatnonzero(keep)
    return rows, a[rows].astype(np.int64)


def fixmatch_loss(weak_logits: torch.Tensor, strong_logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """FixMatch's unlabelled loss: CE of the strong view against the confident weak-view arg-max."""
    probs = torch.softmax(weak_logits.detach(), dim=1)
    confidence, target = probs.max(dim=1)
    mask = (confidence >= threshold).float()
    return (F.cross_entropy(strong_logits, target, reduction="none") * mask).mean()


@dataclass(frozen=True)
class Augmenter:
    """The weak and strong augmentations of one passive party's rows (image strips or tabular columns)."""

    strip_shape: tuple[int, int] | None
    means: torch.Tensor
    mask_prob: float
    noise_std: float
    shift: int

    def weak(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if self.strip_shape is None:  # Sun et al.: alpha(x) = m * x + (1 - m) * column mean
            keep = torch.rand(x.shape, generator=gen).to(x.device) >= self.mask_prob
            return torch.where(keep, x, self.means.expand_as(x))
        return self._shifted(x, gen)

    def strong(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        out = self.weak(x, gen)
        if self.strip_shape is not None:
            out = self._cutout(out, gen)
        return out + self.noise_std * torch.randn(out.shape, generator=gen).to(x.device)

    def _shifted(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        assert self.strip_shape is not None
        h, w = self.strip_shape
        s = self.shift
        if s == 0:
            return x
        img = F.pad(x.reshape(-1, 1, h, w), (s, s, s, s))
        dy, dx = (int(v) for v in torch.randint(0, 2 * s + 1, (2,), generator=gen))
        return img[:, :, dy : dy + h, dx : dx + w].reshape(len(x), -1)

    def _cutout(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        assert self.strip_shape is not None
        h, w = self.strip_shape
        size_h, size_w = max(1, h // 3), max(1, w // 3)
        y0 = int(torch.randint(0, h - size_h + 1, (1,), generator=gen))
        x0 = int(torch.randint(0, w - size_w + 1, (1,), generator=gen))
        img = x.reshape(-1, h, w).clone()
        img[:, y0 : y0 + size_h, x0 : x0 + size_w] = 0.0
        return img.reshape(len(x), -1)


# -- training loops ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClassifierSettings:
    """How the active party trains a classifier on representations."""

    epochs: int
    batch_size: int
    lr: float
    seed: int


def train_classifier(model: nn.Module, features: torch.Tensor, labels: torch.Tensor, settings: ClassifierSettings,
                     purpose: str) -> float:
    """Supervised training of an active party's classifier on representations; returns the last epoch's mean loss."""
    salt = 1000 * (label_number(purpose) & 0xFFFF)  # a batch order per classifier, agreed by nobody else

    def batches(epoch: int) -> Iterator[np.ndarray]:
        return batch_plan(len(features), settings.batch_size, settings.seed, salt + epoch)

    def step(batch: np.ndarray) -> StepLoss:
        idx = torch.as_tensor(batch, device=features.device)
        return StepLoss(F.cross_entropy(model(features[idx]), labels[idx]), weight=len(batch))

    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    return fit_local([model], opt, settings.epochs, batches, step).last(default=0.0)


@dataclass
class LabelledRows:
    """A passive party's labelled rows for one local training: inputs, targets, and which head each uses."""

    X: torch.Tensor
    y: torch.Tensor
    head: torch.Tensor  # 0: the cluster head (temporary labels), 1: the class head (active's pseudo-labels)


def local_ssl(extractor: nn.Module, heads: nn.ModuleList, labelled: LabelledRows, X_u: torch.Tensor,
              augment: Augmenter, options: FewShotOptions, *, epochs: int, batch_size: int, lr: float,
              gen: torch.Generator, rng: np.random.Generator) -> dict[str, float]:
    """Step 4: FixMatch on the passive party — supervised CE on ``labelled`` plus the consistency loss on ``X_u``.

    The consistency loss uses the cluster head (head 0). Returns the last epoch's mean losses.
    """
    params = list(extractor.parameters()) + list(heads.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    n_l, n_u = len(labelled.X), len(X_u)
    u_batch = options.mu * batch_size
    steps = max(math.ceil(n_u / u_batch) if n_u else 0, math.ceil(n_l / batch_size))
    unlabelled = bool(n_u) and options.lambda_u > 0

    def steps_of(epoch: int) -> range:  # the epoch's row orders: labelled, then unlabelled, drawn up front
        orders["l"] = np.concatenate([rng.permutation(n_l) for _ in range(math.ceil(steps * batch_size / n_l) + 1)])
        orders["u"] = (np.concatenate([rng.permutation(n_u) for _ in range(math.ceil(steps * u_batch / n_u) + 1)])
                       if n_u else np.empty(0, dtype=np.int64))
        return range(steps)

    def step(at: int) -> StepLoss:
        li = torch.as_tensor(orders["l"][at * batch_size : (at + 1) * batch_size], device=labelled.X.device)
        xs = augment.weak(labelled.X[li], gen)
        z = extractor(xs)
        logits = torch.stack([heads[0](z), heads[1](z)], dim=1)[torch.arange(len(li)), labelled.head[li]]
        loss = F.cross_entropy(logits, labelled.y[li])
        report = {"supervised": loss.item(), "unlabelled": 0.0, "mask_rate": 0.0}
        if unlabelled:
            ui = torch.as_tensor(orders["u"][at * u_batch : (at + 1) * u_batch], device=X_u.device)
            xu = X_u[ui]
            weak_logits = heads[0](extractor(augment.weak(xu, gen)))
            strong_logits = heads[0](extractor(augment.strong(xu, gen)))
            unl = fixmatch_loss(weak_logits, strong_logits, options.threshold)
            conf = torch.softmax(weak_logits.detach(), dim=1).max(dim=1).values
            report["mask_rate"] = float((conf >= options.threshold).float().mean())
            report["unlabelled"] = unl.item()
            loss = loss + options.lambda_u * unl
        return StepLoss(loss, report=report)

    orders: dict[str, np.ndarray] = {}
    fit = fit_local([extractor, heads], opt, epochs, steps_of, step)
    return {k: fit.last(k, 0.0) for k in ("supervised", "unlabelled", "mask_rate")}


def _extractor(data: PartyData, config: TrainConfig, name: str) -> nn.Module:
    """A passive party's feature extractor ``f_k``: a strip CNN for image strips, else an MLP, to ``embedding_dim``."""
    if data.strip_shape is not None:
        model: nn.Module = StripCNN(data.strip_shape, config.embedding_dim)
    else:
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim)
    return init_parameters(model, party_generator(config.seed, f"{name}.extractor"))


def _classifier_net(width: int, config: TrainConfig, n_classes: int) -> nn.Module:
    """A active party's classifier (``f_c``, or an auxiliary ``f_c^k``) of ``width`` inputs, before initialisation."""
    return MLP(width, config.hidden, n_classes)


@torch.no_grad()
def _represent(model: nn.Module, X: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    model.eval()
    out = [model(X[i : i + batch]) for i in range(0, len(X), batch)] or [model(X[:0])]
    return torch.cat(out).cpu()


# -- roles ---------------------------------------------------------------------------------------

def passive_role(data: PartyData, config: TrainConfig, options: FewShotOptions) -> KeptRole:
    """A passive party: representations, k-means on gradients, local FixMatch; keeps its extractor."""

    def role(ctx: PartyContext, keep: Keep) -> dict[str, Any]:
        device, active = ctx.device, ctx.active
        epochs = options.local_epochs or config.epochs
        X_o, X_u = as_tensor(data.X_train, device), as_tensor(data.X_unaligned, device)
        extractor = _extractor(data, config, ctx.name).to(device)
        ctx.stage = "send overlap representations"
        ctx.send(active, OVERLAP, _represent(extractor, X_o))
        ctx.stage = "cluster partial gradients"
        message = ctx.recv(active, GRADIENTS)
        if not (isinstance(message, tuple) and len(message) == 2):
            raise ProtocolError(f"{active} sent a malformed gradient message")
        grads, n_classes = checked_tensor(message[0], active, len(X_o), "gradient"), int(message[1])
        with ctx.meter.compute():
            clusters = cluster_gradients(grads.numpy(), n_classes, seed=config.seed, n_init=options.kmeans_init)
        heads = nn.ModuleList([nn.Linear(config.embedding_dim, n_classes) for _ in range(2)])
        init_parameters(heads, party_generator(config.seed, f"{ctx.name}.heads"))
        heads.to(device)
        gen = torch_generator(config.seed, ctx.name, "fewshot.augment")  # on the CPU; draws move to the device
        rng = simulation_rng(config.seed, ctx.name, "fewshot.batches")
        means = X_u.mean(dim=0) if len(X_u) else X_o.mean(dim=0)
        augment = Augmenter(data.strip_shape, means, options.mask_prob, options.noise_std, options.shift)
        labelled = LabelledRows(X_o, torch.as_tensor(clusters, device=device),
                                torch.zeros(len(X_o), dtype=torch.long, device=device))
        ctx.stage = "local semi-supervised training"
        with ctx.meter.compute():
            first = local_ssl(extractor, heads, labelled, X_u, augment, options, epochs=epochs,
                              batch_size=config.batch_size, lr=config.lr, gen=gen, rng=rng)
        rounds = 1 if options.variant == ONE_SHOT else 2  # local trainings (passives), classifier trainings (active)
        ctx.progress(epoch=1, epochs=rounds, loss=first["supervised"])
        ctx.stage = "send representations"
        if options.variant == ONE_SHOT:
            ctx.send(active, AFTER_SSL, _represent(extractor, X_o))
            second: dict[str, float] = {}
            kept = 0
        else:
            ctx.send(active, AFTER_SSL, (_represent(extractor, X_o), _represent(extractor, X_u)))
            ctx.stage = "receive pseudo-labels"
            rows, classes = _pseudo_message(ctx.recv(active, PSEUDO), active, len(X_u), n_classes)
            kept = len(rows)
            rest = np.setdiff1d(np.arange(len(X_u)), rows)
            labelled = LabelledRows(
                torch.cat([X_o, X_u[torch.as_tensor(rows, device=device)]]),
                torch.cat([labelled.y, torch.as_tensor(classes, device=device)]),
                torch.cat([labelled.head, torch.ones(kept, dtype=torch.long, device=device)]))
            ctx.stage = "local semi-supervised training with pseudo-labels"
            with ctx.meter.compute():
                second = local_ssl(extractor, heads, labelled, X_u[torch.as_tensor(rest, device=device)], augment,
                                   options, epochs=epochs, batch_size=config.batch_size, lr=config.lr, gen=gen,
                                   rng=rng)
            ctx.progress(epoch=2, epochs=rounds, loss=second["supervised"])
            ctx.send(active, FINAL, (_represent(extractor, X_o),
                                     _represent(extractor, X_u[torch.as_tensor(rows, device=device)])))
        ctx.stage = "send test representations"
        ctx.send(active, TEST, _represent(extractor, as_tensor(data.X_test, device)))
        keep(kept_side({"extractor": extractor}))  # the local heads serve training only
        return {"overlap_rows": len(X_o), "unaligned_rows": len(X_u), "pseudo_labelled_rows": kept,
                "ssl_first": first, "ssl_second": second, "cluster_labels": clusters}

    return KeptRole(role)


def _pseudo_message(message: Any, sender: str, n_rows: int, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    if not (isinstance(message, tuple) and len(message) == 2):
        raise ProtocolError(f"{sender} sent a malformed pseudo-label message")
    rows, classes = (np.asarray(m, dtype=np.int64).reshape(-1) for m in message)
    if len(rows) != len(classes) or len(np.unique(rows)) != len(rows) or (len(rows) and (
            rows.min() < 0 or rows.max() >= n_rows or classes.min() < 0 or classes.max() >= n_classes)):
        raise ProtocolError(f"{sender} sent pseudo-labels outside this passive party's {n_rows} rows or "
                            f"{n_classes} classes")
    return rows, classes


def active_role(data: PartyData, passives: tuple[str, ...], config: TrainConfig,
                options: FewShotOptions) -> KeptRole:
    """The active party: partial gradients, classifier training, few-shot pseudo-labels; keeps ``f_c``."""

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        assert data.y_train is not None and data.y_test is not None  # the active party holds the labels
        device, n_classes = ctx.device, data.n_classes
        y_o = torch.as_tensor(data.y_train, dtype=torch.long, device=device)
        n_o = len(y_o)
        ctx.stage = "receive overlap representations"
        H = {k: checked_tensor(ctx.recv(k, OVERLAP), k, n_o).to(device) for k in passives}
        widths = {k: h.shape[1] for k, h in H.items()}

        def classifier(width: int, purpose: str) -> nn.Module:
            model = _classifier_net(width, config, n_classes)
            return init_parameters(model, party_generator(config.seed, f"{ctx.name}.{purpose}")).to(device)

        top = classifier(sum(widths.values()), "classifier")
        ctx.stage = "partial gradients"
        with ctx.meter.compute():
            parts = [H[k].clone().requires_grad_(True) for k in passives]
            top.eval()
            F.cross_entropy(top(torch.cat(parts, dim=1)), y_o, reduction="sum").backward()
        for k, part in zip(passives, parts, strict=True):
            assert part.grad is not None
            ctx.send(k, GRADIENTS, (part.grad.detach().cpu(), n_classes))
        ctx.stage = "receive representations"
        unaligned: dict[str, torch.Tensor] = {}
        for k in passives:
            message = ctx.recv(k, AFTER_SSL)
            if options.variant == FEW_SHOT:
                if not (isinstance(message, tuple) and len(message) == 2):
                    raise ProtocolError(f"{k} sent a malformed representation message")
                message, h_u = message
                unaligned[k] = checked_tensor(h_u, k, len(h_u), "unaligned representation").to(device)
            H[k] = checked_tensor(message, k, n_o).to(device)
        settings = ClassifierSettings(options.active_epochs, config.batch_size, config.lr, config.seed)
        ctx.stage = "train classifier"
        with ctx.meter.compute():
            loss = train_classifier(top, torch.cat([H[k] for k in passives], dim=1), y_o, settings, "one-shot")
        rounds = 1 if options.variant == ONE_SHOT else 2
        ctx.progress(epoch=1, epochs=rounds, loss=loss)
        history = [{"stage": 1.0, "classifier_loss": loss}]
        extra: dict[str, Any] = {"variant": options.variant, "overlap_rows": n_o}
        if options.variant == FEW_SHOT:
            top, loss, kept = _few_shot_round(ctx, passives, H, unaligned, top, classifier, y_o, options, settings)
            history.append({"stage": 2.0, "classifier_loss": loss})
            ctx.progress(epoch=2, epochs=rounds, loss=loss)
            extra["pseudo_labels"] = kept
        ctx.stage = "evaluate"
        test = [checked_tensor(ctx.recv(k, TEST), k, len(data.y_test)).to(device) for k in passives]
        with torch.no_grad():
            top.eval()
            scores = predict_scores(top(torch.cat(test, dim=1)))
        extra["communication"] = {"uploads_per_passive": 2 if options.variant == ONE_SHOT else 3,
                                  "downloads_per_passive": 1 if options.variant == ONE_SHOT else 2,
                                  "plus": "one upload of test representations for evaluation"}
        keep(kept_side({"classifier": top}, Objective(),
                       {WIDTHS: {k: int(t.shape[1]) for k, t in zip(passives, test, strict=True)}}))
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history, extra={"fewshot_vfl": extra})

    return KeptRole(role)


def _few_shot_round(ctx: PartyContext, passives: tuple[str, ...], H: dict[str, torch.Tensor],
                    unaligned: dict[str, torch.Tensor], top: nn.Module, classifier: Any, y_o: torch.Tensor,
                    options: FewShotOptions, settings: ClassifierSettings) -> tuple[nn.Module, float, dict[str, Any]]:
    """Pseudo-label every passive party's unaligned rows, send them, retrain on overlap + kept rows."""
    ctx.stage = "pseudo-label unaligned rows"
    kept: dict[str, Any] = {}
    with ctx.meter.compute():
        auxiliary = {}
        for k in passives:
            auxiliary[k] = classifier(H[k].shape[1], f"auxiliary.{k}")
            train_classifier(auxiliary[k], H[k], y_o, settings, f"auxiliary.{k}")
        selections = {}
        top.eval()
        with torch.no_grad():
            for k in passives:
                h_u = unaligned[k]
                completed = torch.cat([h_u if j == k else estimate_missing(h_u, H[k], H[j]) for j in passives], dim=1)
                auxiliary[k].eval()
                selections[k] = select_pseudo_labels(predict_scores(top(completed)),
                                                     predict_scores(auxiliary[k](h_u)), options.select_threshold)
    for k in passives:
        rows, classes = selections[k]
        ctx.send(k, PSEUDO, (rows, classes))
        kept[k] = {"rows": int(len(rows)), "of": int(len(unaligned[k]))}
    ctx.stage = "receive final representations"
    features, labels = [], [y_o]
    finals = {}
    for k in passives:
        message = ctx.recv(k, FINAL)
        if not (isinstance(message, tuple) and len(message) == 2):
            raise ProtocolError(f"{k} sent a malformed representation message")
        finals[k] = (checked_tensor(message[0], k, len(y_o)).to(ctx.device),
                     checked_tensor(message[1], k, kept[k]["rows"], "kept-row representation").to(ctx.device))
    features.append(torch.cat([finals[k][0] for k in passives], dim=1))
    for k in passives:
        h_s = finals[k][1]
        if len(h_s):
            features.append(torch.cat([h_s if j == k else estimate_missing(h_s, finals[k][0], finals[j][0])
                                       for j in passives], dim=1))
            labels.append(torch.as_tensor(selections[k][1], device=ctx.device))
    ctx.stage = "train classifier on overlap + pseudo-labelled rows"
    fresh = classifier(features[0].shape[1], "classifier.few-shot")
    with ctx.meter.compute():
        loss = train_classifier(fresh, torch.cat(features), torch.cat(labels), settings, "few-shot")
    return fresh, loss, kept


# -- scoring with a saved model ----------------------------------------------------------------------

class PassiveScoring(ScoringSide):
    """A passive party scoring new rows: its saved extractor's representations of each batch, to the active party."""

    def build(self, ctx: PartyContext) -> None:
        self.state.modules["extractor"] = _extractor(self.data, self.config, ctx.name).to(ctx.device)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        with ctx.meter.compute():
            representations = _represent(self.state.modules["extractor"], as_tensor(X, ctx.device))
        ctx.send(ctx.active, SCORE, representations)


class ActiveScoring(ScoringSide):
    """The active scoring new rows: the passives' representations, concatenated in training's order, through ``f_c``."""

    def build(self, ctx: PartyContext) -> None:
        """Nothing yet: the classifier's input width is in the saved model state (:meth:`load_saved`)."""

    def load_saved(self, saved: SavedSide) -> None:
        self.widths = _saved_widths(saved.state, self.passives, self.name)
        net = _classifier_net(sum(self.widths.values()), self.config, self.data.n_classes)
        self.state.modules["classifier"] = net.to(self.device)
        super().load_saved(saved)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        parts = []
        for k in self.passives:
            h = checked_tensor(ctx.recv(k, SCORE), k, len(X), "representation")
            if h.shape[1] != self.widths[k]:
                raise ProtocolError(f"{k} sent representations of width {h.shape[1]}; the saved classifier "
                                    f"takes {self.widths[k]} from {k}")
            parts.append(h.to(ctx.device))
        classifier = self.state.modules["classifier"]
        with ctx.meter.compute(), torch.no_grad():
            classifier.eval()
            return Evaluation(predict_scores(classifier(torch.cat(parts, dim=1))))


def _saved_widths(state: dict[str, Any], passives: tuple[str, ...], name: str) -> dict[str, int]:
    """Each passive party's representation width from the active party's saved state; else a ModelError."""
    widths = state.get(WIDTHS)
    if not isinstance(widths, dict) or sorted(widths) != sorted(passives) or not all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths.values()):
        raise ModelError(f"{name}'s saved fewshot-vfl state does not give a representation width for each "
                         f"passive party ({', '.join(passives)})")
    return {k: widths[k] for k in passives}


@register_method
class FewShotVFL(Method[FewShotOptions]):
    """One-shot / few-shot VFL: k-means on partial gradients, local FixMatch, the active party's pseudo-labels."""

    name = "fewshot-vfl"
    summary = "one-/few-shot VFL (Sun et al. 2023): gradient k-means + local FixMatch, 2-3 uploads per passive party"
    saves_outside_engine = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = self.require_passives(scenario)
        active = scenario.party_data(scenario.active)
        if active.y_train is None:
            raise DataError(f"the active party {scenario.active!r} must hold the labels")
        if active.n_features:
            raise ConfigError("fewshot-vfl's active party holds labels only: use --active-features 0 "
                              "(or --partition entity-aug)")
        if scenario.n_classes < 2:
            raise ConfigError("fewshot-vfl needs a classification task (k-means into one cluster per class)")
        roles: dict[str, Role] = {k: passive_role(scenario.party_data(k), self.config, self.options) for k in passives}
        roles[scenario.active] = active_role(active, passives, self.config, self.options)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        """Scoring sides: each passive party's saved extractor, the active party's saved classifier."""
        passives = self.require_passives(scenario)
        roles = {k: side_role(PassiveScoring(self, scenario.party_data(k))) for k in passives}
        roles[scenario.active] = side_role(ActiveScoring(self, scenario.party_data(scenario.active), passives))
        return roles


__all__ = ["FewShotOptions", "FewShotVFL", "cluster_gradients", "estimate_missing", "fixmatch_loss",
           "select_pseudo_labels"]
