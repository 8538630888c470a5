"""hetero-lr's parties on the split-learning engine: the active party, the passive parties and the arbiter.

Each is a :class:`~securevfl.methods.engine.loop.PartySide` that
:func:`~securevfl.methods.engine.loop.run_side` runs, so hetero-lr has the engine's history,
progress, early stopping, checkpoints and resume. The arbiter is a side without columns: it knows
the aligned row counts (to cut the same batches as everyone) and decrypts what it is sent. Per
batch (the agreed order, a short tail merged, :mod:`.batches`) the messages are those of the
package docstring; after the epoch's last batch the active party has the arbiter decrypt the
epoch's monitored loss (where it is monitored), which becomes the epoch's ``train_loss``.

Evaluation: the test rows as in FATE (plaintext partial scores of the passive parties); the
validation rows of early stopping as a saved model scores new rows (:mod:`.scoring`: encrypted
partial scores, their sum decrypted by the arbiter behind a uniform mask), so validating reveals
no more than scoring does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.data.scenario import PartyData
from securevfl.errors import DataError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, Method, batch_plan
from securevfl.methods.engine.loop import TEST, EngineRecord, Evaluation, Losses, PartySide, run_side
from securevfl.methods.engine.split import SideRole
from securevfl.methods.hetero_lr.protocol import (
    ABSENT,
    ARBITER,
    ENC_SCORE,
    LOG2,
    MASKED_GRADIENT,
    MASKED_LOSS,
    PUBLIC_KEY,
    RESIDUAL,
    TEST_SCORE,
    THETA,
    HeteroLROptions,
    KeyPair,
    Theta,
    can_step,
    decrypt_masked,
    design_matrix,
    encrypted_zero,
    l2_mask,
    make_backend,
    output_scores,
    receive_key,
    residual_scale,
    send_masked,
    spread,
)
from securevfl.methods.hetero_lr.scoring import VALIDATION, absent_bias, absent_count, passive_scores, send_partial
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PaillierBackend,
    generate_keypair,
)
from securevfl.privacy.paillier.ring_masks import RandBelow


@dataclass(frozen=True)
class Batch:
    """One agreed batch: its aligned training rows, and whether it is the epoch's last."""

    rows: np.ndarray
    last: bool


@dataclass(frozen=True)
class Settings:
    """What every hetero-lr side is built with: the options, the batch floor, loss monitoring, the mask source."""

    options: HeteroLROptions
    min_rows: int
    monitor_loss: bool
    randbelow: RandBelow | None = None


def skip_step(ctx: PartyContext, backend: PaillierBackend, width: int, options: HeteroLROptions,
              randbelow: RandBelow | None) -> None:
    """No step on this batch: the arbiter decrypts a masked zero of the gradient's size and scale instead."""
    with ctx.meter.crypto("paillier.encrypt"):
        zero = encrypted_zero(backend, (width,), 2 * options.frac_bits)
    send_masked(ctx, MASKED_GRADIENT, zero, randbelow)


def gradient(ctx: PartyContext, X_batch: np.ndarray, residual: EncryptedTensor, options: HeteroLROptions,
             randbelow: RandBelow | None, scale: float, rows: int | None = None) -> np.ndarray:
    """The gradient X_bᵀ d / B from [[e]] = [[scale · d]], decrypted through the arbiter behind a mask.

    ``rows``: the batch's size B (default: the rows of ``X_batch``; a passive party under partial
    coverage holds fewer of the batch's rows, and its gradient still averages over B).
    """
    weights = X_batch.T / (scale * (len(X_batch) if rows is None else rows))
    with ctx.meter.crypto("paillier.matmul"):
        encrypted = residual.rmatmul(weights, frac_bits=options.frac_bits)
    return send_masked(ctx, MASKED_GRADIENT, encrypted, randbelow)


