"""APC-VFL building blocks: symmetric SELU autoencoders, early-stopped training, the loss of Eq. 5.

Everything here is local to one party (no communication): the methods in ``apcvfl.py`` and
``vfedtrans.py`` call these functions inside their roles. Paper: Irureta et al., "Towards Active
Participant Centric Vertical Federated Learning: Some Representations May Be All You Need"
(Sec. 4, Table 3, Appendix B).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from securevfl.errors import ConfigError
from securevfl.methods.base import batch_plan
from securevfl.methods.engine.local_fit import StepLoss, fit_local
from securevfl.networks import init_parameters
from securevfl.networks.mlp import parse_widths
from securevfl.seeding import party_generator

DISTILL_LOSSES = ("mse", "mae")


class SymmetricAutoencoder(nn.Module):
    """A symmetric autoencoder with SELU activations (Table 3 of the paper).

    Encoder ``in -> widths[0] -> ... -> widths[-1]`` (SELU after every layer, latent included)
    and the mirrored decoder back to ``in`` (linear output, since inputs are standardised).
    """

    def __init__(self, in_dim: int, widths: tuple[int, ...]) -> None:
        super().__init__()
        if in_dim < 1:
            raise ConfigError("an autoencoder needs at least one input feature")
        enc: list[nn.Module] = []
        dims = [in_dim, *widths]
        for a, b in zip(dims[:-1], dims[1:]):
            enc += [nn.Linear(a, b), nn.SELU()]
        dec: list[nn.Module] = []
        back = dims[::-1]
        for i, (a, b) in enumerate(zip(back[:-1], back[1:])):
            dec.append(nn.Linear(a, b))
            if i < len(back) - 2:
                dec.append(nn.SELU())
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)
        self.in_dim, self.latent_dim = in_dim, widths[-1]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encoder(x)
        return self.decoder(z), z

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.Tensor:
        self.eval()
        return self.encoder(x)


def autoencoder_widths(model: SymmetricAutoencoder) -> list[int]:
    """The encoder's layer widths, the latent last (with ``model.in_dim``, what rebuilds it)."""
    return [m.out_features for m in model.encoder if isinstance(m, nn.Linear)]


def build_autoencoder(in_dim: int, widths: tuple[int, ...], seed: int, name: str) -> SymmetricAutoencoder:
    """A symmetric autoencoder initialised from the party's own generator (no global seeding)."""
    model = SymmetricAutoencoder(in_dim, widths)
    init_parameters(model, party_generator(seed, name))
    return model


def distillation_term(z: torch.Tensor, z_teacher: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-row distillation distance of Eq. 5: ``||z_A - g3(x)||_2^2`` (mse) or ``|z_A - g3(x)|_1`` (mae)."""
    diff = z - z_teacher
    if kind == "mse":
        return diff.pow(2).sum(dim=1)
    if kind == "mae":
        return diff.abs().sum(dim=1)
    raise ConfigError(f"distill_loss must be one of {', '.join(DISTILL_LOSSES)}, got {kind!r}")


def apc_loss(x: torch.Tensor, x_hat: torch.Tensor, z: torch.Tensor, z_teacher: torch.Tensor | None,
             aligned: torch.Tensor | None, lam: float, kind: str = "mse") -> torch.Tensor:
    """Eq. 5 averaged over the batch.

    Reconstruction for every row, plus ``lam`` times the distillation term for aligned rows only
    (``aligned`` is a boolean mask; unaligned rows' teacher entries are never read, so they may
    hold anything).
    """
    per_row = (x - x_hat).pow(2).sum(dim=1)
    if z_teacher is not None and aligned is not None and lam > 0 and bool(aligned.any()):
        distill = torch.zeros_like(per_row)
        distill[aligned] = distillation_term(z[aligned], z_teacher[aligned], kind)
        per_row = per_row + lam * distill
    return per_row.mean()


@dataclass(frozen=True)
class FitSettings:
    """How one autoencoder trains: Adam, mini-batches, early stopping on a validation split."""

    max_epochs: int = 200
    batch_size: int = 8
    patience: int = 10
    val_fraction: float = 0.1
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_epochs < 1 or self.batch_size < 1 or self.patience < 1:
            raise ConfigError("max_epochs, batch_size and patience must be >= 1")
        if not 0 <= self.val_fraction < 1:
            raise ConfigError(f"val_fraction must be in [0, 1), got {self.val_fraction}")


@dataclass(frozen=True)
class FitResult:
    """Where training stopped and the losses it saw."""

    epochs: int
    best_epoch: int
    best_loss: float
    train_loss: float


def _tag_seed(seed: int, tag: str) -> list[int]:
    return [seed, int.from_bytes(hashlib.sha256(tag.encode()).digest()[:4], "big")]


def validation_split(n_rows: int, fraction: float, seed: int, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/validation row split (not secret); no validation rows when too few rows."""
    n_val = int(round(n_rows * fraction))
    order = np.random.default_rng(_tag_seed(seed, tag)).permutation(n_rows)
    if n_val < 1 or n_rows - n_val < 1:
        return np.arange(n_rows), np.arange(0)
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def fit_autoencoder(model: SymmetricAutoencoder, X: torch.Tensor, settings: FitSettings, tag: str, *,
                    teacher: torch.Tensor | None = None, aligned: torch.Tensor | None = None,
                    lam: float = 0.0, kind: str = "mse") -> FitResult:
    """Train ``model`` on rows ``X`` with the Eq. 5 loss (plain reconstruction without a teacher).

    Early stopping on the validation loss (training loss when there is no validation split) with
    ``settings.patience``; the best weights are restored at the end.
    """
    train_rows, val_rows = validation_split(len(X), settings.val_fraction, settings.seed, tag)
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)
    tr = torch.as_tensor(train_rows, dtype=torch.long, device=X.device)
    va = torch.as_tensor(val_rows, dtype=torch.long, device=X.device)

    def loss_on(rows: torch.Tensor) -> torch.Tensor:
        x_hat, z = model(X[rows])
        t = None if teacher is None else teacher[rows]
        m = None if aligned is None else aligned[rows]
        return apc_loss(X[rows], x_hat, z, t, m, lam, kind)

    seed = _tag_seed(settings.seed, tag)[1]

    def batches(epoch: int) -> Iterator[np.ndarray]:
        return batch_plan(len(tr), settings.batch_size, seed, epoch + 1)  # the batch orders of epochs 1, 2, ...

    def step(idx: np.ndarray) -> StepLoss:
        return StepLoss(loss_on(tr[torch.as_tensor(idx, device=X.device)]), weight=len(idx))

    def validation_loss() -> float:
        return float(loss_on(va))

    fit = fit_local([model], opt, settings.max_epochs, batches, step, patience=settings.patience,
                    validation_loss=validation_loss if len(va) else None, min_improvement=1e-12)
    return FitResult(epochs=fit.epochs, best_epoch=fit.best_epoch, best_loss=fit.best_loss, train_loss=fit.last())


__all__ = ["DISTILL_LOSSES", "FitResult", "FitSettings", "SymmetricAutoencoder", "apc_loss", "autoencoder_widths",
           "build_autoencoder", "distillation_term", "fit_autoencoder", "parse_widths", "validation_split"]
