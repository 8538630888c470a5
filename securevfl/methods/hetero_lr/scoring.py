"""hetero-lr scoring with a saved model: partial scores encrypted, their sum decrypted by the arbiter behind a mask.

Each data party holds its own saved θ_k (the :class:`~securevfl.methods.hetero_lr.protocol.Theta`
its training side kept); the arbiter holds nothing of the model. Per scoring run (one process,
:func:`securevfl.predict`, or deployed, ``securevfl party --predict``):

1. the arbiter generates a **fresh** Paillier key pair of the run's ``key_bits`` (never saved, never
   reused across runs) and sends the public key to every data party, which refuses a key of
   another size than its saved options agreed;
2. per batch of the agreed scoring rows (every party cuts the same batches: the row count comes with
   the plan), every passive party computes u_k = X_k θ_k, encrypts [[u_k]] (fixed point at
   ``frac_bits``) and sends it to the active party;
3. the active party sums them homomorphically, adds a fresh mask r drawn uniformly from Z_n per row
   (:mod:`securevfl.privacy.paillier.ring_masks`, as training masks gradients), re-randomises and
   sends [[Σ_k u_k + r]] to the arbiter;
4. the arbiter decrypts and returns Σ_k u_k + r mod n (it checks the request holds one value per row
   of the batch); the active party removes r, adds its own u_active = X_a θ_a (with the intercept)
   and applies the sigmoid (scores [1 − p, p]) or maps the value back to the target's scale.

What each party learns (semi-honest, as in training): the **active party** only the sum over the
passive parties of their partial scores, per scored row — with exactly one passive party that *is*
that party's partial score X_k θ_k (the sum is what the active party needs to score; a linear model
cannot hide it from the party that holds the result); the **arbiter** only uniform residues of Z_n
(and the number of rows and batches); the **passive parties** nothing beyond what PSI tells them
(a fresh ciphertext each; they receive no message at all after the key). Collusion of the arbiter
with the active party decrypts each [[u_k]], as in training. The fixed-point encoding error is
2^-(frac_bits + 1) per passive party (about 1e-10 at the default 32 bits), far below the 1e-6 at
which scoring reproduces the run's own test predictions.

This differs from training's own test evaluation, which sends plaintext partial scores per party
(FATE's inference): scoring a saved model reveals strictly less to the active party.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import Method, Role
from securevfl.methods.engine.kept import ScoringSide
from securevfl.methods.engine.loop import Evaluation, SavedSide
from securevfl.methods.engine.split import side_role
from securevfl.methods.hetero_lr.protocol import (
    ABSENT,
    PUBLIC_KEY,
    THETA,
    HeteroLROptions,
    KeyPair,
    Theta,
    decrypt_masked,
    design_matrix,
    make_backend,
    output_scores,
    receive_key,
    send_masked,
    spread,
)
from securevfl.privacy.paillier import (
    EncryptedTensor,
    PaillierBackend,
    generate_keypair,
)
from securevfl.privacy.paillier.ring_masks import RandBelow

SCORE_PARTIAL = "hetero-lr.score.enc_partial"
MASKED_SCORE = "hetero-lr.score.masked_sum"
SCORE_UNMASKED = "hetero-lr.score.decrypted_masked"


@dataclass(frozen=True)
class JointScoreTags:
    """The tags of one use of the joint scoring protocol: [[u_k]] in, the masked sum out, its residues back."""

    partial: str
    masked: str
    unmasked: str


#: Scoring a saved model.
SCORING = JointScoreTags(SCORE_PARTIAL, MASKED_SCORE, SCORE_UNMASKED)
#: Training's validation rows (early stopping), scored as a saved model scores new rows.
VALIDATION = JointScoreTags("hetero-lr.validate.enc_partial", "hetero-lr.validate.masked_sum",
                            "hetero-lr.validate.decrypted_masked")


def send_partial(ctx: PartyContext, backend: PaillierBackend, frac_bits: int, u: np.ndarray, tag: str) -> None:
    """A passive party's step: [[u_k]] (fixed point at ``frac_bits``) to the active party."""
    with ctx.meter.crypto("paillier.encrypt"):
        encrypted = backend.encrypt(u, frac_bits=frac_bits)
    with ctx.meter.serialize():
        wire = encrypted.to_bytes()
    ctx.send(ctx.active, tag, wire)


def received_scores(ctx: PartyContext, backend: PaillierBackend, party: str, rows: int, frac_bits: int,
                    tag: str) -> EncryptedTensor:
    """``party``'s [[u_k]], checked: one unpacked ciphertext per row it scores, at ``frac_bits``."""
    wire = ctx.recv(party, tag)
    if not isinstance(wire, bytes):
        raise ProtocolError(f"{party} sent malformed partial scores (expected ciphertext bytes)")
    with ctx.meter.serialize():
        score = EncryptedTensor.from_bytes(wire, backend)
    if score.is_packed or score.shape != (rows,) or score.scale_bits != frac_bits:
        raise ProtocolError(f"{party} sent partial scores of shape {score.shape} at {score.scale_bits} "
                            f"fraction bits; the batch has {rows} rows at {frac_bits}")
    return score


