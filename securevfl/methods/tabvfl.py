"""TabVFL: one joint latent representation from a TabNet split between guests and a host.

Paper: "TabVFL: Improving Latent Representation in Vertical Federated Learning", IEEE SRDS 2024
(preprint). The active party is the host (labels, most of the network);
passive parties are guests. Four designs share one protocol loop:

``tabvfl``     guests: first BN + FC (+ RandomObfuscator masks when pretraining) and their slice of
               the reconstruction FC; host: PartialEnc (attention steps) + PartialDec (decoder
               feature transformers); guests' outputs are concatenated at the host.
``tabvfl-le``  guests: BN + the whole TabNet encoder; the host sums each decision step over guests
               (pretraining) and the guests' latents (finetuning).
``tabnet-lt``  guests pretrain a whole local TabNet autoencoder with no communication; finetuning
               concatenates their latents under one FC at the host (the prior-work design).
``tabnet-ct``  centralised reference: guests SEND THEIR RAW FEATURES to the host, which trains plain
               TabNet on all columns. Not private; a yardstick only.

Per pretraining batch (tabvfl): guest -> host ``(z, mask)`` where ``z = FC(BN(masked x))``; host ->
guest its slice of the decoder output; guest -> host the gradient of its own reconstruction loss
with respect to that slice plus the loss value (the host sums the losses: the gradient of the sum
is the sum of the gradients); host -> guest the gradient for ``z``. Reconstruction targets (the
guest's unmasked features) never leave the guest. Finetuning: guest -> host ``z = FC(BN(x))``,
host -> guest its gradient; loss = cross-entropy + lambda_sparse x M_loss.

Client failures (paper Sec. IV-E): with ``fail_prob`` p each guest is offline for a whole epoch
(never in a phase's first epoch); the host then reuses the rows it cached from that guest's last
transmission (``on_fail=cache``) or zeros (``on_fail=zeros``). Both sides derive the schedule and
the batch order from the run seed, so a returning guest works on the same batch as the host.
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.federation.runtime import PartyContext
from securevfl.methods._tabnet import (
    FeatureExtractor,
    PartialDecoder,
    TabNetShape,
    count_parameters,
    decoder_slices,
    derived_generator,
    encoder_to,
    make_encoder,
    obfuscate,
    reconstruction_layer,
    reconstruction_loss,
    reinit_tabnet,
)
from securevfl.methods._tabnet_quality import latent_quality
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

PRE_OUT = "tabvfl.pretrain.bottom"      # guest -> host: bottom outputs (+ obfuscation mask)
PRE_DEC = "tabvfl.pretrain.decoded"     # host -> guest: its slice of the decoder output
PRE_GRAD = "tabvfl.pretrain.recon_grad"  # guest -> host: d(own recon loss)/d(slice), loss value
PRE_BACK = "tabvfl.pretrain.bottom_grad"  # host -> guest: gradients for its bottom outputs
FT_OUT = "tabvfl.finetune.bottom"
FT_BACK = "tabvfl.finetune.bottom_grad"
EVAL_OUT = "tabvfl.eval.bottom"         # guest -> host: finetuned bottom outputs, train and test rows
PRE_DONE = "tabnet-lt.pretrain.done"   # tabnet-lt: guest -> host, local pretraining finished
STATS = "tabvfl.stats"                  # guest -> host: bytes it sent per phase, its parameter count
RAW = "tabnet-ct.raw_features"          # tabnet-ct only: raw features (centralised reference)

SPLIT, LOCAL_ENCODERS, LOCAL_TABNETS, CENTRAL = "split", "local-encoders", "local-tabnets", "central"
PHASES = ("setup", "pretrain", "finetune", "evaluate")


@dataclass(frozen=True)
class TabVFLOptions:
    """Options of the four designs; the latent dimension is ``embedding_dim`` (TabNet's n_d = n_a).

    ``pretrain_epochs``: 0 means as many as ``epochs`` (the finetuning epochs); ``decoder_split``:
    ``full`` (each guest's reconstruction FC reads all n_d decoder values: TabNet's layer split by
    output columns) or ``chunk`` (n_d cut into one chunk per guest, the paper's text).
    ``part_latent_dim`` (tabnet-lt only): latent width of each party's local TabNet (0: the
    latent dimension, so the concatenated latent is parties x latent dimension wide).
    """

    pretrain_epochs: int = 0
    n_steps: int = 3
    gamma: float = 1.3
    n_independent: int = 2
    n_shared: int = 2
    virtual_batch_size: int = 128
    momentum: float = 0.02
    mask_type: str = "sparsemax"
    pretraining_ratio: float = 0.2
    lambda_sparse: float = 1e-3
    decoder_split: str = "full"
    fail_prob: float = 0.0
    on_fail: str = "cache"
    latent_quality: bool = True
    quality_test_size: float = 0.3
    part_latent_dim: int = 0

    def __post_init__(self) -> None:
        if self.pretrain_epochs < 0:
            raise ConfigError(f"pretrain_epochs must be >= 0, got {self.pretrain_epochs}")
        if not 0 < self.pretraining_ratio < 1:
            raise ConfigError(f"pretraining_ratio must be in (0, 1), got {self.pretraining_ratio}")
        if self.lambda_sparse < 0:
            raise ConfigError(f"lambda_sparse must be >= 0, got {self.lambda_sparse}")
        if self.decoder_split not in ("full", "chunk"):
            raise ConfigError(f"decoder_split must be 'full' or 'chunk', got {self.decoder_split!r}")
        if not 0 <= self.fail_prob < 1:
            raise ConfigError(f"fail_prob must be in [0, 1), got {self.fail_prob}")
        if self.on_fail not in ("cache", "zeros"):
            raise ConfigError(f"on_fail must be 'cache' or 'zeros', got {self.on_fail!r}")
        if not 0 < self.quality_test_size < 1:
            raise ConfigError(f"quality_test_size must be in (0, 1), got {self.quality_test_size}")
        if self.part_latent_dim < 0:
            raise ConfigError(f"part_latent_dim must be >= 0, got {self.part_latent_dim}")

    def latent_width(self, design: str, embedding_dim: int) -> int:
        """TabNet's n_d for ``design``: ``part_latent_dim`` for each local TabNet of tabnet-lt if set."""
        return (self.part_latent_dim or embedding_dim) if design == LOCAL_TABNETS else embedding_dim

    def shape(self, latent_dim: int) -> TabNetShape:
        return TabNetShape(n_d=latent_dim, n_a=latent_dim, n_steps=self.n_steps, gamma=self.gamma,
                           n_independent=self.n_independent, n_shared=self.n_shared,
                           virtual_batch_size=self.virtual_batch_size, momentum=self.momentum,
                           mask_type=self.mask_type)


# -- schedules shared by every party (simulation, derived from the run seed) ------------------

def failure_schedule(seed: int, phase: str, epochs: int, guests: Sequence[str],
                     fail_prob: float) -> dict[str, np.ndarray]:
    """Per guest, which epochs of ``phase`` it is offline: each epoch independently with ``fail_prob``.

    Epoch 0 is always online (the host needs one transmission to cache, as in the paper). This is
    a simulation drawn from a seeded numpy Generator, not a secret.
    """
    rng = np.random.default_rng([seed, PHASES.index(phase), 0x7AB])
    offline = rng.random((epochs, len(guests))) < fail_prob
    offline[:1] = False
    return {g: offline[:, i].copy() for i, g in enumerate(guests)}


def epoch_batches(n_rows: int, batch_size: int, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """The agreed batches of one epoch, skipping a trailing batch of one row (batch norm needs two)."""
    return (idx for idx in batch_plan(n_rows, batch_size, seed, epoch) if len(idx) >= 2)


class ByteCounter:
    """Bytes a party sent, per phase (the meter counts per link; TabVFL's table wants per phase)."""

    def __init__(self) -> None:
        self.by_phase: dict[str, int] = defaultdict(int)
        self.phase = "setup"

    def send(self, ctx: PartyContext, dst: str, tag: str, value: Any) -> None:
        self.by_phase[self.phase] += ctx.send(dst, tag, value)


# -- the two halves of the network ------------------------------------------------------------

class PartyBottom(nn.Module):
    """One party's share: the bottom model over its own columns and its reconstruction FC.

    ``split`` / ``central``: first BN + FC (``central``: no FC, i.e. plain TabNet);
    ``local-encoders``: BN + a whole TabNet encoder; ``local-tabnets``: a whole local TabNet
    autoencoder (encoder, decoder, reconstruction FC).
    """

    def __init__(self, design: str, n_features: int, shape: TabNetShape, recon_in: int) -> None:
        super().__init__()
        self.design = design
        self.extractor = FeatureExtractor(n_features, fc=design != CENTRAL) if design in (SPLIT, CENTRAL) else None
        self.encoder = make_encoder(n_features, shape, first_bn=True) if self.extractor is None else None
        self.decoder = PartialDecoder(shape) if design == LOCAL_TABNETS else None
        self.recon = reconstruction_layer(recon_in, n_features)

    def to_device(self, device: Any) -> PartyBottom:
        self.to(device)
        if self.encoder is not None:
            encoder_to(self.encoder, device)
        return self

    @property
    def width(self) -> int:
        """Columns of the pretraining output sent to the host (split designs)."""
        return self.recon.out_features

    def bottom_parameters(self) -> list[nn.Parameter]:
        return list((self.extractor or self.encoder).parameters())  # type: ignore[union-attr]

    def pretrain_forward(self, x: torch.Tensor, ratio: float,
                         gen: torch.Generator) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Masked input through the bottom: ``([z], mask)`` or ``(encoder steps, mask)``."""
        masked, obf = obfuscate(x, ratio, gen)
        if self.extractor is not None:
            return [self.extractor(masked)], obf
        steps, _ = self.encoder(masked, prior=1 - obf)  # type: ignore[misc]
        return steps, obf

    def local_pretrain_loss(self, x: torch.Tensor, ratio: float, gen: torch.Generator) -> torch.Tensor:
        """``local-tabnets``: a whole TabNet pretraining step on the party's own columns."""
        steps, obf = self.pretrain_forward(x, ratio, gen)
        return reconstruction_loss(self.recon(self.decoder(steps)), x, obf)  # type: ignore[misc]

    def finetune_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Unmasked input: ``(z, None)`` for split designs, ``(latent, M_loss)`` for local encoders."""
        if self.extractor is not None:
            return self.extractor(x), None
        steps, m_loss = self.encoder(x)  # type: ignore[misc]
        return torch.stack(steps, dim=0).sum(dim=0), m_loss


class HostTop(nn.Module):
    """The host's share: PartialEnc + PartialDec (split), PartialDec (local encoders), final FC."""

    def __init__(self, design: str, widths: Sequence[int], shape: TabNetShape, n_classes: int) -> None:
        super().__init__()
        self.design = design
        self.shape = shape
        split = design in (SPLIT, CENTRAL)
        self.encoder = make_encoder(sum(widths), shape, first_bn=False) if split else None
        self.decoder = PartialDecoder(shape) if design != LOCAL_TABNETS else None
        latent_in = sum(widths) if design == LOCAL_TABNETS else shape.n_d
        self.final = nn.Linear(latent_in, n_classes, bias=False)

    def to_device(self, device: Any) -> HostTop:
        self.to(device)
        if self.encoder is not None:
            encoder_to(self.encoder, device)
        return self

    def pretrain_parameters(self) -> list[nn.Parameter]:
        return [p for m in (self.encoder, self.decoder) if m is not None for p in m.parameters()]

    def finetune_parameters(self) -> list[nn.Parameter]:
        return ([] if self.encoder is None else list(self.encoder.parameters())) + list(self.final.parameters())

    def pretrain_forward(self, outputs: Sequence[Sequence[torch.Tensor]],
                         masks: Sequence[torch.Tensor]) -> torch.Tensor:
        """Parts' pretraining outputs -> the decoder output (n_d columns) to be sliced per part."""
        if self.encoder is not None:
            z = torch.cat([o[0] for o in outputs], dim=1)
            steps, _ = self.encoder(z, prior=1 - torch.cat(list(masks), dim=1))
        else:
            steps = [torch.stack([o[s] for o in outputs], dim=0).sum(dim=0) for s in range(self.shape.n_steps)]
        return self.decoder(steps)  # type: ignore[misc]

    def finetune_forward(self, outputs: Sequence[torch.Tensor]
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Parts' finetuning outputs -> ``(logits, latent, M_loss or None)``."""
        m_loss = None
        if self.encoder is not None:
            steps, m_loss = self.encoder(torch.cat(list(outputs), dim=1))
            latent = torch.stack(steps, dim=0).sum(dim=0)
        elif self.design == LOCAL_TABNETS:
            latent = torch.cat(list(outputs), dim=1)
        else:
            latent = torch.stack(list(outputs), dim=0).sum(dim=0)
        return self.final(latent), latent, m_loss


def _recon_in(design: str, shape: TabNetShape, parts: int, split_mode: str) -> list[int]:
    if design == LOCAL_TABNETS:
        return [shape.n_d] * parts
    return [s.stop - s.start for s in decoder_slices(shape.n_d, parts, split_mode)]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# -- guest role --------------------------------------------------------------------------------

def guest_role(data: PartyData, config: TrainConfig, opts: TabVFLOptions, design: str, recon_in: int) -> Role:
    """A guest (passive party): its bottom model and reconstruction FC; only its own columns."""

    def role(ctx: PartyContext) -> None:
        counter = ByteCounter()
        if design == CENTRAL:  # the centralised reference: raw features go to the host
            counter.send(ctx, ctx.active, RAW, (data.X_train, data.X_test))
            ctx.send(ctx.active, STATS, {"bytes": dict(counter.by_phase), "params": 0})
            return
        device = ctx.device
        shape = opts.shape(opts.latent_width(design, config.embedding_dim))
        model = reinit_tabnet(PartyBottom(design, data.n_features, shape, recon_in),
                              derived_generator(config.seed, ctx.name, "init")).to_device(device)
        masks = derived_generator(config.seed, ctx.name, "obfuscation")
        X = as_tensor(data.X_train, device)
        pre_epochs = opts.pretrain_epochs or config.epochs
        pre_off = failure_schedule(config.seed, "pretrain", pre_epochs, ctx.passives, opts.fail_prob)[ctx.name]
        ft_off = failure_schedule(config.seed, "finetune", config.epochs, ctx.passives, opts.fail_prob)[ctx.name]

        counter.phase = ctx.stage = "pretrain"
        model.train()
        opt = torch.optim.Adam(model.parameters(), lr=config.lr)
        for epoch in range(pre_epochs):
            if pre_off[epoch] and design != LOCAL_TABNETS:
                continue
            for idx in epoch_batches(len(X), config.batch_size, config.seed, epoch):
                x = X[idx]
                if design == LOCAL_TABNETS:
                    with ctx.meter.compute():
                        loss = model.local_pretrain_loss(x, opts.pretraining_ratio, masks)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                    continue
                with ctx.meter.compute():
                    outs, obf = model.pretrain_forward(x, opts.pretraining_ratio, masks)
                sent_mask = obf if design == SPLIT else None
                counter.send(ctx, ctx.active, PRE_OUT, ([o.detach() for o in outs], sent_mask))
                dec = ctx.recv(ctx.active, PRE_DEC).to(device).requires_grad_(True)
                with ctx.meter.compute():
                    opt.zero_grad()
                    loss = reconstruction_loss(model.recon(dec), x, obf)
                    loss.backward()
                counter.send(ctx, ctx.active, PRE_GRAD, (dec.grad, float(loss.detach())))
                grads = ctx.recv(ctx.active, PRE_BACK)
                with ctx.meter.compute():
                    torch.autograd.backward(outs, [g.to(device) for g in grads])
                    opt.step()

        if design == LOCAL_TABNETS:  # the host federates the phases: it waits for every local pretraining
            counter.send(ctx, ctx.active, PRE_DONE, pre_epochs)

        counter.phase = ctx.stage = "finetune"
        opt = torch.optim.Adam(model.bottom_parameters(), lr=config.lr)
        for epoch in range(config.epochs):
            if ft_off[epoch]:
                continue
            for idx in epoch_batches(len(X), config.batch_size, config.seed, pre_epochs + epoch):
                with ctx.meter.compute():
                    out, m_loss = model.finetune_forward(X[idx])
                counter.send(ctx, ctx.active, FT_OUT, out.detach())
                grad = ctx.recv(ctx.active, FT_BACK).to(device)
                with ctx.meter.compute():
                    opt.zero_grad()
                    if m_loss is not None and opts.lambda_sparse > 0:
                        torch.autograd.backward([out, opts.lambda_sparse * m_loss], [grad, None])
                    else:
                        out.backward(grad)
                    opt.step()

        counter.phase = ctx.stage = "evaluate"
        with ctx.meter.compute(), torch.no_grad():
            model.eval()
            train_out = model.finetune_forward(X)[0]
            test_out = model.finetune_forward(as_tensor(data.X_test, device))[0]
        counter.send(ctx, ctx.active, EVAL_OUT, (train_out, test_out))
        ctx.send(ctx.active, STATS, {"bytes": dict(counter.by_phase), "params": count_parameters(model)})

    return role


# -- host role ---------------------------------------------------------------------------------

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

    def put(self, guest: str, idx: np.ndarray, tensors: Sequence[torch.Tensor]) -> None:
        if guest not in self._store:
            self._store[guest] = [torch.zeros((self.n_rows, *t.shape[1:]), dtype=t.dtype, device=t.device)
                                  for t in tensors]
        for slot, t in zip(self._store[guest], tensors):
            slot[torch.as_tensor(idx, device=t.device)] = t.detach()

    def get(self, guest: str, idx: np.ndarray) -> list[torch.Tensor]:
        """Cached rows (``cache``) or zeros of the same shapes (``zeros``)."""
        self.hits += 1
        slots = self._store[guest]
        rows = [s[torch.as_tensor(idx, device=s.device)] for s in slots]
        return rows if self.on_fail == "cache" else [torch.zeros_like(r) for r in rows]


def host_role(data: PartyData, config: TrainConfig, opts: TabVFLOptions, design: str,
              guest_features: dict[str, int], recon_in: list[int]) -> Role:
    """The host (active party): labels, PartialEnc/PartialDec or the aggregation, final FC."""
    guests = tuple(guest_features)

    def role(ctx: PartyContext) -> ActiveOutcome:
        device = ctx.device
        shape = opts.shape(opts.latent_width(design, config.embedding_dim))
        counter = ByteCounter()
        timings: dict[str, float] = {}
        started = time.perf_counter()
        X_train, X_test = data.X_train, data.X_test
        remote = guests
        if design == CENTRAL:
            ctx.stage = "receive raw features"
            raws = [ctx.recv(g, RAW) for g in guests]
            X_train = np.concatenate([X_train] + [np.asarray(r[0]) for r in raws], axis=1)
            X_test = np.concatenate([X_test] + [np.asarray(r[1]) for r in raws], axis=1)
            remote = ()
        n_own = X_train.shape[1]
        if design == SPLIT or design == CENTRAL:
            widths = ([n_own] if n_own else []) + [guest_features[g] for g in remote]
        else:
            widths = ([shape.n_d] if n_own else []) + [shape.n_d for _ in remote]
        if not widths:
            raise ConfigError("no party holds features")
        local = None
        if n_own:
            local = reinit_tabnet(PartyBottom(design, n_own, shape, recon_in[0]),
                                  derived_generator(config.seed, ctx.name, "init")).to_device(device)
        top = reinit_tabnet(HostTop(design, widths, shape, data.n_classes),
                            derived_generator(config.seed, ctx.name, "top")).to_device(device)
        slices = (decoder_slices(shape.n_d, len(widths), opts.decoder_split)
                  if design != LOCAL_TABNETS else [])
        own_slice = slices[0] if (local is not None and slices) else None
        guest_slices = dict(zip(remote, slices[1:] if local is not None else slices))
        masks = derived_generator(config.seed, ctx.name, "obfuscation")
        X = as_tensor(X_train, device)
        y = torch.as_tensor(data.y_train, dtype=torch.long, device=device)
        pre_epochs = opts.pretrain_epochs or config.epochs
        total_epochs = pre_epochs + config.epochs
        schedules = {ph: failure_schedule(config.seed, ph, n, remote, opts.fail_prob)
                     for ph, n in (("pretrain", pre_epochs), ("finetune", config.epochs))}
        offline_epochs = {ph: {g: int(s[g].sum()) for g in remote} for ph, s in schedules.items()}
        history: list[dict[str, float]] = []
        timings["setup_s"] = time.perf_counter() - started

        # -- pretraining ----------------------------------------------------------------------
        counter.phase = ctx.stage = "pretrain"
        started = time.perf_counter()
        cache = RowCache(len(X), opts.on_fail)
        params = top.pretrain_parameters() + (list(local.parameters()) if local is not None else [])
        opt = torch.optim.Adam(params, lr=config.lr) if params else None
        top.train()
        for epoch in range(pre_epochs):
            total, count = 0.0, 0
            online = [g for g in remote if not schedules["pretrain"][g][epoch]]
            for idx in epoch_batches(len(X), config.batch_size, config.seed, epoch):
                if design == LOCAL_TABNETS:  # no communication; the host pretrains its own columns only
                    if local is not None:
                        with ctx.meter.compute():
                            loss = local.local_pretrain_loss(X[idx], opts.pretraining_ratio, masks)
                            opt.zero_grad()  # type: ignore[union-attr]
                            loss.backward()
                            opt.step()  # type: ignore[union-attr]
                        total += float(loss.detach()) * len(idx)
                        count += len(idx)
                    continue
                outputs: list[list[torch.Tensor]] = []
                obfs: list[torch.Tensor] = []
                own_obf = None
                if local is not None:
                    with ctx.meter.compute():
                        own_outs, own_obf = local.pretrain_forward(X[idx], opts.pretraining_ratio, masks)
                    outputs.append(own_outs)
                    obfs.append(own_obf)
                leaves: dict[str, list[torch.Tensor]] = {}
                for g in remote:
                    if g in online:
                        outs, mask = ctx.recv(g, PRE_OUT)
                        outs = [o.to(device).requires_grad_(True) for o in outs]
                        mask = mask.to(device) if mask is not None else torch.zeros_like(outs[0][:, :0])
                        leaves[g] = outs
                        cache.put(g, idx, [*outs, mask])
                    else:
                        *outs, mask = cache.get(g, idx)
                    outputs.append(outs)
                    obfs.append(mask)
                with ctx.meter.compute():
                    dec = top.pretrain_forward(outputs, obfs)
                for g in leaves:
                    counter.send(ctx, g, PRE_DEC, dec[:, guest_slices[g]].detach())
                roots, root_grads = [], []
                batch_loss = 0.0
                for g in leaves:
                    grad, loss_value = ctx.recv(g, PRE_GRAD)
                    roots.append(dec[:, guest_slices[g]])
                    root_grads.append(grad.to(device))
                    batch_loss += loss_value
                with ctx.meter.compute():
                    opt.zero_grad()  # type: ignore[union-attr]
                    if local is not None:
                        own_loss = reconstruction_loss(local.recon(dec[:, own_slice]), X[idx], own_obf)
                        roots.append(own_loss)
                        root_grads.append(None)
                        batch_loss += float(own_loss.detach())
                    if roots:
                        torch.autograd.backward(roots, root_grads)
                        opt.step()  # type: ignore[union-attr]
                for g, outs in leaves.items():
                    counter.send(ctx, g, PRE_BACK, [o.grad if o.grad is not None else torch.zeros_like(o)
                                                    for o in outs])
                total += batch_loss * len(idx)
                count += len(idx)
            history.append({"epoch": epoch + 1, "pretrain_loss": total / max(count, 1)})
            ctx.progress(epoch=epoch + 1, epochs=total_epochs, loss=history[-1]["pretrain_loss"])
        if design == LOCAL_TABNETS:
            for g in remote:
                ctx.recv(g, PRE_DONE)
        timings["pretrain_s"] = time.perf_counter() - started
        substituted = cache.hits

        # -- finetuning -----------------------------------------------------------------------
        counter.phase = ctx.stage = "finetune"
        started = time.perf_counter()
        cache = RowCache(len(X), opts.on_fail)
        params = top.finetune_parameters() + (local.bottom_parameters() if local is not None else [])
        opt = torch.optim.Adam(params, lr=config.lr)
        loss_fn = nn.CrossEntropyLoss()
        for epoch in range(config.epochs):
            total, count = 0.0, 0
            online = [g for g in remote if not schedules["finetune"][g][epoch]]
            for idx in epoch_batches(len(X), config.batch_size, config.seed, pre_epochs + epoch):
                outputs_ft: list[torch.Tensor] = []
                aux = []
                if local is not None:
                    with ctx.meter.compute():
                        own_out, own_m = local.finetune_forward(X[idx])
                    outputs_ft.append(own_out)
                    if own_m is not None:
                        aux.append(own_m)
                leaves_ft: dict[str, torch.Tensor] = {}
                for g in remote:
                    if g in online:
                        out = ctx.recv(g, FT_OUT).to(device).requires_grad_(True)
                        leaves_ft[g] = out
                        cache.put(g, idx, [out])
                    else:
                        (out,) = cache.get(g, idx)
                    outputs_ft.append(out)
                with ctx.meter.compute():
                    logits, _, m_loss = top.finetune_forward(outputs_ft)
                    loss = loss_fn(logits, y[idx])
                    reg = sum(aux) + (m_loss if m_loss is not None else 0)
                    full = loss + opts.lambda_sparse * reg if opts.lambda_sparse > 0 else loss
                    opt.zero_grad()
                    full.backward()
                    opt.step()
                for g, out in leaves_ft.items():
                    counter.send(ctx, g, FT_BACK, out.grad)
                total += float(loss.detach()) * len(idx)
                count += len(idx)
            history.append({"epoch": pre_epochs + epoch + 1, "train_loss": total / max(count, 1)})
            ctx.progress(epoch=pre_epochs + epoch + 1, epochs=total_epochs, loss=history[-1]["train_loss"])
        timings["finetune_s"] = time.perf_counter() - started

        # -- evaluation: test scores and the latent set of every aligned row -----------------
        counter.phase = ctx.stage = "evaluate"
        started = time.perf_counter()
        received = {g: ctx.recv(g, EVAL_OUT) for g in remote}
        with ctx.meter.compute(), torch.no_grad():
            top.eval()
            parts_train, parts_test = [], []
            if local is not None:
                local.eval()
                parts_train.append(local.finetune_forward(X)[0])
                parts_test.append(local.finetune_forward(as_tensor(X_test, device))[0])
            for g in remote:
                parts_train.append(received[g][0].to(device))
                parts_test.append(received[g][1].to(device))
            _, latent_train, _ = top.finetune_forward(parts_train)
            logits_test, latent_test, _ = top.finetune_forward(parts_test)
            scores = predict_scores(logits_test)
        stats = {g: ctx.recv(g, STATS) for g in guests}
        extra: dict[str, Any] = {"design": design, "latent_dim": int(latent_train.shape[1]),
                                 "centralised": design == CENTRAL}
        if opts.latent_quality:
            latents = torch.cat([latent_train, latent_test]).cpu().numpy()
            labels = np.concatenate([data.y_train, data.y_test])
            extra["latent_quality"] = latent_quality(latents, labels, seed=config.seed,
                                                     test_size=opts.quality_test_size)
        timings["evaluate_s"] = time.perf_counter() - started
        phase_bytes = {ph: counter.by_phase.get(ph, 0) + sum(s["bytes"].get(ph, 0) for s in stats.values())
                       for ph in PHASES}
        extra["efficiency"] = {
            **timings, "train_s": timings["pretrain_s"] + timings["finetune_s"],
            "pretrain_bytes": phase_bytes["pretrain"], "finetune_bytes": phase_bytes["finetune"],
            "setup_bytes": phase_bytes["setup"], "evaluate_bytes": phase_bytes["evaluate"],
            "params": {ctx.name: count_parameters(top, local), **{g: int(s["params"]) for g, s in stats.items()}},
            "peak_rss_mb": _peak_rss_mb(),
            "peak_rss_note": "whole process (all parties are threads of it); run one design per process to compare",
        }
        extra["failures"] = {"fail_prob": opts.fail_prob, "on_fail": opts.on_fail, "offline_epochs": offline_epochs,
                             "substituted_batches": substituted + cache.hits}
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history, extra=extra)

    return role


# -- the four methods --------------------------------------------------------------------------

class _TabNetDesign(Method):
    design = SPLIT
    Options = TabVFLOptions

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        if not scenario.passives:
            raise ConfigError(f"{self.name} needs at least one guest (passive party)")
        shape = self.options.shape(self.options.latent_width(self.design, self.config.embedding_dim))
        host = scenario.party_data(scenario.active)
        guest_data = {g: scenario.party_data(g) for g in scenario.passives}
        has_own = host.n_features > 0
        if self.design == CENTRAL:
            recon = [shape.n_d]
        else:
            recon = _recon_in(self.design, shape, len(guest_data) + int(has_own), self.options.decoder_split)
        guest_recon = recon[1:] if (has_own and self.design != CENTRAL) else recon
        roles: dict[str, Role] = {}
        for i, (g, d) in enumerate(guest_data.items()):
            roles[g] = guest_role(d, self.config, self.options, self.design,
                                  guest_recon[i] if self.design != CENTRAL else 0)
        roles[scenario.active] = host_role(host, self.config, self.options, self.design,
                                           {g: d.n_features for g, d in guest_data.items()}, recon)
        return roles


@register_method
class TabVFL(_TabNetDesign):
    """TabNet split between guests (BN + FC, reconstruction FC) and the host (PartialEnc, PartialDec)."""

    name = "tabvfl"
    summary = "TabVFL: split TabNet (guests BN+FC, host PartialEnc/PartialDec), masked pretraining + finetuning"
    design = SPLIT


@register_method
class TabVFLLocalEncoders(_TabNetDesign):
    """TabVFL-LE baseline: a whole TabNet encoder per guest, decision steps summed at the host."""

    name = "tabvfl-le"
    summary = "TabVFL-LE baseline: full TabNet encoder per guest, step outputs / latents summed at the host"
    design = LOCAL_ENCODERS


@register_method
class TabNetLocal(_TabNetDesign):
    """LT baseline: local TabNet autoencoders per guest, latents concatenated under one FC at the host."""

    name = "tabnet-lt"
    summary = "LT baseline: local TabNet autoencoder per guest, concatenated latents, FC at the host"
    design = LOCAL_TABNETS


@register_method
class TabNetCentral(_TabNetDesign):
    """CT baseline: the guests send raw features to the host, which trains plain TabNet. Not private."""

    name = "tabnet-ct"
    summary = "CT reference: centralised TabNet on all features (guests send RAW features; not private)"
    design = CENTRAL
