"""hetero-lr: vertical logistic regression with Paillier and an arbiter (Hardy et al. 2017, FATE).

Roles: the active party (labels and features), passive parties (features) and
an extra ``arbiter`` role that generates the Paillier key pair and is the only one able to decrypt.
Every party keeps its own weights θ_k; nobody sends features, labels or weights. Per batch (the
agreed batch order, with no batch small enough to be solved for: :mod:`._hetero_lr_batches`):

1. each party computes u_k = X_k θ_k;
2. every passive party encrypts [[u_k]] under the arbiter's key and sends it to the active party;
3. the active party forms the encrypted residual of the Taylor-approximated logistic loss,
   [[e]] = Σ_k [[u_k]] + u_active − 2 y' = 4 [[d]] with d = ¼ θᵀx − ½ y' and y' ∈ {−1, +1}
   (second-order expansion of log(1 + exp(−y' θᵀx)) at 0, Hardy et al. section 3.2), and sends
   it (re-randomised) to every passive party;
4. every party computes [[g_k]] = (X_kᵀ / 4B) [[e]] = X_kᵀ[[d]] / B, adds a fresh mask r_k drawn
   uniformly from Z_n (perfect hiding, :mod:`securevfl.privacy.paillier.ring_masks`) and sends [[g_k + r_k]] to
   the arbiter;
5. the arbiter decrypts and returns g_k + r_k mod n; the party removes r_k and steps
   θ_k ← θ_k − lr (g_k + l2 θ_k) (the intercept, at the active party, is not regularised).

With exactly one passive party the active party also monitors the Taylor loss: it sends [[u²]] next
to [[u]], the active party accumulates [[Σ_i ℓ_i]] over the epoch and has the arbiter decrypt it
once, masked the same way (the active party learns one number per epoch, the arbiter nothing).
With two or more passive parties the cross terms u_j u_k need another protocol; loss is not monitored.

Regression (``--task regression``): vertical *linear* regression, the same protocol with the exact
residual e = Σ_k u_k − z of the squared loss ½(θᵀx − z)² on the target z standardised by the
active party (the gradient is X_kᵀ e / B, so the passive parties scale by 1 instead of ¼; the
monitored loss uses [[u]] and [[u²]] the same way). The active party maps predictions back to the
target's scale.

Training's own test evaluation follows FATE: each passive party sends its plaintext partial scores
X_k θ_k for the test rows to the active party, which adds them up and applies the sigmoid. See
docs/hetero_lr.md for what each party learns and the collusion caveats.

Saved models (``--model-dir``): every data party keeps its own θ_k (the active party its θ with the
intercept, and the target's scale for regression); the arbiter keeps nothing, no key is saved.
Scoring a saved model (:mod:`.scoring`) does *not* send plaintext partial scores: the arbiter
generates a fresh key pair per scoring run, the passive parties send [[u_k]], and the active party
has the arbiter decrypt Σ_k [[u_k]] behind a uniform ring mask, so it learns only the sum of the
passive parties' scores (with one passive party, that party's scores) and the arbiter nothing.

Threat model: semi-honest parties only, as Hardy et al. and FATE. The arbiter decrypts whatever
masked ciphertext it is sent, so a *single deviating* party breaks it: a passive party that sends
``[[e]] + r`` (the residual it received) instead of its masked gradient learns e = z - 2y', i.e. the
batch labels (exactly at the first batch, by sign while |z| < 2); an active party that sends
``[[u_k]] + r`` learns a passive party's scores. Preventing this needs zero-knowledge proofs that
each request is X_k^T [[e]] (out of scope); tests/test_hetero_lr.py demonstrates the label leak.

Papers: Hardy et al., "Private federated learning on vertically partitioned data via entity
resolution and additively homomorphic encryption" (arXiv:1711.10677, 2017); FATE's
HeteroLR, Liu et al., JMLR 22(226), 2021 (FATE's guest / host / arbiter are our active party /
passive party / arbiter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, DataError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import (
    ActiveOutcome,
    Method,
    Role,
    TrainConfig,
    batch_plan,
    n_batches,
    register_method,
)
from securevfl.methods.engine.kept import Keep, KeptRole, kept_side
from securevfl.methods.engine.loop import SavedSide
from securevfl.methods.engine.objective import REGRESSION, Objective, make_objective
from securevfl.methods.hetero_lr.batches import check_batch_size
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PaillierBackend,
    PaillierPrivateKey,
    PaillierPublicKey,
    create_backend,
    generate_keypair,
)
from securevfl.privacy.paillier.registry import check_backend_and_key
from securevfl.privacy.paillier.ring_masks import RandBelow, add_ring_masks, draw_ring_masks, remove_ring_masks

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

    lr: float = 0.15
    l2: float = 0.0
    backend: str = "fast"
    key_bits: int = 2048
    insecure_allow_small_key: bool = False
    frac_bits: int = 32
    fit_intercept: bool = True
    monitor_loss: bool = True
    workers: int = 1

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


def _backend(options: HeteroLROptions, public_key: PaillierPublicKey,
             private_key: PaillierPrivateKey | None = None) -> PaillierBackend:
    extra = {"workers": options.workers} if options.backend == "fast" else {}
    return create_backend(options.backend, public_key, private_key, **extra)


def _receive_key(ctx: PartyContext, options: HeteroLROptions) -> PaillierBackend:
    ctx.stage = "key exchange"
    raw = ctx.recv(ARBITER, PUBLIC_KEY)
    with ctx.meter.serialize():
        public_key = PaillierPublicKey.from_bytes(raw)
    if public_key.bits != options.key_bits:  # the agreed size: refuse a weaker key from the arbiter
        raise ProtocolError(f"the arbiter sent a {public_key.bits}-bit key; {options.key_bits} bits were agreed")
    return _backend(options, public_key)


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


def kept_theta(theta: np.ndarray, objective: Objective | None = None) -> SavedSide:
    """What a data party keeps of a trained hetero-lr model: its θ_k (and at the active party the objective)."""
    return kept_side({THETA: Theta(theta)}, objective)


def output_scores(objective: Objective, logits: np.ndarray) -> np.ndarray:
    """The active party's scores of θᵀx: [1 − p, p] with p = σ(θᵀx), or the value on the target's scale."""
    if objective.regression:
        return objective.predictions(torch.as_tensor(logits))
    p = 1.0 / (1.0 + np.exp(-logits))
    return np.column_stack([1.0 - p, p])


def _send_masked(ctx: PartyContext, tag: str, tensor: EncryptedTensor, randbelow: RandBelow | None,
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


def residual_scale(task: str) -> float:
    """The residual's scale in e = scale · d: 4 for the logistic Taylor residual, 1 for the squared loss."""
    return 1.0 if task == REGRESSION else 4.0