def encrypted_sum(ctx: PartyContext, backend: PaillierBackend, passives: tuple[str, ...], rows: int, frac_bits: int,
                  tag: str, present: dict[str, np.ndarray] | None = None) -> EncryptedTensor:
    """Σ_k [[u_k]] over the passive parties' messages, each checked: one ciphertext per row, unpacked.

    ``present`` (partial coverage): which of the ``rows`` each passive party holds and scored; its score is
    left out of the others (a row no passive party holds gets a fresh encryption of zero).
    """
    if not passives and present is None:  # (every passive party left out: a fresh encryption of zero per row)
        raise ProtocolError("hetero-lr scores with at least one passive party")
    if present is not None:
        masks = {p: present.get(p, np.ones(rows, dtype=bool)) for p in passives}
        parts = [(received_scores(ctx, backend, p, int(masks[p].sum()), frac_bits, tag), masks[p]) for p in passives]
        with ctx.meter.crypto("paillier.add"):
            return spread(backend, parts, rows, frac_bits)
    total: EncryptedTensor | None = None
    for p in passives:
        score = received_scores(ctx, backend, p, rows, frac_bits, tag)
        with ctx.meter.crypto("paillier.add"):
            total = score if total is None else total + score
    assert total is not None
    return total


def passive_scores(ctx: PartyContext, backend: PaillierBackend, passives: tuple[str, ...], rows: int,
                   frac_bits: int, randbelow: RandBelow | None, tags: JointScoreTags,
                   present: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """The active party's step: Σ_k u_k of the passive parties, decrypted by the arbiter behind a uniform mask.

    ``present``: see :func:`encrypted_sum`; the arbiter decrypts one value per row either way.
    """
    total = encrypted_sum(ctx, backend, passives, rows, frac_bits, tags.partial, present)
    return send_masked(ctx, tags.masked, total, randbelow, reply=tags.unmasked)


def absent_count(active: PartyData, passives: tuple[str, ...]) -> int:
    """How many absent biases the active party trains: one per passive party where some does not hold some row.

    Only the active party knows (``active.coverage``); at full coverage there are none, and the protocol is
    the one of the rows every party holds, message for message.
    """
    return 0 if active.coverage is None else len(passives)


def absent_bias(bias: np.ndarray, passives: tuple[str, ...], present: dict[str, np.ndarray], rows: int) -> np.ndarray:
    """Per row, the sum of the absent biases of the passive parties that do not hold it (0 without biases)."""
    total = np.zeros(rows)
    for p, b in zip(passives, bias, strict=False):
        if p in present:
            total = total + b * ~present[p]
    return total


class _DataScorer(ScoringSide):
    """A data party's scoring side: the arbiter's fresh public key, and its own saved θ_k."""

    def __init__(self, method: Method[Any], data: PartyData, options: HeteroLROptions, passives: tuple[str, ...] = (),
                 intercept: bool = False) -> None:
        super().__init__(method, data, passives)
        self.options = options
        self.intercept = intercept
        self.backend: PaillierBackend | None = None
        self._scored = 0

    def build(self, ctx: PartyContext) -> None:
        self.backend = receive_key(ctx, self.options)
        self.state.modules[THETA] = Theta(np.zeros(self.data.n_features + int(self.intercept)))

    def theta(self) -> np.ndarray:
        """The saved θ_k (float64)."""
        module = self.state.modules[THETA]
        assert isinstance(module, Theta)
        return module.values()

    def partial(self, X: np.ndarray) -> np.ndarray:
        """u_k = X_k θ_k on a batch (with the intercept column at the active party)."""
        return design_matrix(X, self.intercept) @ self.theta()

    def scored(self, rows: int) -> None:
        """Count the rows scored; after the last one release the backend's workers (recreated on demand)."""
        self._scored += rows
        if self._scored >= len(self.data.X_test) and self.backend is not None:
            self.backend.close()


class PassiveScorer(_DataScorer):
    """A passive party: [[X_k θ_k]] to the active party; it receives nothing back."""

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        assert self.backend is not None
        with ctx.meter.compute():
            u = self.partial(X)
        send_partial(ctx, self.backend, self.options.frac_bits, u, SCORING.partial)
        self.scored(len(X))
        return None


class ActiveScorer(_DataScorer):
    """The active party: Σ_k [[u_k]] decrypted by the arbiter behind a uniform mask, plus its own u, scored.

    A passive party left out (:attr:`silent`: down at batch scoring or in serving) sends nothing: its
    score is left out and its absent bias stands in, as for a row it does not hold — so only a model that
    learned absent biases (trained on rows some passive party does not hold) can leave one out. Serving
    takes a restarted passive party back: the arbiter sends it the session's public key again
    (:meth:`ArbiterScorer.rejoined`).
    """

    collects = takes_back = True

    def __init__(self, method: Method[Any], data: PartyData, options: HeteroLROptions, passives: tuple[str, ...],
                 randbelow: RandBelow | None = None) -> None:
        super().__init__(method, data, options, passives, intercept=options.fit_intercept)
        self.randbelow = randbelow

    def load_saved(self, saved: SavedSide) -> None:
        """Load θ (and the absent biases, where the model was trained on every row and keeps them)."""
        if ABSENT in saved.weights:
            self.state.modules[ABSENT] = Theta(np.zeros(len(self.passives)))
        self.leave_out = ABSENT in saved.weights  # a party left out needs the bias that stands in for it
        super().load_saved(saved)

    def bias(self) -> np.ndarray:
        """The saved absent biases, one per passive party (empty: none saved)."""
        module = self.state.modules.get(ABSENT)
        return module.values() if isinstance(module, Theta) else np.zeros(0)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        assert self.backend is not None
        present = self.present
        if self.silent:  # left out: it holds none of these rows, and sends nothing
            none = np.zeros(len(X), dtype=bool)
            present = {**(present or {}), **{p: none for p in self.silent}}
        senders = tuple(p for p in self.passives if p not in self.silent)
        passive_sum = passive_scores(ctx, self.backend, senders, len(X), self.options.frac_bits,
                                     self.randbelow, SCORING, present)
        with ctx.meter.compute():
            logits = self.partial(X) + passive_sum
            if present is not None:  # rows a passive party does not hold: its score left out, its absent bias in
                logits = logits + absent_bias(self.bias(), self.passives, present, len(X))
            scores = output_scores(self.objective, logits)
        self.scored(len(X))
        return Evaluation(scores)


class ArbiterScorer(ScoringSide):
    """The arbiter: a fresh key pair per scoring run; decrypts one masked sum per batch. It holds no part."""

    def __init__(self, method: Method[Any], data: PartyData, options: HeteroLROptions,
                 keypair: KeyPair | None = None) -> None:
        super().__init__(method, data)
        self.options = options
        self.keypair = keypair  # tests may inject a pre-generated key pair, as in training
        self.backend: PaillierBackend | None = None
        self._public = b""
        self._scored = 0

    def build(self, ctx: PartyContext) -> None:
        options = self.options
        with ctx.meter.crypto("paillier.keygen"):
            public_key, private_key = self.keypair or generate_keypair(
                options.key_bits, insecure_allow_small_key=options.insecure_allow_small_key)
        self.backend = make_backend(options, public_key, private_key)
        self._public = public_key.to_bytes()
        ctx.broadcast((ctx.active, *ctx.passives), PUBLIC_KEY, self._public)

    def rejoined(self, ctx: PartyContext, peer: str) -> None:
        """Serving: a restarted passive party gets this session's public key, as at set-up (the key is public)."""
        ctx.send(peer, PUBLIC_KEY, self._public)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        assert self.backend is not None
        decrypt_masked(ctx, self.backend, ctx.active, SCORING.masked, reply=SCORING.unmasked, count=len(X))
        self._scored += len(X)
        if self._scored >= len(self.data.X_test):
            self.backend.close()
        return None


def arbiter_data(scenario: Scenario, name: str, train_rows: int = 0) -> PartyData:
    """The arbiter's view of a run: no column, only row counts (to score, from the plan; to train, aligned)."""
    rows = len(scenario.test)
    nothing = np.zeros((0, 0))
    return PartyData(name=name, feature_names=(), X_train=np.zeros((train_rows, 0)), X_test=np.zeros((rows, 0)),
                     X_unaligned=nothing,
                     ids_train=np.zeros(train_rows, dtype=object), ids_unaligned=np.zeros(0, dtype=object),
                     n_classes=scenario.n_classes, task=scenario.task)


def scoring_roles(method: Method[Any], scenario: Scenario, options: HeteroLROptions, arbiter: str, *,
                  randbelow: RandBelow | None = None, keypair: KeyPair | None = None) -> dict[str, Role]:
    """One scoring role per data party and one for the arbiter (it gets no data, only the row count)."""
    passives = tuple(scenario.passives)
    roles: dict[str, Role] = {p: side_role(PassiveScorer(method, scenario.party_data(p), options))
                              for p in passives}
    roles[scenario.active] = side_role(ActiveScorer(method, scenario.party_data(scenario.active), options, passives,
                                                    randbelow))
    roles[arbiter] = side_role(ArbiterScorer(method, arbiter_data(scenario, arbiter), options, keypair))
    return roles


__all__ = ["absent_bias", "absent_count", "received_scores",
           "MASKED_SCORE", "SCORE_PARTIAL", "SCORE_UNMASKED", "SCORING", "VALIDATION", "ActiveScorer",
           "ArbiterScorer", "JointScoreTags", "PassiveScorer", "arbiter_data", "encrypted_sum", "passive_scores",
           "scoring_roles", "send_partial"]
