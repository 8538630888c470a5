"""The four TabNet designs: how the network is cut between the guests and the host.

``tabvfl``     guests: first BN + FC (+ RandomObfuscator masks when pretraining) and their slice of
               the reconstruction FC; host: PartialEnc (attention steps) + PartialDec (decoder
               feature transformers); guests' outputs are concatenated at the host.
``tabvfl-le``  guests: BN + the whole TabNet encoder; the host sums each decision step over guests
               (pretraining) and the guests' latents (finetuning).
``tabnet-lt``  guests pretrain a whole local TabNet autoencoder with no communication; finetuning
               concatenates their latents under one FC at the host (the prior-work design).
``tabnet-ct``  centralised reference: guests SEND THEIR RAW FEATURES to the host, which trains plain
               TabNet on all columns. Not private; a yardstick only.

A :class:`Design` names one of them and answers what the protocol needs to know (does pretraining
exchange messages, is the obfuscation mask sent, what the host's input widths are); the modules
(:class:`PartyBottom`, :class:`HostTop`) are built from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from securevfl.methods.tabvfl.tabnet import (
    FeatureExtractor,
    PartialDecoder,
    TabNetShape,
    decoder_slices,
    encoder_to,
    make_encoder,
    obfuscate,
    reconstruction_layer,
    reconstruction_loss,
)

SPLIT, LOCAL_ENCODERS, LOCAL_TABNETS, CENTRAL = "split", "local-encoders", "local-tabnets", "central"


@dataclass(frozen=True)
class Design:
    """One way of cutting TabNet; ``key`` is what :class:`PartyBottom` and :class:`HostTop` build."""

    key: str
    joint_pretraining: bool = True   # pretraining exchanges messages (else every party pretrains alone)
    sends_mask: bool = False         # a guest sends its obfuscation mask (PartialEnc's attention prior)
    raw_to_active: bool = False        # guests send their raw features; only the host trains

    def latent_width(self, embedding_dim: int, part_latent_dim: int, parts: int) -> int:
        """TabNet's n_d; for tabnet-lt, that of each of the ``parts`` local TabNets.

        tabnet-lt: ``part_latent_dim`` if set, else ``embedding_dim // parts`` (at least 1), so the
        concatenated latent is about ``embedding_dim`` wide, as the paper's LT (each of 5 guests a
        fifth, Sec. V-C4).
        """
        if self.key != LOCAL_TABNETS:
            return embedding_dim
        return part_latent_dim or max(1, embedding_dim // parts)

    def active_widths(self, n_own: int, passive_features: Sequence[int], shape: TabNetShape) -> list[int]:
        """Widths of the parts the host combines: raw columns (split, central) or latents."""
        if self.key in (SPLIT, CENTRAL):
            return ([n_own] if n_own else []) + list(passive_features)
        return ([shape.n_d] if n_own else []) + [shape.n_d for _ in passive_features]

    def recon_in(self, shape: TabNetShape, parts: int, split_mode: str) -> list[int]:
        """Input width of each part's reconstruction FC."""
        if self.key == CENTRAL:
            return [shape.n_d]
        if self.key == LOCAL_TABNETS:
            return [shape.n_d] * parts
        return [s.stop - s.start for s in decoder_slices(shape.n_d, parts, split_mode)]

    def bottom(self, n_features: int, shape: TabNetShape, recon_in: int) -> PartyBottom:
        return PartyBottom(self.key, n_features, shape, recon_in)

    def top(self, widths: Sequence[int], shape: TabNetShape, n_classes: int) -> HostTop:
        return HostTop(self.key, widths, shape, n_classes)


TABVFL = Design(SPLIT, sends_mask=True)
TABVFL_LE = Design(LOCAL_ENCODERS)
TABNET_LT = Design(LOCAL_TABNETS, joint_pretraining=False)
TABNET_CT = Design(CENTRAL, raw_to_active=True)


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
