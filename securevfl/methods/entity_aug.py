"""Entity Augmentation: split learning without entity alignment, on interpolated labels.

Amalanshu et al., "Entity Augmentation for Efficient Classification of Vertically Partitioned
Data with Limited Overlap" (2024), Algorithm 1. Every guest (passive party) sends, per step, the
activations of a batch of *its own* labelled entities together with their entity keys; the host
(active party, the label holder) reads the newest activation of each guest from a per-guest queue,
concatenates them, and trains the top model on the *interpolated* label
``y = sum_i w_i y_{j_i} / sum_i w_i`` with ``w_i`` the activation dimension of guest ``i`` (a
CutMix across parties), using the paper's binary cross-entropy with a sigmoid on each class logit
against the interpolated label (Sec. 5.5; ``loss="ce"``: softmax cross-entropy with soft targets
instead). Gradients go back to the guests
that sent this step. A guest that misses a step has its last activation (and its entity keys)
reused from its queue — the paper's fault tolerance; ``drop_prob`` simulates such misses.

Which entities a guest may send: only those the host has labels for. By default
(``resolution="psi"``) the host and each guest run a pairwise ECDH PSI (``psi`` package) through
the runtime's channel before training; a guest then sends, per row, its position in that pair's
intersection order, from which the host reads the label. ``resolution="ids"`` is the plaintext
stand-in: each guest sends its whole ID list and the host answers which positions it labels.

What the host learns: for every activation row, which labelled entity it belongs to (the pair
index, equivalent to the ID since the host knows its intersection with each guest), so it learns
which of its labelled entities each guest holds and in which batches it used them; with
``resolution="psi"`` it learns nothing about a guest's unlabelled rows beyond their count. The
guests learn the gradients of the loss on their activations, as in SplitNN, and which of their
rows the host labels (the PSI output).

Aligned rows (the global intersection, in the agreed order) keep their pairing by default: their
slots in every epoch are agreed from the run seed, so all guests send the same entity there and
the interpolated label is that entity's own label; the guests' other labelled rows fill the other
slots in each guest's own order. With ``misalign=True`` every guest shuffles all its labelled rows
independently (the paper's "misaligned" setup). With one guest, full alignment, ``arch="splitnn"``
and no drops, the method performs exactly SplitNN's computation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securevfl.data.datasets import Dataset
from securevfl.data.partition import PartitionSpec, register_preset
from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, DataError, ModelError, ProtocolError, psi_errors
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, Role, TrainConfig, as_tensor, register_method
from securevfl.methods.engine import (
    TRAIN,
    EngineRecord,
    Evaluation,
    PartySide,
    SplitActive,
    SplitMethod,
    SplitPassive,
    checked_tensor,
    side_role,
)
from securevfl.methods.engine.defenses import randomized_response
from securevfl.methods.engine.loop import EMBEDDING_ROWS, GRADIENT_ROWS, Losses, SavedSide
from securevfl.models import MLP, StripCNN, init_parameters, mlp_bottom
from securevfl.seeding import party_generator, simulation_rng

ACTIVATION = "activation"
GRADIENT = "gradient"
PSI_MESSAGE = "entity-aug.setup.psi"
ID_LIST = "ids"
LABELLED = "labelled"
PLAN = "plan"

ARCHS = ("splitnn", "credit-card", "parkinsons", "handwritten")
BOTTOMS = ("auto", "mlp", "cnn")
RESOLUTIONS = ("psi", "ids")
EPOCH_SIZES = ("max", "min")
LOSSES = ("bce", "ce")


@dataclass(frozen=True)
class EntityAugOptions:
    """Options of ``entity-aug``.

    ``drop_prob``: probability that a guest misses a step (simulated, seeded; its last activation
    is reused). ``misalign``: shuffle every guest's entities independently, aligned rows included.
    ``use_unaligned``: also train on each guest's labelled rows outside the global intersection.
    ``epoch_size``: steps per epoch cover the largest (``max``, smaller guests reuse rows) or the
    smallest (``min``) guest's labelled set. ``resolution``: ``psi`` (pairwise ECDH PSI) or ``ids``
    (plaintext ID lists). ``arch``: ``splitnn`` (bottom/top as SplitNN, from ``embedding_dim`` and
    ``hidden``), or the paper's Sec. 5.2 ``credit-card`` / ``parkinsons`` / ``handwritten`` shapes. ``bottom``:
    ``auto`` (a CNN for image strips, else an MLP), ``mlp`` or ``cnn`` (for ``arch=splitnn``).
    ``loss``: ``bce`` (the paper's: binary cross-entropy with a sigmoid on every class logit against
    the interpolated label, Sec. 5.5) or ``ce`` (softmax cross-entropy with soft targets).
    """

    drop_prob: float = 0.0
    misalign: bool = False
    use_unaligned: bool = True
    epoch_size: str = "max"
    resolution: str = "psi"
    arch: str = "splitnn"
    bottom: str = "auto"
    loss: str = "bce"

    def __post_init__(self) -> None:
        if self.drop_prob == -1.0:  # the CLI's "not given"
            object.__setattr__(self, "drop_prob", 0.0)
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError(f"drop_prob must be in [0, 1), got {self.drop_prob}")
        for name, value, allowed in (("epoch_size", self.epoch_size, EPOCH_SIZES),
                                     ("resolution", self.resolution, RESOLUTIONS),
                                     ("arch", self.arch, ARCHS), ("bottom", self.bottom, BOTTOMS),
                                     ("loss", self.loss, LOSSES)):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@register_preset("entity-aug", "label-only host (active party, no features); the features are split "
                 "evenly among the guests (image strips for image datasets), as in the paper")
def label_only_host(dataset: Dataset, spec: PartitionSpec) -> PartitionSpec:
    """Partition preset for Entity Augmentation: the active party holds the labels only."""
    return replace(spec, active_features=0)


# -- pure pieces ---------------------------------------------------------------------------------

def interpolate_labels(labels: Sequence[np.ndarray], weights: Sequence[float],
                       n_classes: int) -> np.ndarray:
    """Algorithm 1, line 11: ``sum_i w_i onehot(labels_i) / sum_i w_i`` row by row.

    ``labels[i]`` holds the class of the entity behind part ``i`` of each concatenated input;
    ``weights[i]`` is that part's activation dimension. Each output row sums to 1.
    """
    if len(labels) != len(weights) or not labels:
        raise ConfigError(f"need one weight per label array, got {len(labels)} arrays "
                          f"and {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not w.sum() > 0:
        raise ConfigError(f"weights must be >= 0 with a positive sum, got {list(weights)}")
    rows = {len(a) for a in labels}
    if len(rows) != 1:
        raise ConfigError(f"label arrays differ in length: {sorted(rows)}")
    out = np.zeros((rows.pop(), n_classes), dtype=np.float64)
    for wi, lab in zip(w, labels, strict=True):
        lab = np.asarray(lab, dtype=np.int64)
        if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
            raise DataError(f"label outside 0..{n_classes - 1}")
        out[np.arange(len(lab)), lab] += wi
    return (out / w.sum()).astype(np.float32)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy against probability targets (the usual loss for one-hot targets)."""
    return F.cross_entropy(logits, targets)