def _gradient(ctx: PartyContext, X_batch: np.ndarray, residual: EncryptedTensor, options: HeteroLROptions,
              randbelow: RandBelow | None, scale: float) -> np.ndarray:
    """The gradient X_bᵀ d / B from [[e]] = [[scale · d]], decrypted through the arbiter behind a mask."""
    weights = X_batch.T / (scale * len(X_batch))
    with ctx.meter.crypto("paillier.matmul"):
        encrypted = residual.rmatmul(weights, frac_bits=options.frac_bits)
    return _send_masked(ctx, MASKED_GRADIENT, encrypted, randbelow)


def passive_role(data: PartyData, config: TrainConfig, options: HeteroLROptions, send_square: bool, min_rows: int,
                 randbelow: RandBelow | None = None) -> KeptRole:
    """A passive party: encrypted partial scores out, encrypted residual in, masked gradient via the arbiter.

    It keeps its trained θ_k (:func:`kept_theta`) for ``--model-dir``.
    """

    def role(ctx: PartyContext, keep: Keep) -> np.ndarray:
        backend = _receive_key(ctx, options)
        try:
            X = design_matrix(data.X_train, False)
            theta = np.zeros(X.shape[1])
            for epoch in range(config.epochs):
                ctx.stage = f"train epoch {epoch + 1}"
                for idx in batch_plan(len(X), config.batch_size, config.seed, epoch, min_rows=min_rows, short="merge"):
                    with ctx.meter.compute():
                        u = X[idx] @ theta
                    with ctx.meter.crypto("paillier.encrypt"):
                        score = backend.encrypt(u, frac_bits=options.frac_bits)
                        square = backend.encrypt(u * u, frac_bits=options.frac_bits) if send_square else None
                    with ctx.meter.serialize():
                        message = {"score": score.to_bytes(),
                                   "square": square.to_bytes() if square is not None else None}
                    ctx.send(ctx.active, ENC_SCORE, message)
                    wire = ctx.recv(ctx.active, RESIDUAL)
                    with ctx.meter.serialize():
                        residual = EncryptedTensor.from_bytes(wire, backend)
                    if residual.shape != (len(idx),):
                        raise DataError(f"residual for {residual.shape} rows, batch has {len(idx)}")
                    grad = _gradient(ctx, X[idx], residual, options, randbelow, residual_scale(data.task))
                    with ctx.meter.compute():
                        theta = theta - options.lr * (grad + options.l2 * theta)
                ctx.progress(epoch=epoch + 1, epochs=config.epochs)  # deployed: the passive party's own progress
            keep(kept_theta(theta))
            ctx.stage = "evaluate"
            with ctx.meter.compute():
                u_test = design_matrix(data.X_test, False) @ theta
            ctx.send(ctx.active, TEST_SCORE, u_test)
        finally:
            backend.close()
        return theta

    return KeptRole(role)


