"""The guest and host sides of the four TabNet designs, on the split-learning engine.

Two phases (:class:`~securevfl.methods.engine.loop.Phase`): ``pretrain`` (masked reconstruction,
no labels) then ``finetune`` (cross-entropy + lambda_sparse x M_loss); the Meter records each
phase's time and bytes, which become the report's efficiency table.

Per pretraining batch (tabvfl): guest -> host ``(z, mask)`` where ``z = FC(BN(masked x))``; host ->
guest its slice of the decoder output; guest -> host the gradient of its own reconstruction loss
with respect to that slice plus the loss value (the host sums the losses: the gradient of the sum
is the sum of the gradients); host -> guest the gradient for ``z``. Reconstruction targets (the
guest's unmasked features) never leave the guest. Finetuning: guest -> host ``z = FC(BN(x))``,
host -> guest its gradient.

Client failures (paper Sec. IV-E): with ``fail_prob`` p each guest is offline for a whole epoch
(never in a phase's first epoch); the host then reuses the rows it cached from that guest's last
transmission (``on_fail=cache``) or zeros (``on_fail=zeros``). Both sides derive the schedule and
the batch order from the run seed, so a returning guest works on the same batch as the host.
"""

from __future__ import annotations

import dataclasses
import resource
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import PartyData
from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, as_tensor, predict_scores
from securevfl.methods.engine.loop import TEST, EngineRecord, Evaluation, Losses, PartySide, Phase, agreed_batches
from securevfl.methods.tabvfl.designs import Design
from securevfl.methods.tabvfl.quality import latent_quality
from securevfl.methods.tabvfl.tabnet import (
    TabNetShape,
    count_parameters,
    decoder_slices,
    reconstruction_loss,
    reinit_tabnet,
)
from securevfl.seeding import simulation_rng, torch_generator

if TYPE_CHECKING:
    from securevfl.methods.tabvfl import TabNetMethod

PRETRAIN, FINETUNE = "pretrain", "finetune"
PHASES = ("setup", PRETRAIN, FINETUNE, "evaluate")
PRE_OUT = "tabvfl.pretrain.bottom"      # guest -> host: bottom outputs (+ obfuscation mask)
PRE_DEC = "tabvfl.pretrain.decoded"     # host -> guest: its slice of the decoder output
PRE_GRAD = "tabvfl.pretrain.recon_grad"  # guest -> host: d(own recon loss)/d(slice), loss value
PRE_BACK = "tabvfl.pretrain.bottom_grad"  # host -> guest: gradients for its bottom outputs
PRE_VAL_OUT = "tabvfl.pretrain.val_bottom"    # guest -> host: bottom outputs (+ mask) of the validation rows
PRE_VAL_DEC = "tabvfl.pretrain.val_decoded"   # host -> guest: its slice of their decoder output
PRE_VAL_LOSS = "tabvfl.pretrain.val_loss"     # guest -> host: its reconstruction loss on them (a float)
PRE_DONE = "tabnet-lt.pretrain.done"   # tabnet-lt: guest -> host, local pretraining finished (epochs trained)
FT_OUT = "tabvfl.finetune.bottom"
FT_BACK = "tabvfl.finetune.bottom_grad"
VAL_OUT = "tabvfl.validate.bottom"      # guest -> host: finetuned bottom outputs of the validation rows
EVAL_OUT = "tabvfl.test.bottom"         # guest -> host: finetuned bottom outputs, train and test rows
STATS = "tabvfl.test.stats"             # guest -> host: bytes it sent and seconds per phase (its Meter), parameters
RAW = "tabnet-ct.setup.raw_features"    # tabnet-ct only: raw features (centralised reference)


def failure_schedule(seed: int, phase: str, epochs: int, all_passives: Sequence[str],
                     fail_prob: float) -> dict[str, np.ndarray]:
    """Per guest, which epochs of ``phase`` it is offline: each epoch independently with ``fail_prob``.

    Epoch 0 is always online (the host needs one transmission to cache, as in the paper). This is
    a simulation drawn from a seeded numpy Generator, not a secret.
    """
    rng = simulation_rng(seed, PHASES.index(phase), 0x7AB)
    offline = rng.random((epochs, len(all_passives))) < fail_prob
    offline[:1] = False
    return {g: offline[:, i].copy() for i, g in enumerate(all_passives)}


