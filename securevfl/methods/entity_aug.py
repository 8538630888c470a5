"""Entity Augmentation: split learning without entity alignment, on interpolated labels.

Amalanshu et al., "Entity Augmentation for Efficient Classification of Vertically Partitioned
Data with Limited Overlap" (2024), Algorithm 1. Every guest (passive party) sends, per step, the
activations of a batch of *its own* labelled entities together with their entity keys; the host
(active party, the label holder) reads the newest activation of each guest from a per-guest queue,
concatenates them, and trains the top model on the *interpolated* label
``y = sum_i w_i y_{j_i} / sum_i w_i`` with ``w_i`` the activation dimension of guest ``i`` (a
CutMix across parties), using cross-entropy with soft targets. Gradients go back to the guests
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

import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from securevfl.data.datasets import Dataset
from securevfl.data.partition import PartitionSpec, register_preset
from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, DataError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    Role,
    TrainConfig,
    as_tensor,
    party_generator,
    predict_scores,
    register_method,
)
from securevfl.models import MLP, StripCNN, init_parameters

ACTIVATION = "ea_activation"
GRADIENT = "ea_gradient"
TEST_ACTIVATION = "ea_test_activation"
PSI_MESSAGE = "ea_psi"
ID_LIST = "ea_ids"
LABELLED = "ea_labelled"
PLAN = "ea_plan"

ARCHS = ("splitnn", "credit-card", "parkinsons")
BOTTOMS = ("auto", "mlp", "cnn")
RESOLUTIONS = ("psi", "ids")
EPOCH_SIZES = ("max", "min")


@dataclass(frozen=True)
class EntityAugOptions:
    """Options of ``entity-aug``.

    ``drop_prob``: probability that a guest misses a step (simulated, seeded; its last activation
    is reused). ``misalign``: shuffle every guest's entities independently, aligned rows included.
    ``use_unaligned``: also train on each guest's labelled rows outside the global intersection.
    ``epoch_size``: steps per epoch cover the largest (``max``, smaller guests reuse rows) or the
    smallest (``min``) guest's labelled set. ``resolution``: ``psi`` (pairwise ECDH PSI) or ``ids``
    (plaintext ID lists). ``arch``: ``splitnn`` (bottom/top as SplitNN, from ``embedding_dim`` and
    ``hidden``), or the paper's Sec. 5.2 ``credit-card`` / ``parkinsons`` shapes. ``bottom``:
    ``auto`` (a CNN for image strips, else an MLP), ``mlp`` or ``cnn`` (for ``arch=splitnn``).
    """

    drop_prob: float = 0.0
    misalign: bool = False
    use_unaligned: bool = True
    epoch_size: str = "max"
    resolution: str = "psi"
    arch: str = "splitnn"
    bottom: str = "auto"

    def __post_init__(self) -> None:
        if self.drop_prob == -1.0:  # the CLI's "not given"
            object.__setattr__(self, "drop_prob", 0.0)
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError(f"drop_prob must be in [0, 1), got {self.drop_prob}")
        for name, value, allowed in (("epoch_size", self.epoch_size, EPOCH_SIZES),
                                     ("resolution", self.resolution, RESOLUTIONS),
                                     ("arch", self.arch, ARCHS), ("bottom", self.bottom, BOTTOMS)):
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


def party_digest(name: str) -> int:
    """Return a stable 32-bit number for a party name (seeds its own orderings)."""
    return zlib.crc32(name.encode())


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
    own = np.random.default_rng([seed, epoch, party_digest(party)])
    if misalign:
        return _fill(np.arange(total), length, own)
    if n_aligned > length:
        raise ConfigError(f"{n_aligned} aligned rows do not fit an epoch of {length} slots")
    shared = np.random.default_rng([seed, epoch])
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

    ``put`` stores an activation and its entity keys; ``read`` returns the newest one and whether
    it arrived since the last read. When a guest misses a step the host reads its last activation
    again (fault tolerance). ``maxlen`` bounds the memory held.
    """

    maxlen: int = 1
    _items: deque = field(default_factory=deque)
    _fresh: bool = False
    reused: int = 0

    def put(self, activation: torch.Tensor, keys: np.ndarray) -> None:
        """Store the newest activation of this guest with its entity keys."""
        self._items.append((activation, np.asarray(keys)))
        while len(self._items) > self.maxlen:
            self._items.popleft()
        self._fresh = True

    def read(self) -> tuple[torch.Tensor, np.ndarray, bool]:
        """Return the newest activation, its keys, and whether it is new since the last read."""
        if not self._items:
            raise ProtocolError("no activation received yet from this guest; nothing to reuse")
        fresh, self._fresh = self._fresh, False
        if not fresh:
            self.reused += 1
        activation, keys = self._items[-1]
        return activation, keys, fresh