def soft_binary_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The paper's loss (Sec. 5.5): a sigmoid on every class logit, BCE against the interpolated label.

    ``-mean(t log sigmoid(z) + (1 - t) log(1 - sigmoid(z)))`` over rows and classes: PyTorch's
    ``BCEWithLogitsLoss``, which "internally calculates a sigmoid".
    """
    return F.binary_cross_entropy_with_logits(logits, targets)


def interpolated_loss(name: str, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The training loss ``name`` (``bce`` or ``ce``) against interpolated (soft) labels."""
    if name == "bce":
        return soft_binary_cross_entropy(logits, targets)
    if name == "ce":
        return soft_cross_entropy(logits, targets)
    raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {name!r}")


def entity_schedule(n_aligned: int, n_extra: int, length: int, *, seed: int, epoch: int, party: str,
                    misalign: bool = False) -> np.ndarray:
    """One epoch of entity indices (``length`` of them) for one party.

    Indices ``0..n_aligned-1`` are the aligned rows in the agreed order; ``n_aligned..`` the
    party's other labelled rows. Unless ``misalign``, aligned rows go to slots every party derives
    from the run seed (the first draw equals :func:`securevfl.methods.base.batch_plan`'s order, so
    a fully aligned schedule is SplitNN's), and the remaining slots get the party's other rows in
    its own order, reused when it has fewer than the slots and rotated across epochs when it has
    more. With ``misalign`` all rows go in the party's own order. Pure function of its arguments.
    """
    total = n_aligned + n_extra
    if length < 1 or total < 1:
        raise ConfigError(f"empty schedule: length={length}, rows={total}")
    own = simulation_rng(seed, epoch, party)
    if misalign:
        return _fill(np.arange(total), length, own)
    if n_aligned > length:
        raise ConfigError(f"{n_aligned} aligned rows do not fit an epoch of {length} slots")
    shared = simulation_rng(seed, epoch)
    aligned_order = shared.permutation(n_aligned)
    out = np.empty(length, dtype=np.int64)
    if n_aligned == length:
        out[:] = aligned_order
        return out
    slots = np.sort(shared.choice(length, size=n_aligned, replace=False))
    free = np.ones(length, dtype=bool)
    free[slots] = False
    out[slots] = aligned_order
    n_free = int(free.sum())
    if n_extra == 0:
        # nothing else to send: reuse aligned rows
        out[free] = _fill(np.arange(n_aligned), n_free, own)
    else:
        out[free] = _fill(n_aligned + np.arange(n_extra), n_free, own)
    return out