class HeteroSide(PartySide):
    """What every hetero-lr side shares: its settings, its Paillier backend, the merged batch plan."""

    def __init__(self, method: Method[Any], data: PartyData, settings: Settings,
                 passives: tuple[str, ...] = ()) -> None:
        super().__init__(method, data, passives)
        self.settings = settings
        self.options = settings.options
        self.backend: PaillierBackend | None = None

    def batches(self, epoch: int) -> list[Batch]:
        plan = list(batch_plan(len(self.rows), self.config.batch_size, self.config.seed, epoch,
                               min_rows=self.settings.min_rows, short="merge"))
        return [Batch(self.rows[idx], i == len(plan) - 1) for i, idx in enumerate(plan)]

    def close(self) -> None:
        """Release the backend's worker processes (if any)."""
        if self.backend is not None:
            self.backend.close()


class DataSide(HeteroSide):
    """A data party: its features (with the intercept column at the active party) and its weights θ_k."""

    intercept = False

    def build(self, ctx: PartyContext) -> None:
        self.backend = receive_key(ctx, self.options)
        self.X = design_matrix(self.data.X_train, self.intercept)
        self.state.modules[THETA] = Theta(np.zeros(self.X.shape[1]))

    @property
    def module(self) -> Theta:
        """The :class:`Theta` module that holds θ_k (what checkpoints, early stopping and saving keep)."""
        module = self.state.modules[THETA]
        assert isinstance(module, Theta)
        return module

    def partial(self, X: np.ndarray) -> np.ndarray:
        """u_k = X_k θ_k on rows of this party's table."""
        return design_matrix(X, self.intercept) @ self.module.values()


class PassiveSide(DataSide):
    """A passive party: encrypted partial scores out, encrypted residual in, masked gradient via the arbiter."""

    def train_batch(self, ctx: PartyContext, batch: Batch) -> None:
        assert self.backend is not None
        options, idx = self.options, self.data.own_rows("train", batch.rows)  # its rows of the batch (all, or held)
        theta = self.module.values()
        with ctx.meter.compute():
            u = self.X[idx] @ theta
        with ctx.meter.crypto("paillier.encrypt"):
            score = self.backend.encrypt(u, frac_bits=options.frac_bits)
            square = self.backend.encrypt(u * u, frac_bits=options.frac_bits) if self.settings.monitor_loss else None
        with ctx.meter.serialize():
            message = {"score": score.to_bytes(), "square": square.to_bytes() if square is not None else None}
        ctx.send(ctx.active, ENC_SCORE, message)
        wire = ctx.recv(ctx.active, RESIDUAL)
        with ctx.meter.serialize():
            residual = EncryptedTensor.from_bytes(wire, self.backend)
        if residual.shape != (len(idx),):
            raise DataError(f"residual for {residual.shape} rows, batch has {len(idx)}")
        if not can_step(len(idx), self.X.shape[1]):  # too few of its rows in the batch: they could be solved for
            skip_step(ctx, self.backend, self.X.shape[1], options, self.settings.randbelow)
            return
        scale = residual_scale(self.data.task)
        if len(idx) == len(batch.rows):  # it holds every row of the batch
            grad = gradient(ctx, self.X[idx], residual, options, self.settings.randbelow, scale)
        else:  # its rows of the batch; the gradient still averages over the batch's B rows
            grad = gradient(ctx, self.X[idx], residual, options, self.settings.randbelow, scale, rows=len(batch.rows))
        with ctx.meter.compute():
            theta = theta - options.lr * (grad + options.l2 * theta)
        self.module.assign(theta)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        assert self.backend is not None
        with ctx.meter.compute():
            u = self.partial(X)
        if phase == TEST:  # training's own test evaluation (FATE): the plaintext partial scores
            ctx.send(ctx.active, TEST_SCORE, u)
        else:
            send_partial(ctx, self.backend, self.options.frac_bits, u, VALIDATION.partial)

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> np.ndarray:
        return self.module.values()