# -- models ---------------------------------------------------------------------------------------

def build_guest_model(data: PartyData, config: TrainConfig, options: EntityAugOptions,
                      seed_name: str) -> nn.Module:
    """Build a guest's bottom model; its output width is the party's interpolation weight."""
    if options.arch == "credit-card":  # Sec. 5.2: linear(5) -> linear(2) -> ReLU
        model: nn.Module = nn.Sequential(nn.Linear(data.n_features, 5), nn.Linear(5, 2), nn.ReLU())
    elif options.arch == "parkinsons":  # Sec. 5.2: linear(94) -> linear(47) -> ReLU
        model = nn.Sequential(nn.Linear(data.n_features, 94), nn.Linear(94, 47), nn.ReLU())
    elif options.bottom in ("auto", "cnn") and data.strip_shape is not None:
        model = StripCNN(data.strip_shape, config.embedding_dim)
    elif options.bottom == "cnn":
        raise ConfigError(f"bottom='cnn' needs image strips; party {data.name!r} "
                          "holds tabular features")
    else:
        model = MLP(data.n_features, config.hidden, config.embedding_dim, final_activation=True)
    return init_parameters(model, party_generator(config.seed, seed_name))


def build_host_model(width: int, n_classes: int, config: TrainConfig,
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
    else:
        model = MLP(width, config.hidden, n_classes)
    return init_parameters(model, party_generator(config.seed, "top"))


def output_width(model: nn.Module, data: PartyData) -> int:
    """Activation dimension of a bottom model (one dry forward pass on a zero row)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        return int(model(torch.zeros(1, data.n_features, device=device)).shape[1])


# -- entity resolution ----------------------------------------------------------------------------

def _psi_host(ctx: PartyContext, guest: str, labelled_ids: Sequence[str]) -> np.ndarray:
    """Host side of the pairwise PSI with ``guest``: its labelled rows in the pair's order."""
    from psi import CurveEngine, PSIConfig, PSIInitiator, prepare_ids

    prepared = prepare_ids(labelled_ids, source=f"party {ctx.name!r}")
    with ctx.meter.crypto("psi.pairwise"):
        initiator = PSIInitiator(prepared.items, PSIConfig(mode="both"), CurveEngine(1))
        first = initiator.start()
    ctx.send(guest, PSI_MESSAGE, first)
    while not initiator.done:
        reply = ctx.recv(guest, PSI_MESSAGE)
        with ctx.meter.crypto("psi.pairwise"):
            nxt = initiator.handle(reply)
        if nxt is not None:
            ctx.send(guest, PSI_MESSAGE, nxt)
    return prepared.rows[initiator.outcome.positions]


def _psi_guest(ctx: PartyContext, ids: Sequence[str]) -> np.ndarray:
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
    return prepared.rows[responder.outcome.positions]


def _ids_host(ctx: PartyContext, guest: str, label_of: dict[str, int]) -> np.ndarray:
    """Plaintext stand-in: receive a guest's IDs, answer which are labelled; return labels."""
    ids = ctx.recv(guest, ID_LIST)
    positions = [i for i, v in enumerate(ids) if str(v) in label_of]
    ctx.send(guest, LABELLED, np.asarray(positions, dtype=np.int64))
    return np.asarray([label_of[str(ids[i])] for i in positions], dtype=np.int64)


def checked_activation(message: Any, guest: str, n_keys: int) -> tuple[torch.Tensor, np.ndarray]:
    """Validate a guest's ``(activation, keys)`` message; a malformed one raises ProtocolError."""
    if not (isinstance(message, tuple | list) and len(message) == 2):
        raise ProtocolError(f"{guest} sent a malformed activation message")
    activation, keys = message
    if not isinstance(activation, torch.Tensor) or activation.ndim != 2:
        raise ProtocolError(f"{guest} sent an activation that is not a 2-D tensor")
    keys = np.asarray(keys)
    if keys.ndim != 1 or keys.dtype.kind not in "iu" or len(keys) != len(activation):
        raise ProtocolError(f"{guest} sent {len(activation)} activation rows with malformed entity keys")
    if len(keys) and (keys.min() < 0 or keys.max() >= n_keys):
        raise ProtocolError(f"{guest} sent an entity key outside the {n_keys} entities the host labels")
    return activation, keys.astype(np.int64)


def _id_strings(ids: np.ndarray) -> list[str]:
    return [str(v) for v in ids]


# -- roles ----------------------------------------------------------------------------------------

def guest_role(data: PartyData, config: TrainConfig, options: EntityAugOptions,
               drop_rng: np.random.Generator | None = None) -> Role:
    """Build a guest role: resolve labelled entities, then send activations + keys per step."""

    def role(ctx: PartyContext) -> dict[str, Any]:
        device = ctx.device
        n_aligned = len(data.X_train)
        own_ids = np.concatenate([data.ids_train, data.ids_unaligned])
        ctx.stage = "entity resolution"
        if options.resolution == "psi":
            pair_rows = _psi_guest(ctx, _id_strings(own_ids))
        else:
            ctx.send(ctx.active, ID_LIST, _id_strings(own_ids))
            pair_rows = np.asarray(ctx.recv(ctx.active, LABELLED), dtype=np.int64)
        key_of_row = np.full(len(own_ids), -1, dtype=np.int64)
        key_of_row[pair_rows] = np.arange(len(pair_rows))
        if np.any(key_of_row[:n_aligned] < 0):
            raise DataError(f"{ctx.name}: some aligned rows are not labelled at the host")
        extra_rows = n_aligned + np.flatnonzero(key_of_row[n_aligned:] >= 0)
        if not options.use_unaligned:
            extra_rows = extra_rows[:0]
        rows = np.concatenate([np.arange(n_aligned), extra_rows])  # entity index -> own row
        keys = key_of_row[rows]
        X = as_tensor(np.concatenate([data.X_train, data.X_unaligned])[rows], device)
        length = int(ctx.recv(ctx.active, PLAN))

        model = build_guest_model(data, config, options, ctx.name).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        rng = drop_rng or np.random.default_rng([config.seed, 0xD0, party_digest(ctx.name)])
        sent = dropped = 0
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            order = entity_schedule(n_aligned, len(extra_rows), length, seed=config.seed,
                                    epoch=epoch, party=ctx.name, misalign=options.misalign)
            for start in range(0, length, config.batch_size):
                idx = order[start : start + config.batch_size]
                if sent and options.drop_prob and rng.random() < options.drop_prob:
                    ctx.send(ctx.active, ACTIVATION, None)  # stands for a missed step (timeout)
                    dropped += 1
                    continue
                with ctx.meter.compute():
                    h = model(X[idx])
                ctx.send(ctx.active, ACTIVATION, (h.detach(), keys[idx]))
                sent += 1
                grad = ctx.recv(ctx.active, GRADIENT)
                with ctx.meter.compute():
                    opt.zero_grad()
                    h.backward(grad.to(device))
                    opt.step()
        ctx.stage = "evaluate"
        with ctx.meter.compute(), torch.no_grad():
            model.eval()
            h_test = model(as_tensor(data.X_test, device))
        ctx.send(ctx.active, TEST_ACTIVATION, h_test)
        return {"entities": int(len(rows)), "sent_steps": sent, "dropped_steps": dropped}

    return role


def host_role(data: PartyData, config: TrainConfig, options: EntityAugOptions,
              guests: tuple[str, ...]) -> Role:
    """Build the host role: resolve entities, queue activations, mix labels, train the top."""

    def role(ctx: PartyContext) -> ActiveOutcome:
        device = ctx.device
        n_aligned = len(data.X_train)
        labelled_ids = np.concatenate([data.ids_train, data.ids_unaligned])
        labelled_y = np.concatenate([data.y_train, data.y_unaligned]).astype(np.int64)
        ctx.stage = "entity resolution"
        label_by_key: dict[str, np.ndarray] = {}
        for g in guests:
            if options.resolution == "psi":
                label_by_key[g] = labelled_y[_psi_host(ctx, g, _id_strings(labelled_ids))]
            else:
                label_of = dict(zip(_id_strings(labelled_ids), labelled_y.tolist(), strict=True))
                label_by_key[g] = _ids_host(ctx, g, label_of)
        sizes = {g: n_aligned + ((len(label_by_key[g]) - n_aligned) if options.use_unaligned else 0)
                 for g in guests}
        own_extra = len(data.X_unaligned) if (data.n_features and options.use_unaligned) else 0
        if data.n_features:
            sizes[ctx.name] = n_aligned + own_extra
        length = (max if options.epoch_size == "max" else min)(sizes.values())
        ctx.broadcast(guests, PLAN, int(length))

        own = (build_guest_model(data, config, options, ctx.name).to(device)
               if data.n_features else None)
        own_rows = np.concatenate([data.X_train, data.X_unaligned])[: n_aligned + own_extra]
        X_own = as_tensor(own_rows, device)
        widths = {g: 0 for g in guests}
        if own is not None:
            widths[ctx.name] = output_width(own, data)
        queues = {g: ActivationQueue() for g in guests}
        top: nn.Module | None = None
        opt: torch.optim.Optimizer | None = None
        history = []
        for epoch in range(config.epochs):
            ctx.stage = f"train epoch {epoch + 1}"
            own_order = None
            if own is not None:
                own_order = entity_schedule(n_aligned, own_extra, length, seed=config.seed,
                                            epoch=epoch, party=ctx.name,
                                            misalign=options.misalign)
            total, count = 0.0, 0
            for start in range(0, length, config.batch_size):
                fresh: dict[str, bool] = {}
                parts: list[tuple[torch.Tensor, np.ndarray]] = []
                for g in guests:
                    message = ctx.recv(g, ACTIVATION)
                    if message is not None:
                        activation, keys = checked_activation(message, g, len(label_by_key[g]))
                        if widths[g] and activation.shape[1] != widths[g]:
                            raise ProtocolError(f"{g} changed its activation width")
                        queues[g].put(activation, keys)
                        widths[g] = int(activation.shape[1])
                    activation, keys, fresh[g] = queues[g].read()
                    parts.append((activation, label_by_key[g][keys]))
                if top is None:  # built once the guests' activation widths are known
                    width = sum(widths.values())
                    top = build_host_model(width, data.n_classes, config, options).to(device)
                    params = list(top.parameters())
                    params += list(own.parameters()) if own is not None else []
                    opt = torch.optim.Adam(params, lr=config.lr)
                m = min(len(a) for a, _ in parts)
                with ctx.meter.compute():
                    leaves = [a.to(device)[:m].detach().requires_grad_(True) for a, _ in parts]
                    labels = [lab[:m] for _, lab in parts]
                    weights = [widths[g] for g in guests]
                    inputs = list(leaves)
                    if own is not None:
                        own_idx = own_order[start : start + m]
                        inputs = [own(X_own[own_idx])] + inputs
                        labels = [labelled_y[own_idx]] + labels
                        weights = [widths[ctx.name]] + weights
                    mixed = interpolate_labels(labels, weights, data.n_classes)
                    target = torch.as_tensor(mixed, device=device)
                    loss = soft_cross_entropy(top(torch.cat(inputs, dim=1)), target)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    total += float(loss.detach()) * m
                    count += m
                for g, (activation, _), leaf in zip(guests, parts, leaves, strict=True):
                    if fresh[g]:
                        grad = leaf.grad
                        if len(activation) > m:  # rows the host could not pair get no gradient
                            pad = grad.new_zeros((len(activation) - m, grad.shape[1]))
                            grad = torch.cat([grad, pad])
                        ctx.send(g, GRADIENT, grad)
            history.append({"epoch": epoch + 1, "train_loss": total / max(count, 1)})
            ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=history[-1]["train_loss"])
        ctx.stage = "evaluate"
        received = [ctx.recv(g, TEST_ACTIVATION) for g in guests]
        with ctx.meter.compute(), torch.no_grad():
            top.eval()
            parts_test = [own.eval()(as_tensor(data.X_test, device))] if own is not None else []
            parts_test += [r.to(device) for r in received]
            scores = predict_scores(top(torch.cat(parts_test, dim=1)))
        extra = {
            "entity_aug": {
                "resolution": options.resolution,
                "steps_per_epoch": -(-length // config.batch_size),
                "epoch_length": int(length),
                "aligned_rows": int(n_aligned),
                "labelled_entities": {g: int(sizes[g]) for g in sizes},
                "reused_activations": {g: queues[g].reused for g in guests},
                "weights": {g: int(w) for g, w in widths.items()},
            }
        }
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history, extra=extra)

    return role


@register_method
class EntityAugmentation(Method):
    """Guests send activations of any labelled entities; the host trains on interpolated labels."""

    name = "entity-aug"
    summary = ("Entity Augmentation (Amalanshu et al. 2024): no alignment needed, "
               "labels mixed by activation width")
    Options = EntityAugOptions

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        """Return a guest role per passive party and the host role for the active party."""
        if not scenario.passives:
            raise ConfigError("entity-aug needs at least one guest (passive party)")
        active = scenario.party_data(scenario.active)
        if active.y_train is None:
            raise DataError(f"the active party {scenario.active!r} must hold the labels")
        roles: dict[str, Role] = {
            p: guest_role(scenario.party_data(p), self.config, self.options)
            for p in scenario.passives}
        roles[scenario.active] = host_role(active, self.config, self.options, scenario.passives)
        return roles