def _fill(pool: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """``length`` items from ``pool``: whole shuffled passes, then a shuffled partial pass."""
    reps = -(-length // len(pool))
    return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:length]


@dataclass
class ActivationQueue:
    """Per-guest queue at the host (Algorithm 1, ``Q_i`` and ``Q_label,i``).

    ``put`` stores an activation and the labels of its rows (resolved from the entity keys when it
    arrives, so a checkpointed queue does not depend on a run's PSI order); ``read`` returns the
    newest one and whether it arrived since the last read. When a guest misses a step the host
    reads its last activation again (fault tolerance). ``maxlen`` bounds the memory held.
    """

    maxlen: int = 1
    _items: deque = field(default_factory=deque)
    _fresh: bool = False
    reused: int = 0

    def put(self, activation: torch.Tensor, labels: np.ndarray) -> None:
        """Store the newest activation of this guest with the labels of its rows."""
        self._items.append((activation, np.asarray(labels)))
        while len(self._items) > self.maxlen:
            self._items.popleft()
        self._fresh = True

    def read(self) -> tuple[torch.Tensor, np.ndarray, bool]:
        """Return the newest activation, its labels, and whether it is new since the last read."""
        if not self._items:
            raise ProtocolError("no activation received yet from this guest; nothing to reuse")
        fresh, self._fresh = self._fresh, False
        if not fresh:
            self.reused += 1
        activation, labels = self._items[-1]
        return activation, labels, fresh

    def state_dict(self) -> dict[str, Any]:
        """The queued activations and counters, as tensors and numbers (for a checkpoint)."""
        return {"items": [[a, torch.as_tensor(k)] for a, k in self._items], "fresh": self._fresh,
                "reused": self.reused}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._items = deque((a, np.asarray(k)) for a, k in state["items"])
        self._fresh, self.reused = bool(state["fresh"]), int(state["reused"])


# -- models ---------------------------------------------------------------------------------------

def build_passive_model(data: PartyData, config: TrainConfig, options: EntityAugOptions,
                      seed_name: str) -> nn.Module:
    """Build a guest's bottom model; its output width is the party's interpolation weight."""
    if options.arch == "credit-card":  # Sec. 5.2: linear(5) -> linear(2) -> ReLU
        model: nn.Module = nn.Sequential(nn.Linear(data.n_features, 5), nn.Linear(5, 2), nn.ReLU())
    elif options.arch == "parkinsons":  # Sec. 5.2: linear(94) -> linear(47) -> ReLU
        model = nn.Sequential(nn.Linear(data.n_features, 94), nn.Linear(94, 47), nn.ReLU())
    elif options.arch == "handwritten":  # Sec. 5.2: linear(120) -> linear(70) -> ReLU
        model = nn.Sequential(nn.Linear(data.n_features, 120), nn.Linear(120, 70), nn.ReLU())
    elif options.bottom in ("auto", "cnn") and data.strip_shape is not None:
        model = StripCNN(data.strip_shape, config.embedding_dim)
    elif options.bottom == "cnn":
        raise ConfigError(f"bottom='cnn' needs image strips; party {data.name!r} "
                          "holds tabular features")
    else:
        model = mlp_bottom(data.n_features, data.codes, config.hidden, config.embedding_dim)
    return init_parameters(model, party_generator(config.seed, seed_name))


def build_top_model(width: int, n_classes: int, config: TrainConfig,
                     options: EntityAugOptions) -> nn.Module:
    """Build the host's top model over the concatenated activations (one logit per class)."""
    if options.arch == "credit-card":  # linear(22) -> linear(10) -> linear(8) -> linear(4) -> out
        model: nn.Module = nn.Sequential(nn.Linear(width, 22), nn.Linear(22, 10), nn.Linear(10, 8),
                                         nn.Linear(8, 4), nn.Linear(4, n_classes))
    elif options.arch == "parkinsons":
        # linear(94) -> linear(47) -> LeakyReLU -> linear(22) -> linear(10) -> LeakyReLU -> out
        model = nn.Sequential(nn.Linear(width, 94), nn.Linear(94, 47), nn.LeakyReLU(),
                              nn.Linear(47, 22), nn.Linear(22, 10), nn.LeakyReLU(),
                              nn.Linear(10, n_classes))
    elif options.arch == "handwritten":  # linear(280) -> linear(120) -> LeakyReLU -> linear(40) -> out
        model = nn.Sequential(nn.Linear(width, 280), nn.Linear(280, 120), nn.LeakyReLU(),
                              nn.Linear(120, 40), nn.Linear(40, n_classes))
    else:
        model = MLP(width, config.hidden, n_classes)
    return init_parameters(model, party_generator(config.seed, "top"))


def output_width(model: nn.Module, data: PartyData) -> int:
    """Activation dimension of a bottom model (one dry forward pass on a zero row)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return int(model(torch.zeros(1, data.n_features, device=device)).shape[1])


# -- entity resolution ----------------------------------------------------------------------------

@psi_errors()
def _psi_active(ctx: PartyContext, passive: str, labelled_ids: Sequence[str]) -> np.ndarray:
    """Host side of the pairwise PSI with ``guest``: its labelled rows in the pair's order."""
    from psi import CurveEngine, PSIConfig, PSIInitiator, prepare_ids

    prepared = prepare_ids(labelled_ids, source=f"party {ctx.name!r}")
    with ctx.meter.crypto("psi.pairwise"):
        initiator = PSIInitiator(prepared.items, PSIConfig(mode="both"), CurveEngine(1))
        first = initiator.start()
    ctx.send(passive, PSI_MESSAGE, first)
    while not initiator.done:
        reply = ctx.recv(passive, PSI_MESSAGE)
        with ctx.meter.crypto("psi.pairwise"):
            nxt = initiator.handle(reply)
        if nxt is not None:
            ctx.send(passive, PSI_MESSAGE, nxt)
    outcome = initiator.outcome
    assert outcome is not None and outcome.positions is not None  # set when a mode="both" session ends
    return prepared.rows[outcome.positions]


@psi_errors()
def _psi_passive(ctx: PartyContext, ids: Sequence[str]) -> np.ndarray:
    """Guest side of the pairwise PSI: its rows the host labels, in the pair's order."""
    from psi import CurveEngine, PSIConfig, PSIResponder, prepare_ids

    prepared = prepare_ids(ids, source=f"party {ctx.name!r}")
    responder = PSIResponder(prepared.items, PSIConfig(mode="both"), CurveEngine(1))
    while not responder.done:
        message = ctx.recv(ctx.active, PSI_MESSAGE)
        with ctx.meter.crypto("psi.pairwise"):
            reply = responder.handle(message)
        if reply is not None:
            ctx.send(ctx.active, PSI_MESSAGE, reply)
    outcome = responder.outcome
    assert outcome is not None and outcome.positions is not None  # set when a mode="both" session ends
    return prepared.rows[outcome.positions]


def checked_activation(message: Any, passive: str, n_keys: int) -> tuple[torch.Tensor, np.ndarray]:
    """Validate a guest's ``(activation, keys)`` message; a malformed one raises ProtocolError."""
    if not (isinstance(message, tuple | list) and len(message) == 2):
        raise ProtocolError(f"{passive} sent a malformed activation message")
    activation, keys = message
    if not isinstance(activation, torch.Tensor) or activation.ndim != 2:
        raise ProtocolError(f"{passive} sent an activation that is not a 2-D tensor")
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype.kind not in "iu" or len(keys) != len(activation):
        raise ProtocolError(f"{passive} sent {len(activation)} activation rows with malformed entity keys")
    if len(keys) and (keys.min() < 0 or keys.max() >= n_keys):
        raise ProtocolError(f"{passive} sent an entity key outside the {n_keys} entities the host labels")
    return activation, keys.astype(np.int64)


def _id_strings(ids: np.ndarray) -> list[str]:
    return [str(v) for v in ids]


# -- the two sides on the engine ------------------------------------------------------------------

class _StepCounts:
    """A guest's sent and missed steps (checkpointed: the first step is never missed)."""

    def __init__(self) -> None:
        self.sent = self.dropped = 0

    def state_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "dropped": self.dropped}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.sent, self.dropped = int(state["sent"]), int(state["dropped"])