def _plain_loss_terms(u: np.ndarray, y_pm: np.ndarray) -> tuple[float, np.ndarray]:
    """Σ_i (log 2 − ½ y' u + ⅛ u²) and the weights w = −½ y' + ¼ u of the passive party's [[u_p]]."""
    plain = float(np.sum(LOG2 - 0.5 * y_pm * u + 0.125 * u * u))
    return plain, -0.5 * y_pm + 0.25 * u


def _plain_squared_terms(u: np.ndarray, z: np.ndarray) -> tuple[float, np.ndarray]:
    """Σ_i ½ (u − z)² and the weights u − z of [[u_p]] in ½ (u_p + u − z)² (with ½ [[u_p²]])."""
    r = u - z
    return float(np.sum(0.5 * r * r)), r


class ActiveSide(DataSide):
    """The active party: labels stay here; forms [[4d]], updates its own weights, predicts.

    ``passives`` are the engine's partners (the passive data parties and the arbiter);
    :attr:`data_passives` the passive data parties alone. Under partial coverage it also holds one absent
    bias per passive party (module :data:`ABSENT`), added to a row's score where that party does not hold
    the row: the weights of indicator columns ("party k absent") of its own.
    """

    loss_optional = True  # without loss monitoring an epoch reports no loss

    def __init__(self, method: Method[Any], data: PartyData, settings: Settings,
                 data_passives: tuple[str, ...]) -> None:
        super().__init__(method, data, settings, (*data_passives, ARBITER))
        self.data_passives = data_passives
        self.intercept = settings.options.fit_intercept
        self.n_absent = absent_count(data, data_passives)
        self._loss_sum: EncryptedTensor | None = None
        self._loss_plain = 0.0

    def build(self, ctx: PartyContext) -> None:
        if self.data.y_train is None or self.data.y_test is None:
            raise DataError("the active party of hetero-lr must hold the labels")
        super().build(ctx)
        y = self.data.y_train
        # the target the residual subtracts: 2y' (y' = ±1) for the Taylor loss, z for the squared loss
        self.shift = (self.objective.targets(y).numpy().astype(np.float64) if self.objective.regression
                      else 2.0 * (2.0 * np.asarray(y, dtype=np.float64) - 1.0))
        self.reg = l2_mask(self.X.shape[1], self.intercept)
        # per agreed training position and passive party: 1 where the party does not hold the row
        self.A = np.zeros((len(self.X), self.n_absent))
        if self.n_absent:
            self.state.modules[ABSENT] = Theta(np.zeros(self.n_absent))
            coverage = self.data.coverage
            for k, p in enumerate(self.data_passives):
                if coverage is not None and p in coverage.train:
                    self.A[:, k] = ~coverage.train[p]

    def bias(self) -> np.ndarray:
        """The absent biases, one per passive party (empty where the model keeps to the rows every party holds)."""
        module = self.state.modules.get(ABSENT)
        return module.values() if isinstance(module, Theta) else np.zeros(0)

    def train_batch(self, ctx: PartyContext, batch: Batch) -> tuple[Losses, int] | None:
        assert self.backend is not None
        options, idx, randbelow = self.options, batch.rows, self.settings.randbelow
        shift = self.shift
        held = self.data.peer_masks("train", idx)  # None: every passive party holds every row
        masks = {p: np.ones(len(idx), dtype=bool) if held is None or p not in held else held[p]
                 for p in self.data_passives}
        theta, bias = self.module.values(), self.bias()
        with ctx.meter.compute():
            u = self.X[idx] @ theta
            if held is not None and self.n_absent:
                u = u + self.A[idx] @ bias
        messages = [ctx.recv(p, ENC_SCORE) for p in self.data_passives]
        with ctx.meter.serialize():
            scores = [EncryptedTensor.from_bytes(m["score"], self.backend) for m in messages]
        for p, s in zip(self.data_passives, scores, strict=True):
            rows = int(masks[p].sum())
            if s.shape != (rows,):
                raise DataError(f"partial scores of {p} for {s.shape} rows, it holds {rows} of the batch")
        with ctx.meter.crypto("paillier.add"):
            if held is None:
                residual = scores[0]
                for s in scores[1:]:
                    residual = residual + s
            else:  # a passive party's score is left out of the rows it does not hold
                residual = spread(self.backend, [(s, masks[p]) for p, s in zip(self.data_passives, scores,
                                                                               strict=True)],
                                  len(idx), options.frac_bits)
            residual = residual + (u - shift[idx])
        with ctx.meter.crypto("paillier.rerandomize"):
            residual = residual.rerandomize()
        if held is None:
            with ctx.meter.serialize():
                wire = residual.to_bytes()
            ctx.broadcast(self.data_passives, RESIDUAL, wire)
        else:  # each passive party gets the residual of its own rows only
            for p in self.data_passives:
                with ctx.meter.serialize():
                    wire = residual[masks[p]].to_bytes()
                ctx.send(p, RESIDUAL, wire)
        if self.settings.monitor_loss:
            self._monitor(ctx, messages[0]["square"], scores[0], u, shift[idx],
                          None if held is None else masks[self.data_passives[0]])
        width = len(theta) + self.n_absent
        covered = len(idx) if held is None else int(np.logical_or.reduce(list(masks.values())).sum())
        if covered and not can_step(covered, width):  # too few encrypted rows: the passive sums could be solved for
            skip_step(ctx, self.backend, width, options, randbelow)
        else:
            X_batch = np.hstack([self.X[idx], self.A[idx]]) if self.n_absent else self.X[idx]
            grad = gradient(ctx, X_batch, residual, options, randbelow, residual_scale(self.data.task))
            with ctx.meter.compute():
                theta = theta - options.lr * (grad[:len(theta)] + options.l2 * self.reg * theta)
                bias = bias - options.lr * grad[len(theta):]  # not regularised, as the intercept
            self.module.assign(theta)
            if self.n_absent:
                self.state.modules[ABSENT].assign(bias)  # type: ignore[operator]
        if not batch.last:
            return None
        loss_sum, loss_plain = self._loss_sum, self._loss_plain
        self._loss_sum, self._loss_plain = None, 0.0
        if not self.settings.monitor_loss:  # not monitored: the epoch's history holds no loss
            return None
        if loss_sum is None:  # the passive party held none of the epoch's rows: its part is zero
            loss_sum = encrypted_zero(self.backend, (), 2 * options.frac_bits)
        encrypted_part = float(send_masked(ctx, MASKED_LOSS, loss_sum, randbelow))
        return {"loss": (loss_plain + encrypted_part) / len(self.rows)}, 1

    def _monitor(self, ctx: PartyContext, square_wire: bytes, score: EncryptedTensor, u: np.ndarray, target: np.ndarray,
                 held: np.ndarray | None) -> None:
        """Add the batch's loss: in the clear what the active party knows, encrypted the passive party's part.

        ``held``: the rows the (one) passive party holds (None: all); elsewhere its score is left out.
        """
        assert self.backend is not None
        options, regression = self.options, self.objective.regression
        with ctx.meter.serialize():
            square = EncryptedTensor.from_bytes(square_wire, self.backend)
        with ctx.meter.compute():
            plain, weights = (_plain_squared_terms(u, target) if regression else _plain_loss_terms(u, target / 2.0))
        self._loss_plain += plain
        rows = len(u) if held is None else int(held.sum())
        if not rows:
            return
        with ctx.meter.crypto("paillier.matmul"):
            batch_loss = score.matmul(weights if held is None else weights[held], frac_bits=options.frac_bits)
            batch_loss = batch_loss + square.matmul(np.full(rows, 0.5 if regression else 0.125),
                                                    frac_bits=options.frac_bits)
        with ctx.meter.crypto("paillier.add"):
            self._loss_sum = batch_loss if self._loss_sum is None else self._loss_sum + batch_loss

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        assert self.backend is not None
        present = self.present
        if phase == TEST:  # FATE's inference: each passive party's plaintext partial scores
            partial = [np.asarray(ctx.recv(p, TEST_SCORE), dtype=np.float64) for p in self.data_passives]
            with ctx.meter.compute():
                logits = self.partial(X)
                for p, u_passive in zip(self.data_passives, partial, strict=True):
                    if present is None or p not in present:
                        logits = logits + u_passive
                    else:
                        if u_passive.shape != (int(present[p].sum()),):
                            raise DataError(f"{p} sent test scores of shape {u_passive.shape}; it holds "
                                            f"{int(present[p].sum())} of the rows")
                        logits[present[p]] += u_passive
        else:  # validation rows: scored as a saved model scores new rows (the passive parties' sum only)
            passive_sum = passive_scores(ctx, self.backend, self.data_passives, len(X), self.options.frac_bits,
                                         self.settings.randbelow, VALIDATION, present)
            with ctx.meter.compute():
                logits = self.partial(X) + passive_sum
        with ctx.meter.compute():
            if present is not None:
                logits = logits + absent_bias(self.bias(), self.data_passives, present, len(X))
            return Evaluation(output_scores(self.objective, logits))

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> ActiveOutcome:
        assert evaluation is not None and self.data.y_test is not None
        options = self.options
        extra = {"hetero_lr": {"backend": options.backend, "key_bits": options.key_bits,
                               "passives": list(self.data_passives), "arbiter": ARBITER,
                               "loss_monitored": self.settings.monitor_loss,
                               "mask": "uniform in Z_n (perfect hiding)",
                               "active_weights": self.module.values().tolist()}}
        if self.n_absent:
            extra["hetero_lr"]["absent_bias"] = dict(zip(self.data_passives, self.bias().tolist(), strict=True))
        return ActiveOutcome(y_true=np.asarray(self.data.y_test), scores=evaluation.scores, history=record.history,
                             extra={**extra, **record.extra()})


