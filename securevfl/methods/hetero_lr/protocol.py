"""hetero-lr's shared pieces: options, message tags, the arbiter's key, masked decryption, θ_k as a module.

Training (:mod:`.sides`) and scoring with a saved model (:mod:`.scoring`) both use them; neither
imports the other's module for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.engine.objective import REGRESSION, Objective
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PaillierBackend,
    PaillierPrivateKey,
    PaillierPublicKey,
    create_backend,
)
from securevfl.privacy.paillier.registry import check_backend_and_key
from securevfl.privacy.paillier.ring_masks import RandBelow, add_ring_masks, draw_ring_masks, remove_ring_masks
from securevfl.settings import setting

ARBITER = "arbiter"

PUBLIC_KEY = "hetero-lr.setup.public_key"
ENC_SCORE = "hetero-lr.train.enc_score"
RESIDUAL = "hetero-lr.train.enc_residual"
MASKED_GRADIENT = "hetero-lr.train.masked_gradient"
UNMASKED = "hetero-lr.train.decrypted_masked"
MASKED_LOSS = "hetero-lr.train.masked_loss"
TEST_SCORE = "hetero-lr.test.score"
#: The module name of a party's saved weights θ_k (:class:`Theta`).
THETA = "theta"
#: The module name of the active party's absent biases (one per passive party, :class:`Theta`): trained on
#: every row (``require_all_parties`` off), added where that passive party does not hold the row.
ABSENT = "absent"

#: The arbiter's key pair (tests pass a small one in).
KeyPair = tuple[PaillierPublicKey, PaillierPrivateKey]

LOG2 = math.log(2.0)


@dataclass(frozen=True)
class HeteroLROptions:
    """Options of ``hetero-lr``.

    ``lr``: SGD step size (0.15, FATE's default; the global ``--lr`` is for Adam-trained networks
    and is refused here). ``l2``: L2 penalty added to the gradient in the clear. ``backend``:
    Paillier implementation, ``fast`` or ``phe``. ``key_bits``: 2048 or 3072; smaller keys need
    ``insecure_allow_small_key=True`` (tests only). ``frac_bits``: fixed-point fraction bits of
    encrypted values and plaintext multipliers. ``fit_intercept``: intercept at the active party.
    ``monitor_loss``: encrypted Taylor loss per epoch (with exactly one passive party).
    ``workers``: processes for the ``fast`` backend's large batches (1 = in the party's thread).
    """

    lr: float = setting(0.15, help="SGD step size, > 0 (the global --lr is refused).")
    l2: float = setting(0.0, help="L2 penalty on the weights, >= 0.")
    backend: str = setting("fast", help="Paillier implementation: fast (gmpy2) | phe (python-paillier).")
    key_bits: int = setting(
        2048, help="Arbiter's Paillier key size: 2048 | 3072 (smaller only with insecure_allow_small_key).")
    insecure_allow_small_key: bool = setting(False, help="Allow test-sized keys (even, >= 512 bits); tests only.")
    frac_bits: int = setting(32, help="Fixed-point fraction bits of encrypted values and plaintext multipliers, 8..64.")
    fit_intercept: bool = setting(True, help="Fit an intercept, at the active party.")
    monitor_loss: bool = setting(
        True, help="Compute the encrypted Taylor loss every epoch (with exactly one passive party).")
    workers: int = setting(1, help="Processes for the fast backend's large batches (1: in the party's thread).")

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not self.l2 >= 0:
            raise ConfigError(f"l2 must be >= 0, got {self.l2}")
        check_backend_and_key(self.backend, self.key_bits, self.insecure_allow_small_key)
        if not 8 <= self.frac_bits <= 64:
            raise ConfigError(f"frac_bits must be in [8, 64], got {self.frac_bits}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")


def make_backend(options: HeteroLROptions, public_key: PaillierPublicKey,
                 private_key: PaillierPrivateKey | None = None) -> PaillierBackend:
    """The Paillier backend the options name (with its worker processes for ``fast``)."""
    extra = {"workers": options.workers} if options.backend == "fast" else {}
    return create_backend(options.backend, public_key, private_key, **extra)


def receive_key(ctx: PartyContext, options: HeteroLROptions) -> PaillierBackend:
    """A data party's backend on the arbiter's public key; a key of another size than agreed is refused."""
    ctx.stage = "key exchange"
    raw = ctx.recv(ARBITER, PUBLIC_KEY)
    with ctx.meter.serialize():
        public_key = PaillierPublicKey.from_bytes(raw)
    if public_key.bits != options.key_bits:  # the agreed size: refuse a weaker key from the arbiter
        raise ProtocolError(f"the arbiter sent a {public_key.bits}-bit key; {options.key_bits} bits were agreed")
    return make_backend(options, public_key)


def design_matrix(X: np.ndarray, intercept: bool) -> np.ndarray:
    """Features as float64, with a leading column of ones when the party fits the intercept."""
    X = np.asarray(X, dtype=np.float64)
    return np.hstack([np.ones((len(X), 1)), X]) if intercept else X


def l2_mask(width: int, intercept: bool) -> np.ndarray:
    """1 for regularised weights, 0 for the intercept."""
    mask = np.ones(width)
    if intercept:
        mask[0] = 0.0
    return mask


class Theta(nn.Module):
    """A party's weights θ_k as a float64 buffer (the active party's intercept first): what it saves."""

    def __init__(self, theta: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("weight", torch.as_tensor(np.asarray(theta, dtype=np.float64)).clone())

    def values(self) -> np.ndarray:
        """θ_k as a float64 array."""
        weight = self.get_buffer("weight")
        return weight.detach().cpu().numpy().astype(np.float64)

    def assign(self, theta: np.ndarray) -> None:
        """Set θ_k (exactly: float64 in, float64 kept)."""
        with torch.no_grad():
            self.get_buffer("weight").copy_(torch.as_tensor(np.asarray(theta, dtype=np.float64)))


def output_scores(objective: Objective, logits: np.ndarray) -> np.ndarray:
    """The active party's scores of θᵀx: [1 − p, p] with p = σ(θᵀx), or the value on the target's scale."""
    if objective.regression:
        return objective.predictions(torch.as_tensor(logits))
    with np.errstate(over="ignore"):  # exp(-θᵀx) overflows to inf for a very negative θᵀx: p = 0 exactly
        p = 1.0 / (1.0 + np.exp(-logits))
    return np.column_stack([1.0 - p, p])


def residual_scale(task: str) -> float:
    """The residual's scale in e = scale · d: 4 for the logistic Taylor residual, 1 for the squared loss."""
    return 1.0 if task == REGRESSION else 4.0