def _plain_loss_terms(u: np.ndarray, y_pm: np.ndarray) -> tuple[float, np.ndarray]:
    """Σ_i (log 2 − ½ y' u + ⅛ u²) and the weights w = −½ y' + ¼ u of the passive party's [[u_p]]."""
    plain = float(np.sum(LOG2 - 0.5 * y_pm * u + 0.125 * u * u))
    return plain, -0.5 * y_pm + 0.25 * u


def _plain_squared_terms(u: np.ndarray, z: np.ndarray) -> tuple[float, np.ndarray]:
    """Σ_i ½ (u − z)² and the weights u − z of [[u_p]] in ½ (u_p + u − z)² (with ½ [[u_p²]])."""
    r = u - z
    return float(np.sum(0.5 * r * r)), r


def active_role(data: PartyData, config: TrainConfig, options: HeteroLROptions, passives: tuple[str, ...],
                monitor_loss: bool, min_rows: int, randbelow: RandBelow | None = None) -> KeptRole:
    """The active party: labels stay here; forms [[4d]], updates its own weights, predicts.

    It keeps its trained θ (intercept first) and the objective (a regression target's scale).
    """

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        if data.y_train is None or data.y_test is None:
            raise DataError("the active party of hetero-lr must hold the labels")
        backend = _receive_key(ctx, options)
        try:
            X = design_matrix(data.X_train, options.fit_intercept)
            objective = make_objective(data.task, data.y_train, data.n_classes)
            regression = objective.regression
            # the target the residual subtracts: 2y' (y' = ±1) for the Taylor loss, z for the squared loss
            shift = (objective.targets(data.y_train).numpy().astype(np.float64) if regression
                     else 2.0 * (2.0 * np.asarray(data.y_train, dtype=np.float64) - 1.0))
            scale = residual_scale(data.task)
            theta = np.zeros(X.shape[1])
            reg = l2_mask(X.shape[1], options.fit_intercept)
            history: list[dict[str, float]] = []
            for epoch in range(config.epochs):
                ctx.stage = f"train epoch {epoch + 1}"
                loss_sum: EncryptedTensor | None = None
                loss_plain = 0.0
                for idx in batch_plan(len(X), config.batch_size, config.seed, epoch, min_rows=min_rows, short="merge"):
                    with ctx.meter.compute():
                        u = X[idx] @ theta
                    messages = [ctx.recv(p, ENC_SCORE) for p in passives]
                    with ctx.meter.serialize():
                        scores = [EncryptedTensor.from_bytes(m["score"], backend) for m in messages]
                    for s in scores:
                        if s.shape != (len(idx),):
                            raise DataError(f"partial scores for {s.shape} rows, batch has {len(idx)}")
                    with ctx.meter.crypto("paillier.add"):
                        residual = scores[0]
                        for s in scores[1:]:
                            residual = residual + s
                        residual = residual + (u - shift[idx])
                    with ctx.meter.crypto("paillier.rerandomize"):
                        residual = residual.rerandomize()
                    with ctx.meter.serialize():
                        wire = residual.to_bytes()
                    ctx.broadcast(passives, RESIDUAL, wire)
                    if monitor_loss:
                        with ctx.meter.serialize():
                            square = EncryptedTensor.from_bytes(messages[0]["square"], backend)
                        with ctx.meter.compute():
                            plain, weights = (_plain_squared_terms(u, shift[idx]) if regression
                                              else _plain_loss_terms(u, shift[idx] / 2.0))
                        with ctx.meter.crypto("paillier.matmul"):
                            batch_loss = scores[0].matmul(weights, frac_bits=options.frac_bits)
                            batch_loss = batch_loss + square.matmul(np.full(len(idx), 0.5 if regression else 0.125),
                                                                    frac_bits=options.frac_bits)
                        with ctx.meter.crypto("paillier.add"):
                            loss_sum = batch_loss if loss_sum is None else loss_sum + batch_loss
                        loss_plain += plain
                    grad = _gradient(ctx, X[idx], residual, options, randbelow, scale)
                    with ctx.meter.compute():
                        theta = theta - options.lr * (grad + options.l2 * reg * theta)
                record = {"epoch": float(epoch + 1)}
                if monitor_loss and loss_sum is not None:
                    encrypted_part = float(_send_masked(ctx, MASKED_LOSS, loss_sum, randbelow))
                    record["train_loss"] = (loss_plain + encrypted_part) / len(X)
                    ctx.progress(epoch=epoch + 1, epochs=config.epochs, loss=record["train_loss"])
                else:
                    ctx.progress(epoch=epoch + 1, epochs=config.epochs)
                history.append(record)
            keep(kept_theta(theta, objective))
            ctx.stage = "evaluate"
            partial = [np.asarray(ctx.recv(p, TEST_SCORE), dtype=np.float64) for p in passives]
            with ctx.meter.compute():
                logits = design_matrix(data.X_test, options.fit_intercept) @ theta
                for u_passive in partial:
                    logits = logits + u_passive
                scores_out = output_scores(objective, logits)
        finally:
            backend.close()
        extra = {"hetero_lr": {"backend": options.backend, "key_bits": options.key_bits, "passives": list(passives),
                               "arbiter": ARBITER, "loss_monitored": monitor_loss,
                               "mask": "uniform in Z_n (perfect hiding)",
                               "active_weights": theta.tolist()}}
        return ActiveOutcome(y_true=np.asarray(data.y_test), scores=scores_out, history=history, extra=extra)

    return KeptRole(role)


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