class RowCache:
    """The host's copy of each guest's last transmitted rows (paper Sec. IV-E), by training row.

    Indexed by row rather than by batch position, so it stays right when the batch order changes
    from epoch to epoch; with a fixed batch order (the paper's setting) the two are the same.
    """

    def __init__(self, n_rows: int, on_fail: str) -> None:
        self.n_rows = n_rows
        self.on_fail = on_fail
        self._store: dict[str, list[torch.Tensor]] = {}
        self.hits = 0

    def put(self, party: str, idx: np.ndarray, tensors: Sequence[torch.Tensor]) -> None:
        if party not in self._store:
            self._store[party] = [torch.zeros((self.n_rows, *t.shape[1:]), dtype=t.dtype, device=t.device)
                                  for t in tensors]
        for slot, t in zip(self._store[party], tensors):
            slot[torch.as_tensor(idx, device=t.device)] = t.detach()

    def get(self, party: str, idx: np.ndarray) -> list[torch.Tensor]:
        """Cached rows (``cache``) or zeros of the same shapes (``zeros``)."""
        self.hits += 1
        slots = self._store[party]
        rows = [s[torch.as_tensor(idx, device=s.device)] for s in slots]
        return rows if self.on_fail == "cache" else [torch.zeros_like(r) for r in rows]

    def state_dict(self) -> dict[str, Any]:
        return {"store": {g: list(ts) for g, ts in self._store.items()}, "hits": self.hits}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._store = {str(g): list(ts) for g, ts in state["store"].items()}
        self.hits = int(state["hits"])


def _tensor(message: Any, sender: str, what: str) -> torch.Tensor:
    if not isinstance(message, torch.Tensor):
        raise ProtocolError(f"{sender} sent a malformed {what}")
    return message


def _checked_stats(message: Any, sender: str) -> dict[str, Any]:
    def numbers(value: Any, kind: type) -> bool:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, kind) and not isinstance(v, bool)
                                               for k, v in value.items())

    if not isinstance(message, dict) or set(message) != {"bytes", "seconds", "params"} \
            or not isinstance(message["params"], int) or not numbers(message["bytes"], int) \
            or not numbers(message["seconds"], float):
        raise ProtocolError(f"{sender} sent malformed statistics")
    return message