class ArbiterSide(HeteroSide):
    """The key holder: generates the key pair, decrypts masked values and returns the residues; it holds no column."""

    def __init__(self, method: Method[Any], data: PartyData, settings: Settings, parties: tuple[str, ...],
                 keypair: KeyPair | None = None) -> None:
        super().__init__(method, data, settings)
        self.parties = parties  # the data parties, the active party first
        self.keypair = keypair  # tests may inject a pre-generated key pair
        self.key_bits = 0

    def build(self, ctx: PartyContext) -> None:
        ctx.stage = "key generation"
        options = self.options
        with ctx.meter.crypto("paillier.keygen"):
            public_key, private_key = self.keypair or generate_keypair(
                options.key_bits, insecure_allow_small_key=options.insecure_allow_small_key)
        self.backend = make_backend(options, public_key, private_key)
        self.key_bits = public_key.bits
        ctx.broadcast(self.parties, PUBLIC_KEY, public_key.to_bytes())

    def train_batch(self, ctx: PartyContext, batch: Batch) -> None:
        assert self.backend is not None
        for party in self.parties:
            decrypt_masked(ctx, self.backend, party, MASKED_GRADIENT)
        if batch.last and self.settings.monitor_loss:
            decrypt_masked(ctx, self.backend, ctx.active, MASKED_LOSS)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        assert self.backend is not None
        if phase != TEST:  # the test rows' partial scores go to the active party in the clear
            decrypt_masked(ctx, self.backend, ctx.active, VALIDATION.masked, reply=VALIDATION.unmasked, count=len(X))

    def outcome(self, ctx: PartyContext, evaluation: Evaluation | None, record: EngineRecord) -> dict[str, int]:
        return {"key_bits": self.key_bits}


@dataclass(frozen=True)
class HeteroRole(SideRole):
    """The runtime role of a hetero-lr side: :func:`run_side`, then its backend's workers released."""

    def __call__(self, ctx: PartyContext) -> Any:
        try:
            return run_side(ctx, self.side)
        finally:
            if isinstance(self.side, HeteroSide):
                self.side.close()


__all__ = ["ActiveSide", "ArbiterSide", "Batch", "HeteroRole", "HeteroSide", "PassiveSide", "Settings", "gradient"]