class EntityAugPassive(SplitPassive):
    """A guest: resolve its labelled entities, then send activations with their entity keys."""

    method: EntityAugmentation

    def build(self, ctx: PartyContext) -> None:
        data, options = self.data, self.method.options
        own_ids = np.concatenate([data.ids_train, data.ids_unaligned])
        ctx.stage = "entity resolution"
        if options.resolution == "psi":
            pair_rows = _psi_passive(ctx, _id_strings(own_ids))
        else:
            ctx.send(ctx.active, self.tag("setup", ID_LIST), _id_strings(own_ids))
            pair_rows = np.asarray(ctx.recv(ctx.active, self.tag("setup", LABELLED)), dtype=np.int64)
        n_aligned = len(data.X_train)
        key_of_row = np.full(len(own_ids), -1, dtype=np.int64)
        key_of_row[pair_rows] = np.arange(len(pair_rows))
        if np.any(key_of_row[:n_aligned] < 0):
            raise DataError(f"{ctx.name}: some aligned rows are not labelled at the host")
        extra_rows = n_aligned + np.flatnonzero(key_of_row[n_aligned:] >= 0)
        self.n_extra = len(extra_rows) if options.use_unaligned else 0
        self.entity_rows = np.concatenate([self.rows, extra_rows[: self.n_extra]])  # entity index -> own row
        self.keys = key_of_row[self.entity_rows]
        self.X = as_tensor(np.concatenate([data.X_train, data.X_unaligned])[self.entity_rows], ctx.device)
        self.length = int(ctx.recv(ctx.active, self.tag("setup", PLAN)))
        model = self.method.bottom(self).to(ctx.device)
        self.state.modules["bottom"] = model
        self.state.optimizers["bottom"] = torch.optim.Adam(model.parameters(), lr=self.config.lr)
        drops = simulation_rng(self.config.seed, 0xD0, ctx.name)
        self.drops = self.state.generators["drops"] = drops
        self.counts = self.state.others["steps"] = _StepCounts()

    def build_for_scoring(self, ctx: PartyContext) -> None:
        """Only the bottom model: no entity resolution and no schedule (scoring rows are aligned by PSI)."""
        self.state.modules["bottom"] = self.method.bottom(self).to(ctx.device)

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        order = entity_schedule(len(self.rows), self.n_extra, self.length, seed=self.config.seed, epoch=epoch,
                                party=self.name, misalign=self.method.options.misalign)
        for start in range(0, self.length, self.config.batch_size):
            yield order[start : start + self.config.batch_size]

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> None:
        drop_prob, drops = self.method.options.drop_prob, self.drops
        if self.counts.sent and drop_prob and drops.random() < drop_prob:
            ctx.send(ctx.active, self.tag(TRAIN, ACTIVATION), None)  # stands for a missed step (timeout)
            self.counts.dropped += 1
            return
        model, opt = self.state.modules["bottom"], self.state.optimizers["bottom"]
        with ctx.meter.compute():
            h = model(self.X[batch])
        ctx.send(ctx.active, self.tag(TRAIN, ACTIVATION), (h.detach(), self.keys[batch]))
        self.counts.sent += 1
        grad = checked_tensor(ctx.recv(ctx.active, self.tag(TRAIN, GRADIENT)), ctx.active, len(batch), "gradient")
        ctx.observe(GRADIENT_ROWS, lambda: self.aligned_rows(batch))
        with ctx.meter.compute():
            opt.zero_grad()
            h.backward(grad.to(self.device))
            opt.step()

    def aligned_rows(self, entities: np.ndarray) -> np.ndarray:
        """The aligned training rows behind entity indices (-1 for the guest's other labelled rows)."""
        aligned = entities < len(self.rows)
        return np.where(aligned, self.rows[np.where(aligned, entities, 0)], -1)

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> dict[str, Any]:
        return {"entities": len(self.entity_rows), "sent_steps": self.counts.sent,
                "dropped_steps": self.counts.dropped}