class _TabSide(PartySide):
    method: TabNetMethod

    def __init__(self, method: TabNetMethod, data: PartyData, all_passives: tuple[str, ...], shape: TabNetShape,
                 passives: tuple[str, ...] = ()) -> None:
        super().__init__(method, data, passives)
        self.design: Design = method.design
        self.all_passives = all_passives
        self.pre_epochs = method.pretrain_epochs()
        self.shape = shape

    def phases(self) -> tuple[Phase, ...]:
        return self.method.phases()

    def _offline(self, all_passives: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
        o, c = self.method.options, self.config
        return {ph: failure_schedule(c.seed, ph, n, all_passives, o.fail_prob)
                for ph, n in ((PRETRAIN, self.pre_epochs), (FINETUNE, c.epochs))}

    def _phase_epoch(self, epoch: int) -> int:
        return epoch - (self.pre_epochs if self.phase.name == FINETUNE else 0)

    def _batches(self, epoch: int) -> Iterator[np.ndarray]:
        return agreed_batches(self.rows, self.config, epoch, min_rows=2)  # batch norm needs two rows

    def _validation_masks(self) -> torch.Generator:
        """The obfuscation of the validation rows: the same draw at every validation, so losses compare."""
        return torch_generator(self.config.seed, self.name, "validation-obfuscation")


class TabPassive(_TabSide):
    """A guest (passive party): its bottom model and reconstruction FC; only its own columns."""

    def __init__(self, method: TabNetMethod, data: PartyData, all_passives: tuple[str, ...], shape: TabNetShape,
                 recon_in: int) -> None:
        super().__init__(method, data, all_passives, shape)
        self.recon_in = recon_in
        self.takes_part = not self.design.raw_to_active
        self.phase_epochs_trained = 0

    def build(self, ctx: PartyContext) -> None:
        data, config = self.data, self.config
        if self.design.raw_to_active:  # the centralised reference: raw features go to the host
            ctx.send(ctx.active, RAW, (data.X_train, data.X_test))
            return
        model = reinit_tabnet(self.design.bottom(data.n_features, self.shape, self.recon_in),
                              torch_generator(config.seed, ctx.name, "init")).to_device(ctx.device)
        self.model = self.state.modules["bottom"] = model
        self.state.optimizers[PRETRAIN] = torch.optim.Adam(model.parameters(), lr=config.lr)
        self.state.optimizers[FINETUNE] = torch.optim.Adam(model.bottom_parameters(), lr=config.lr)
        self.masks = self.state.generators["obfuscation"] = torch_generator(config.seed, ctx.name, "obfuscation")
        self.offline = {ph: s[ctx.name] for ph, s in self._offline(self.all_passives).items()}
        self.X = as_tensor(data.X_train, ctx.device)

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        self.phase_epochs_trained = self._phase_epoch(epoch) + 1
        offline = self.offline[self.phase.name][self._phase_epoch(epoch)]
        if offline and (self.phase.name == FINETUNE or self.design.joint_pretraining):
            return iter(())
        return self._batches(epoch)

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> None:
        if self.phase.name == PRETRAIN:
            self._pretrain(ctx, batch)
        else:
            self._finetune(ctx, batch)

    def _pretrain(self, ctx: PartyContext, idx: np.ndarray) -> None:
        model, opt = self.model, self.state.optimizers[PRETRAIN]
        ratio, masks = self.method.options.pretraining_ratio, self.masks
        x = self.X[idx]
        if not self.design.joint_pretraining:
            with ctx.meter.compute():
                loss = model.local_pretrain_loss(x, ratio, masks)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return
        with ctx.meter.compute():
            outs, obf = model.pretrain_forward(x, ratio, masks)
        ctx.send(ctx.active, PRE_OUT, ([o.detach() for o in outs], obf if self.design.sends_mask else None))
        dec = _tensor(ctx.recv(ctx.active, PRE_DEC), ctx.active, "decoder slice").to(self.device)
        dec.requires_grad_(True)
        with ctx.meter.compute():
            opt.zero_grad()
            loss = reconstruction_loss(model.recon(dec), x, obf)
            loss.backward()
        ctx.send(ctx.active, PRE_GRAD, (dec.grad, float(loss.detach())))
        grads = ctx.recv(ctx.active, PRE_BACK)
        if not isinstance(grads, list) or len(grads) != len(outs):
            raise ProtocolError(f"{ctx.active} sent malformed bottom gradients")
        with ctx.meter.compute():
            torch.autograd.backward(outs, [_tensor(g, ctx.active, "gradient").to(self.device) for g in grads])
            opt.step()

    def _finetune(self, ctx: PartyContext, idx: np.ndarray) -> None:
        model, opt = self.model, self.state.optimizers[FINETUNE]
        lambda_sparse = self.method.options.lambda_sparse
        with ctx.meter.compute():
            out, m_loss = model.finetune_forward(self.X[idx])
        ctx.send(ctx.active, FT_OUT, out.detach())
        grad = _tensor(ctx.recv(ctx.active, FT_BACK), ctx.active, "gradient").to(self.device)
        with ctx.meter.compute():
            opt.zero_grad()
            if m_loss is not None and lambda_sparse > 0:
                torch.autograd.backward([out, lambda_sparse * m_loss], [grad, None])
            else:
                out.backward(grad)
            opt.step()

    def validation_loss(self, ctx: PartyContext, rows: np.ndarray) -> float | None:
        """Pretraining's validation: the reconstruction loss of ``rows`` (alone, or through the host)."""
        model, ratio = self.model, self.method.options.pretraining_ratio
        x = self.X[rows]
        with ctx.meter.compute(), torch.no_grad():
            if not self.design.joint_pretraining:
                return float(model.local_pretrain_loss(x, ratio, self._validation_masks()))
            outs, obf = model.pretrain_forward(x, ratio, self._validation_masks())
        ctx.send(ctx.active, PRE_VAL_OUT, (outs, obf if self.design.sends_mask else None))
        dec = _tensor(ctx.recv(ctx.active, PRE_VAL_DEC), ctx.active, "decoder slice").to(self.device)
        with ctx.meter.compute(), torch.no_grad():
            loss = float(reconstruction_loss(model.recon(dec), x, obf))
        ctx.send(ctx.active, PRE_VAL_LOSS, loss)
        return None

    def end_phase(self, ctx: PartyContext, phase: Phase) -> None:
        if phase.name == PRETRAIN and not self.design.joint_pretraining:
            # the host federates the phases: it waits for this (the epochs trained, fewer if stopped early)
            ctx.send(ctx.active, PRE_DONE, self.phase_epochs_trained)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        model = self.model
        with ctx.meter.compute(), torch.no_grad():
            out = model.finetune_forward(as_tensor(X, ctx.device))[0]
            train_out = model.finetune_forward(self.X)[0] if phase == TEST else None
        ctx.send(ctx.active, EVAL_OUT if phase == TEST else VAL_OUT, (train_out, out) if phase == TEST else out)

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> None:
        params = count_parameters(self.state.modules["bottom"]) if self.takes_part else 0
        own = ctx.meter.snapshot()
        ctx.send(ctx.active, STATS, {"bytes": own.phase_bytes, "seconds": own.phase_seconds, "params": params})


class TabActive(_TabSide):
    """The host (active party): labels, PartialEnc/PartialDec or the aggregation, final FC."""

    def __init__(self, method: TabNetMethod, data: PartyData, passive_features: dict[str, int], shape: TabNetShape,
                 recon_in: list[int]) -> None:
        all_passives = tuple(passive_features)
        super().__init__(method, data, all_passives, shape,
                         passives=() if method.design.raw_to_active else all_passives)
        self.passive_features = passive_features
        self.recon_in = recon_in
        self.local_pretrain_epochs: dict[str, int] = {}

    def build(self, ctx: PartyContext) -> None:
        config, options, design = self.config, self.method.options, self.design
        if design.raw_to_active:
            ctx.stage = "receive raw features"
            raws = [ctx.recv(g, RAW) for g in self.all_passives]
            self.data = dataclasses.replace(
                self.data, X_train=np.concatenate([self.data.X_train] + [np.asarray(r[0]) for r in raws], axis=1),
                X_test=np.concatenate([self.data.X_test] + [np.asarray(r[1]) for r in raws], axis=1))
        remote = self.passives
        n_own = self.data.n_features
        widths = design.active_widths(n_own, [self.passive_features[g] for g in remote], self.shape)
        if not widths:
            raise ConfigError("no party holds features")
        local = None
        if n_own:
            local = reinit_tabnet(design.bottom(n_own, self.shape, self.recon_in[0]),
                                  torch_generator(config.seed, ctx.name, "init")).to_device(ctx.device)
            self.state.modules["bottom"] = local
        top = reinit_tabnet(design.top(widths, self.shape, self.data.n_classes),
                            torch_generator(config.seed, ctx.name, "top")).to_device(ctx.device)
        self.state.modules["top"] = top
        self.local, self.top = local, top
        slices = decoder_slices(self.shape.n_d, len(widths), options.decoder_split) if design.joint_pretraining else []
        self.own_slice = slices[0] if (local is not None and slices) else None
        self.passive_slices = dict(zip(remote, slices[1:] if local is not None else slices))
        self.masks = self.state.generators["obfuscation"] = torch_generator(config.seed, ctx.name, "obfuscation")
        params = top.pretrain_parameters() + (list(local.parameters()) if local is not None else [])
        if params:
            self.state.optimizers[PRETRAIN] = torch.optim.Adam(params, lr=config.lr)
        params = top.finetune_parameters() + (local.bottom_parameters() if local is not None else [])
        self.state.optimizers[FINETUNE] = torch.optim.Adam(params, lr=config.lr)
        self.X = as_tensor(self.data.X_train, ctx.device)
        self.y = torch.as_tensor(self.data.y_train, dtype=torch.long, device=ctx.device)
        self.schedules = self._offline(remote)
        self.caches = {ph: RowCache(len(self.X), options.on_fail) for ph in (PRETRAIN, FINETUNE)}
        self.state.others.update({f"cache:{ph}": c for ph, c in self.caches.items()})

    def batches(self, epoch: int) -> Iterator[np.ndarray]:
        schedule, e = self.schedules[self.phase.name], self._phase_epoch(epoch)
        self.online = [g for g in self.passives if not schedule[g][e]]
        return self._batches(epoch)

    def train_batch(self, ctx: PartyContext, batch: np.ndarray) -> tuple[Losses, int]:
        if self.phase.name == PRETRAIN:
            return self._pretrain(ctx, batch)
        return self._finetune(ctx, batch)

    def _pretrain(self, ctx: PartyContext, idx: np.ndarray) -> tuple[Losses, int]:
        local, opt, cache = self.local, self.state.optimizers.get(PRETRAIN), self.caches[PRETRAIN]
        ratio, masks = self.method.options.pretraining_ratio, self.masks
        if not self.design.joint_pretraining:  # no communication; the host pretrains its own columns only
            if local is None or opt is None:
                return {}, len(idx)
            with ctx.meter.compute():
                loss = local.local_pretrain_loss(self.X[idx], ratio, masks)
                opt.zero_grad()
                loss.backward()
                opt.step()
            return {"loss": float(loss.detach())}, len(idx)
        assert opt is not None
        outputs: list[list[torch.Tensor]] = []
        obfs: list[torch.Tensor] = []
        own_obf = None
        if local is not None:
            with ctx.meter.compute():
                own_outs, own_obf = local.pretrain_forward(self.X[idx], ratio, masks)
            outputs.append(own_outs)
            obfs.append(own_obf)
        leaves: dict[str, list[torch.Tensor]] = {}
        for g in self.passives:
            if g in self.online:
                outs, mask = self._checked_outputs(ctx.recv(g, PRE_OUT), g)
                outs = [o.to(self.device).requires_grad_(True) for o in outs]
                mask = mask.to(self.device) if mask is not None else torch.zeros_like(outs[0][:, :0])
                leaves[g] = outs
                cache.put(g, idx, [*outs, mask])
            else:
                *outs, mask = cache.get(g, idx)
            outputs.append(outs)
            obfs.append(mask)
        with ctx.meter.compute():
            dec = self.top.pretrain_forward(outputs, obfs)
        for g in leaves:
            ctx.send(g, PRE_DEC, dec[:, self.passive_slices[g]].detach())
        roots: list[torch.Tensor] = []
        root_grads: list[torch.Tensor | None] = []
        batch_loss = 0.0
        for g in leaves:
            message = ctx.recv(g, PRE_GRAD)
            if not isinstance(message, tuple | list) or len(message) != 2 or not isinstance(message[1], float):
                raise ProtocolError(f"{g} sent a malformed reconstruction gradient")
            roots.append(dec[:, self.passive_slices[g]])
            root_grads.append(_tensor(message[0], g, "reconstruction gradient").to(self.device))
            batch_loss += message[1]
        with ctx.meter.compute():
            opt.zero_grad()
            if local is not None:
                assert own_obf is not None
                own_loss = reconstruction_loss(local.recon(dec[:, self.own_slice]), self.X[idx], own_obf)
                roots.append(own_loss)
                root_grads.append(None)
                batch_loss += float(own_loss.detach())
            if roots:
                torch.autograd.backward(roots, root_grads)
                opt.step()
        for g, outs in leaves.items():
            ctx.send(g, PRE_BACK, [o.grad if o.grad is not None else torch.zeros_like(o) for o in outs])
        return {"loss": batch_loss}, len(idx)

    @staticmethod
    def _checked_outputs(message: Any, sender: str) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        if not isinstance(message, tuple | list) or len(message) != 2 or not isinstance(message[0], list) \
                or not message[0] or not all(isinstance(o, torch.Tensor) for o in message[0]) \
                or not (message[1] is None or isinstance(message[1], torch.Tensor)):
            raise ProtocolError(f"{sender} sent malformed pretraining outputs")
        return message[0], message[1]

    def _finetune(self, ctx: PartyContext, idx: np.ndarray) -> tuple[Losses, int]:
        local, opt, cache = self.local, self.state.optimizers[FINETUNE], self.caches[FINETUNE]
        lambda_sparse = self.method.options.lambda_sparse
        outputs: list[torch.Tensor] = []
        aux = []
        if local is not None:
            with ctx.meter.compute():
                own_out, own_m = local.finetune_forward(self.X[idx])
            outputs.append(own_out)
            if own_m is not None:
                aux.append(own_m)
        leaves: dict[str, torch.Tensor] = {}
        for g in self.passives:
            if g in self.online:
                out = _tensor(ctx.recv(g, FT_OUT), g, "bottom output").to(self.device).requires_grad_(True)
                leaves[g] = out
                cache.put(g, idx, [out])
            else:
                (out,) = cache.get(g, idx)
            outputs.append(out)
        with ctx.meter.compute():
            logits, _, m_loss = self.top.finetune_forward(outputs)
            loss = nn.functional.cross_entropy(logits, self.y[idx])
            reg = sum(aux) + (m_loss if m_loss is not None else 0)
            full = loss + lambda_sparse * reg if lambda_sparse > 0 else loss
            opt.zero_grad()
            full.backward()
            opt.step()
        for g, out in leaves.items():
            ctx.send(g, FT_BACK, out.grad)
        return {"loss": float(loss.detach())}, len(idx)

    def validation_loss(self, ctx: PartyContext, rows: np.ndarray) -> float | None:
        """Pretraining's validation loss: the sum of every part's reconstruction loss on ``rows``.

        Joint designs: each guest sends its bottom outputs (and masks) for the validation rows,
        receives its decoder slice and returns its loss, as in training but without gradients; every
        guest takes part, also one simulated offline for the epoch. tabnet-lt: the host's own local
        TabNet only (None when it holds no columns: the guests stop on their own).
        """
        local, ratio = self.local, self.method.options.pretraining_ratio
        x = self.X[rows]
        if not self.design.joint_pretraining:
            if local is None:
                return None
            with ctx.meter.compute(), torch.no_grad():
                return float(local.local_pretrain_loss(x, ratio, self._validation_masks()))
        outputs: list[list[torch.Tensor]] = []
        obfs: list[torch.Tensor] = []
        with ctx.meter.compute(), torch.no_grad():
            if local is not None:
                own_outs, own_obf = local.pretrain_forward(x, ratio, self._validation_masks())
                outputs.append(own_outs)
                obfs.append(own_obf)
        for g in self.passives:
            outs, mask = self._checked_outputs(ctx.recv(g, PRE_VAL_OUT), g)
            outs = [o.to(self.device) for o in outs]
            outputs.append(outs)
            obfs.append(mask.to(self.device) if mask is not None else torch.zeros_like(outs[0][:, :0]))
        with ctx.meter.compute(), torch.no_grad():
            dec = self.top.pretrain_forward(outputs, obfs)
            loss = 0.0 if local is None else float(reconstruction_loss(local.recon(dec[:, self.own_slice]), x, own_obf))
        for g in self.passives:
            ctx.send(g, PRE_VAL_DEC, dec[:, self.passive_slices[g]])
        for g in self.passives:
            value = ctx.recv(g, PRE_VAL_LOSS)
            if not isinstance(value, float):
                raise ProtocolError(f"{g} sent a malformed validation loss")
            loss += value
        return loss

    def end_phase(self, ctx: PartyContext, phase: Phase) -> None:
        if phase.name == PRETRAIN and not self.design.joint_pretraining:
            for g in self.passives:
                epochs = ctx.recv(g, PRE_DONE)
                if not isinstance(epochs, int):
                    raise ProtocolError(f"{g} sent a malformed end of pretraining")
                self.local_pretrain_epochs[g] = epochs

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        """Scores of ``X``; for the test set also the latent of every aligned row (latent quality)."""
        received = {g: ctx.recv(g, EVAL_OUT if phase == TEST else VAL_OUT) for g in self.passives}
        with ctx.meter.compute(), torch.no_grad():
            parts_eval, parts_train = [], []
            if self.local is not None:
                parts_eval.append(self.local.finetune_forward(as_tensor(X, ctx.device))[0])
                if phase == TEST:
                    parts_train.append(self.local.finetune_forward(self.X)[0])
            for g, message in received.items():
                if phase == TEST:
                    if not isinstance(message, tuple | list) or len(message) != 2:
                        raise ProtocolError(f"{g} sent malformed evaluation outputs")
                    parts_train.append(_tensor(message[0], g, "evaluation output").to(self.device))
                    message = message[1]
                parts_eval.append(_tensor(message, g, "evaluation output").to(self.device))
            logits, latent, _ = self.top.finetune_forward(parts_eval)
            if phase == TEST:
                self.latents = (self.top.finetune_forward(parts_train)[1], latent)
            return Evaluation(predict_scores(logits))

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        options, data = self.method.options, self.data
        assert evaluation is not None and data.y_train is not None and data.y_test is not None
        latent_train, latent_test = self.latents
        stats = {g: _checked_stats(ctx.recv(g, STATS), g) for g in self.all_passives}
        extra: dict[str, Any] = {"design": self.design.key, "latent_dim": int(latent_train.shape[1]),
                                 "centralised": self.design.raw_to_active, "decoder_split": options.decoder_split}
        if self.local_pretrain_epochs:  # tabnet-lt: the pretraining epochs each guest ran (early stopping)
            extra["local_pretrain_epochs"] = dict(self.local_pretrain_epochs)
        if options.latent_quality:
            latents = torch.cat([latent_train, latent_test]).cpu().numpy()
            labels = np.concatenate([data.y_train, data.y_test])
            extra["latent_quality"] = latent_quality(latents, labels, seed=self.config.seed,
                                                     test_size=options.quality_test_size)
        own = ctx.meter.snapshot()
        seconds = {f"{ph}_s": own.phase_seconds.get(ph, 0.0) for ph in PHASES}
        notes: dict[str, str] = {}
        if not self.design.joint_pretraining:  # tabnet-lt: each guest pretrains alone, all at once on their own
            # machines; the host's wall time would be its wait (none at all when the guests ran first in-process)
            seconds[f"{PRETRAIN}_s"] = max([seconds[f"{PRETRAIN}_s"],
                                            *(float(s["seconds"].get(PRETRAIN, 0.0)) for s in stats.values())])
            notes["pretrain_s"] = ("the slowest guest's own pretraining; in one process the guests pretrain while "
                                   "the host is still in its setup, so setup_s counts their pretraining too")
        phase_bytes = {ph: own.phase_bytes.get(ph, 0) + sum(int(s["bytes"].get(ph, 0)) for s in stats.values())
                       for ph in PHASES}
        extra["efficiency"] = {
            **seconds, "train_s": seconds["pretrain_s"] + seconds["finetune_s"], **({"notes": notes} if notes else {}),
            **{f"{ph}_bytes": phase_bytes[ph] for ph in PHASES},
            "params": {ctx.name: count_parameters(self.top, self.local),
                       **{g: int(s["params"]) for g, s in stats.items()}},
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "peak_rss_note": "whole process (all parties are threads of it); run one design per process to compare",
        }
        offline = {ph: {g: int(s[g].sum()) for g in self.passives} for ph, s in self.schedules.items()}
        extra["failures"] = {"fail_prob": options.fail_prob, "on_fail": options.on_fail, "offline_epochs": offline,
                             "substituted_batches": sum(c.hits for c in self.caches.values())}
        return ActiveOutcome(y_true=data.y_test, scores=evaluation.scores, history=record.history,
                             extra={**extra, **record.extra()})
