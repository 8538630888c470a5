"""Entity Augmentation's two sides on the engine.

A guest resolves its labelled entities and sends activations of them with their keys; the host
queues each guest's newest activation, mixes the labels behind them and trains the top model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from securevfl.errors import DataError, ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, as_tensor
from securevfl.methods.engine import TRAIN, EngineRecord, Evaluation, SplitActive, SplitPassive, checked_tensor
from securevfl.methods.engine.defenses import randomized_response
from securevfl.methods.engine.loop import EMBEDDING_ROWS, GRADIENT_ROWS, Losses, SavedSide
from securevfl.methods.entity_aug.augmentation import (
    ActivationQueue,
    entity_schedule,
    interpolate_labels,
    interpolated_loss,
)
from securevfl.methods.entity_aug.models import build_top_model, output_width
from securevfl.methods.entity_aug.resolution import checked_activation, id_strings, psi_active, psi_passive
from securevfl.seeding import simulation_rng

if TYPE_CHECKING:
    from securevfl.methods.entity_aug import EntityAugmentation

ACTIVATION = "activation"
GRADIENT = "gradient"
ID_LIST = "ids"
LABELLED = "labelled"
PLAN = "plan"


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
            pair_rows = psi_passive(ctx, id_strings(own_ids))
        else:
            ctx.send(ctx.active, self.tag("setup", ID_LIST), id_strings(own_ids))
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
                self.row_by_key[g] = psi_active(ctx, g, id_strings(labelled_ids))
            else:
                self.row_by_key[g] = self._ids_active(ctx, g, id_strings(labelled_ids))
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