class _HostLayout:
    """The activation width of every part, learnt from the guests' first activations (checkpointed)."""

    def __init__(self, widths: dict[str, int]) -> None:
        self.widths = widths

    def state_dict(self) -> dict[str, Any]:
        return {"widths": dict(self.widths)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.widths = {str(k): int(v) for k, v in state["widths"].items()}


class EntityAugActive(SplitActive):
    """The host: resolve entities, queue each guest's newest activation, mix labels, train the top."""

    method: EntityAugmentation

    def build(self, ctx: PartyContext) -> None:
        data, options, passives = self.data, self.method.options, self.passives
        assert data.y_train is not None and data.y_unaligned is not None  # the host holds the labels
        labelled_ids = np.concatenate([data.ids_train, data.ids_unaligned])
        labelled_y = np.concatenate([data.y_train, data.y_unaligned]).astype(np.int64)
        epsilon = self.config.defenses.get("label-dp")
        if epsilon:  # label DP: every labelled entity's label randomised once, for all guests alike
            labelled_y = randomized_response(labelled_y, data.n_classes, epsilon)
        ctx.stage = "entity resolution"
        self.row_by_key: dict[str, np.ndarray] = {}  # a guest's entity key -> the host's labelled row
        for g in passives:
            if options.resolution == "psi":
                self.row_by_key[g] = _psi_active(ctx, g, _id_strings(labelled_ids))
            else:
                self.row_by_key[g] = self._ids_active(ctx, g, _id_strings(labelled_ids))
        self.label_by_key = {g: labelled_y[rows] for g, rows in self.row_by_key.items()}
        n_aligned, n_train = len(data.X_train), len(self.rows)  # validation rows, if any, are not trained on
        self.sizes = {g: n_train + ((len(self.label_by_key[g]) - n_aligned) if options.use_unaligned else 0)
                      for g in passives}
        self.own_extra = len(data.X_unaligned) if (data.n_features and options.use_unaligned) else 0
        if data.n_features:
            self.sizes[ctx.name] = n_train + self.own_extra
        self.length = (max if options.epoch_size == "max" else min)(self.sizes.values())
        ctx.broadcast(passives, self.tag("setup", PLAN), int(self.length))
        widths = {g: 0 for g in passives}
        if data.n_features:
            own = self.method.bottom(self).to(ctx.device)
            self.state.modules["bottom"] = own
            widths[ctx.name] = output_width(own, data)
            self.X_own = as_tensor(np.concatenate([data.X_train[self.rows], data.X_unaligned[: self.own_extra]]),
                                   ctx.device)
            self.y_own = np.concatenate([labelled_y[self.rows], labelled_y[n_aligned : n_aligned + self.own_extra]])
        self.layout = self.state.others["layout"] = _HostLayout(widths)
        self.queues = {g: ActivationQueue() for g in passives}
        self.state.others.update({f"queue:{g}": q for g, q in self.queues.items()})

    def build_for_scoring(self, ctx: PartyContext) -> None:
        """Only the models: the own bottom (if the host holds features); the top once the saved widths load.

        No entity resolution, no plan and no queues: scoring rows are the parties' PSI intersection,
        and the evaluation exchanges only the guests' embeddings of those rows (as the guests'
        :meth:`EntityAugPassive.build_for_scoring`, which sends nothing at set-up either).
        """
        widths = {g: 0 for g in self.passives}
        if self.data.n_features:
            own = self.method.bottom(self).to(ctx.device)
            self.state.modules["bottom"] = own
            widths[ctx.name] = output_width(own, self.data)
        self.layout = _HostLayout(widths)

    def model_state(self) -> dict[str, Any]:
        """The activation width of every part: what the lazily built top model was built for."""
        return {"widths": {str(k): int(v) for k, v in self.layout.widths.items()}}

    def load_saved(self, saved: SavedSide) -> None:
        """Rebuild the top model for the saved widths, then load the saved weights."""
        widths = saved.state.get("widths")
        expected = set(self.layout.widths)
        if (not isinstance(widths, dict) or set(widths) != expected
                or not all(type(w) is int and w > 0 for w in widths.values())):
            raise ModelError(f"{self.name}'s saved model state does not give a positive activation width for "
                             f"each of {', '.join(sorted(expected))} (another method, or other parties)")
        own = self.layout.widths.get(self.name)
        if own is not None and widths[self.name] != own:
            raise ModelError(f"{self.name}'s saved own activation width {widths[self.name]} is not its "
                             f"model's here ({own}): other options")
        self.layout.widths = dict(widths)
        self._build_top()
        super().load_saved(saved)

    def _ids_active(self, ctx: PartyContext, passive: str, labelled_ids: list[str]) -> np.ndarray:
        """Plaintext stand-in: receive a guest's IDs, answer which are labelled; return the labelled rows."""
        ids = ctx.recv(passive, self.tag("setup", ID_LIST))
        if not isinstance(ids, list):
            raise ProtocolError(f"{passive} sent a malformed ID list")
        row_of = {v: i for i, v in enumerate(labelled_ids)}
        positions = [i for i, v in enumerate(ids) if str(v) in row_of]
        ctx.send(passive, self.tag("setup", LABELLED), np.asarray(positions, dtype=np.int64))
        return np.asarray([row_of[str(ids[i])] for i in positions], dtype=np.int64)

    def aligned_rows(self, guest: str, keys: np.ndarray) -> np.ndarray:
        """The aligned training rows behind a guest's entity keys (-1: another labelled row of the host)."""
        rows = self.row_by_key[guest][keys]  # the host's labelled rows; aligned ones come first
        return np.where(rows < len(self.data.X_train), rows, -1)

    def _build_top(self) -> None:
        """The top model, once the guests' activation widths are known."""
        top = build_top_model(sum(self.layout.widths.values()), self.data.n_classes, self.config,
                               self.method.options).to(self.device)
        self.state.modules["top"] = top
        params = list(top.parameters())
        if "bottom" in self.state.modules:
            params += list(self.state.modules["bottom"].parameters())
        self.state.optimizers["model"] = torch.optim.Adam(params, lr=self.config.lr)

    def restore(self, state: Mapping[str, Any]) -> None:
        self.layout.load_state_dict(state["others"]["layout"])
        self._build_top()
        super().restore(state)

    def batches(self, epoch: int) -> Iterator[tuple[int, np.ndarray | None]]:
        own_order = None
        if "bottom" in self.state.modules:
            own_order = entity_schedule(len(self.rows), self.own_extra, self.length, seed=self.config.seed,
                                        epoch=epoch, party=self.name, misalign=self.method.options.misalign)
        for start in range(0, self.length, self.config.batch_size):
            yield start, own_order

    # The host's batches are (start, own order), not SplitActive's row indices: the engine hands
    # train_batch what this side's batches() yields.
    def train_batch(self, ctx: PartyContext,  # type: ignore[override]
                    batch: tuple[int, np.ndarray | None]) -> tuple[Losses, int]:
        start, own_order = batch
        passives, widths = self.passives, self.layout.widths
        fresh: dict[str, bool] = {}
        parts: list[tuple[torch.Tensor, np.ndarray]] = []
        for g in passives:
            message = ctx.recv(g, self.tag(TRAIN, ACTIVATION))
            if message is not None:
                activation, keys = checked_activation(message, g, len(self.label_by_key[g]))
                if widths[g] and activation.shape[1] != widths[g]:
                    raise ProtocolError(f"{g} changed its activation width")
                self.queues[g].put(activation, self.label_by_key[g][keys])
                ctx.observe(EMBEDDING_ROWS, lambda g=g, keys=keys: (g, self.aligned_rows(g, keys)))
                widths[g] = int(activation.shape[1])
            activation, queued_labels, fresh[g] = self.queues[g].read()
            parts.append((activation, queued_labels))
        if "top" not in self.state.modules:
            self._build_top()
        own = self.state.modules.get("bottom")
        m = min(len(a) for a, _ in parts)
        if own_order is not None:  # the host's own rows of this step bound it too
            m = min(m, len(own_order[start : start + self.config.batch_size]))
        opt = self.state.optimizers["model"]
        with ctx.meter.compute():
            leaves = [a.to(self.device)[:m].detach().requires_grad_(True) for a, _ in parts]
            labels = [lab[:m] for _, lab in parts]
            weights = [widths[g] for g in passives]
            inputs: list[torch.Tensor] = list(leaves)
            if own is not None and own_order is not None:
                own_idx = own_order[start : start + m]
                inputs = [own(self.X_own[own_idx]), *inputs]
                labels = [self.y_own[own_idx], *labels]
                weights = [widths[ctx.name], *weights]
            target = torch.as_tensor(interpolate_labels(labels, weights, self.data.n_classes), device=self.device)
            logits = self.state.modules["top"](torch.cat(inputs, dim=1))
            loss = interpolated_loss(self.method.options.loss, logits, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = float(loss.detach())
        for g, (activation, _), leaf in zip(passives, parts, leaves, strict=True):
            if fresh[g]:
                assert leaf.grad is not None  # the loss depends on every leaf
                grad = self.defend(leaf.grad)
                if len(activation) > m:  # rows the host could not pair get no gradient
                    grad = torch.cat([grad, grad.new_zeros((len(activation) - m, grad.shape[1]))])
                ctx.send(g, self.tag(TRAIN, GRADIENT), grad)
        return {"loss": value}, m

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        options = self.method.options
        extra = {"entity_aug": {
            "resolution": options.resolution,
            "loss": options.loss,
            "steps_per_epoch": -(-self.length // self.config.batch_size),
            "epoch_length": int(self.length),
            "aligned_rows": len(self.rows),
            "labelled_entities": {g: int(n) for g, n in self.sizes.items()},
            "reused_activations": {g: q.reused for g, q in self.queues.items()},
            "weights": {g: int(w) for g, w in self.layout.widths.items()},
        }}
        outcome = super().outcome(ctx, evaluation, record)
        outcome.extra.update(extra)
        return outcome


@register_method
class EntityAugmentation(SplitMethod[EntityAugOptions]):
    """Guests send activations of any labelled entities; the host trains on interpolated labels."""

    name = "entity-aug"
    summary = ("Entity Augmentation (Amalanshu et al. 2024): no alignment needed, "
               "labels mixed by activation width")
    Options = EntityAugOptions
    supports_objectives = False  # soft labels interpolated across guests: classification only

    def bottom(self, side: PartySide) -> nn.Module:
        return build_passive_model(side.data, self.config, self.options, side.name)

    def decode(self, side: PartySide, message: Any, sender: str, rows: int, phase: str) -> torch.Tensor:
        """A guest's evaluation embedding: ``rows`` rows of the width its training activations had."""
        h = checked_tensor(message, sender, rows)
        layout = getattr(side, "layout", None)
        width = layout.widths.get(sender, 0) if layout is not None else 0
        if width and h.shape[1] != width:
            raise ProtocolError(f"{sender} sent an embedding of width {h.shape[1]}; its activations had {width}")
        return h

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        """Return a guest role per passive party and the host role for the active party."""
        if not scenario.passives:
            raise ConfigError("entity-aug needs at least one guest (passive party)")
        active = scenario.party_data(scenario.active)
        if active.y_train is None:
            raise DataError(f"the active party {scenario.active!r} must hold the labels")
        roles = {p: side_role(EntityAugPassive(self, scenario.party_data(p))) for p in scenario.passives}
        roles[scenario.active] = side_role(EntityAugActive(self, active, tuple(scenario.passives)))
        return roles