def can_step(rows: int, weights: int) -> bool:
    """Whether a party may take its gradient over ``rows`` encrypted residuals: more rows than weights.

    With no more rows than weights the gradient's equations could be solved for the residuals
    (:mod:`.batches`); under partial coverage a party's share of a batch can be that small, and the
    party then takes no step on the batch (it asks the arbiter to decrypt a masked zero instead).
    """
    return rows > weights


def encrypted_zero(backend: PaillierBackend, shape: tuple[int, ...], scale_bits: int) -> EncryptedTensor:
    """Fresh encryptions of zero: a request the arbiter cannot tell from a real one (after the mask)."""
    return backend.encrypt(np.zeros(shape), frac_bits=scale_bits)


def spread(backend: PaillierBackend, parts: list[tuple[EncryptedTensor, np.ndarray]], rows: int,
           frac_bits: int) -> EncryptedTensor:
    """Σ_k [[u_k]] over ``rows`` rows, each ``(tensor, held)`` covering the rows of its mask ``held``, in order.

    A row no part covers gets a fresh encryption of zero (its passive parties' partial scores left out).
    """
    cells = np.empty(rows, dtype=object)
    filled = np.zeros(rows, dtype=bool)
    for tensor, held in parts:
        where = np.flatnonzero(held)
        values = tensor.ciphertexts.ravel()
        first = ~filled[where]
        cells[where[first]] = values[first]
        again = where[~first]
        if len(again):
            summed = backend.add_raw(cells[again].tolist(), values[~first].tolist())
            for i, c in zip(again, summed, strict=True):
                cells[i] = c
        filled[where] = True
    if not filled.all():
        zeros = encrypted_zero(backend, (int((~filled).sum()),), frac_bits)
        for i, c in zip(np.flatnonzero(~filled), zeros.ciphertexts.ravel(), strict=True):
            cells[i] = c
    return EncryptedTensor(backend, cells, shape=(rows,), scale_bits=frac_bits)


def send_masked(ctx: PartyContext, tag: str, tensor: EncryptedTensor, randbelow: RandBelow | None,
                reply: str = UNMASKED) -> np.ndarray:
    """Mask ``tensor`` uniformly in Z_n, have the arbiter decrypt it, unmask: the plaintext values.

    ``tag``: the request's message tag; ``reply``: the tag of the arbiter's answer.
    """
    n = tensor.backend.public_key.n
    with ctx.meter.crypto("paillier.mask"):
        masks = draw_ring_masks(n, tensor.n_ciphertexts, randbelow)
        masked = add_ring_masks(tensor, masks)
    with ctx.meter.crypto("paillier.rerandomize"):
        masked = masked.rerandomize()
    with ctx.meter.serialize():
        wire = masked.to_bytes()
    ctx.send(ARBITER, tag, wire)
    residues = ctx.recv(ARBITER, reply)
    with ctx.meter.crypto("paillier.mask"):
        values = remove_ring_masks(residues, masks, n, masked.scale_bits)
    return values.reshape(tensor.shape)


def decrypt_masked(ctx: PartyContext, backend: PaillierBackend, party: str, tag: str, reply: str = UNMASKED,
                   count: int | None = None) -> None:
    """The arbiter's step: decrypt what ``party`` sent under ``tag`` (masked values) and return the residues.

    ``count``: how many values the request must hold (a ProtocolError otherwise), where it is agreed.
    """
    wire = ctx.recv(party, tag)
    if not isinstance(wire, bytes):
        raise ProtocolError(f"{party} sent a malformed {tag} (expected ciphertext bytes)")
    with ctx.meter.serialize():
        tensor = EncryptedTensor.from_bytes(wire, backend)
    if count is not None and tensor.n_ciphertexts != count:
        raise ProtocolError(f"{party} sent {tensor.n_ciphertexts} values to decrypt under {tag}; {count} were "
                            "agreed (does every party score with the same --batch-size?)")
    with ctx.meter.crypto("paillier.decrypt"):
        residues = backend.decrypt_raw(tensor.ciphertexts.ravel().tolist())
    ctx.send(party, reply, [int(r) for r in residues])


__all__ = ["ABSENT", "ARBITER", "ENC_SCORE", "LOG2",
           "MASKED_GRADIENT", "MASKED_LOSS", "PUBLIC_KEY", "RESIDUAL", "TEST_SCORE",
           "THETA", "UNMASKED", "HeteroLROptions", "Theta", "decrypt_masked", "design_matrix", "l2_mask",
           "make_backend", "output_scores", "receive_key", "residual_scale", "send_masked", "can_step",
           "encrypted_zero", "spread"]