def arbiter_role(options: HeteroLROptions, parties: tuple[str, ...], active: str, batches_per_epoch: int,
                 epochs: int, monitor_loss: bool, keypair: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None
                 ) -> Role:
    """The key holder: generates the key pair, decrypts masked values and returns the residues."""

    def role(ctx: PartyContext) -> dict[str, int]:
        ctx.stage = "key generation"
        with ctx.meter.crypto("paillier.keygen"):
            public_key, private_key = keypair or generate_keypair(
                options.key_bits, insecure_allow_small_key=options.insecure_allow_small_key)
        backend = _backend(options, public_key, private_key)
        try:
            ctx.broadcast(parties, PUBLIC_KEY, public_key.to_bytes())
            for epoch in range(epochs):
                ctx.stage = f"train epoch {epoch + 1}"
                for _ in range(batches_per_epoch):
                    for party in parties:
                        decrypt_masked(ctx, backend, party, MASKED_GRADIENT)
                if monitor_loss:
                    decrypt_masked(ctx, backend, active, MASKED_LOSS)
                ctx.progress(epoch=epoch + 1, epochs=epochs)  # deployed: the arbiter's own progress
        finally:
            backend.close()
        return {"key_bits": public_key.bits}

    return role


@register_method
class HeteroLR(Method[HeteroLROptions]):
    """Vertical logistic regression: Taylor loss, Paillier-encrypted residuals, arbiter-decrypted masked gradients."""

    name = "hetero-lr"
    summary = "hetero-LR (Hardy et al. 2017 / FATE): Paillier, Taylor loss, arbiter decrypts masked gradients"
    Options = HeteroLROptions
    supports_objectives = True  # regression as vertical linear regression; no class weights (see __init__)
    saves_outside_engine = True  # every data party keeps its θ_k; scoring: :mod:`.scoring`
    randbelow: RandBelow | None = None  # tests may inject a deterministic mask source
    keypair: tuple[PaillierPublicKey, PaillierPrivateKey] | None = None  # tests may inject a pre-generated key

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        if config.class_weight != "none":
            raise ConfigError("hetero-lr does not weight classes (its residual is encrypted per row); "
                              "the neural methods do: --class-weight with splitnn, easter, local, ...")
        if config.lr != TrainConfig.lr:
            raise ConfigError(f"hetero-lr takes its step size from the option lr (default 0.15), not from "
                              f"--lr={config.lr}; pass --option lr={config.lr} instead")

    def _check_parties(self, scenario: Scenario) -> PartyData:
        """The active party's data, after refusing a scenario hetero-lr cannot run (no passive party, ...)."""
        self.require_passives(scenario)
        if ARBITER in scenario.parties:
            raise ConfigError(f"party name {ARBITER!r} is reserved for hetero-lr's key holder")
        active = scenario.party_data(scenario.active)
        if active.task != REGRESSION and active.n_classes != 2:
            raise ConfigError(f"hetero-lr is binary logistic regression; the task has {active.n_classes} classes")
        return active

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        active = self._check_parties(scenario)
        passives = tuple(scenario.passives)
        datas = {p: scenario.party_data(p) for p in passives}
        weights = [active.n_features + int(self.options.fit_intercept)] + [datas[p].n_features for p in passives]
        n_rows = len(active.X_train)
        check_batch_size(self.config.batch_size, n_rows, max(weights))
        min_rows = max(weights) + 1
        monitor = self.options.monitor_loss and len(passives) == 1
        roles: dict[str, Role] = {
            p: passive_role(datas[p], self.config, self.options, monitor, min_rows, self.randbelow) for p in passives
        }
        roles[scenario.active] = active_role(active, self.config, self.options, passives, monitor, min_rows,
                                             self.randbelow)
        parties = (scenario.active, *passives)
        roles[ARBITER] = arbiter_role(self.options, parties, scenario.active,
                                      n_batches(n_rows, self.config.batch_size, min_rows=min_rows, short="merge"),
                                      self.config.epochs, monitor, self.keypair)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        """Scoring with saved θ_k: encrypted partial scores, their masked sum decrypted by a fresh arbiter."""
        from securevfl.methods.hetero_lr.scoring import scoring_roles

        self._check_parties(scenario)
        return scoring_roles(self, scenario, self.options, ARBITER, randbelow=self.randbelow, keypair=self.keypair)


__all__ = ["ARBITER", "THETA", "HeteroLR", "HeteroLROptions", "Theta", "active_role", "arbiter_role",
           "decrypt_masked", "kept_theta", "output_scores", "passive_role"]
