"""VFedTrans with FedSVD, the baseline of the APC-VFL paper.

Huang et al., WWW 2023; Chai et al., "Practical lossless federated singular vector
decomposition", KDD 2022.

Two extra roles run next to the data parties: a trusted ``keygen`` and a third-party ``server``.
Five exchanges for two parties, exactly those of the APC-VFL paper's Appendix E:

1. keygen -> active: ``P`` (m x m) and ``Q_active``; 2. keygen -> passive: ``P`` and ``Q_passive``;
3. active -> server: ``P X_a Q_a``; 4. passive -> server: ``P X_p Q_p``;
5. server -> active: ``U' S`` from the SVD of the concatenated masked blocks.

The active party unmasks ``U S = P^T U' S`` — the federated representation of the aligned rows
(its width is the total number of features: the "embedding dimension constraint" the APC-VFL
paper points out) — and distils it into a student autoencoder over its own features exactly as
APC-VFL's step 3 (Eq. 5), then trains the logistic-regression probe on the student's latents of
all its rows. Inference needs the active party alone: the saved model is **standalone** (the active
party keeps the student ``g3`` and the probe, :mod:`securevfl.methods.apcvfl.saved`; the other
parties, helpers included, keep nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation import codec
from securevfl.federation.runtime import PartyContext
from securevfl.methods.apcvfl import _stage, exchanged_rows, local_rows, student_probe, student_scoring_roles
from securevfl.methods.apcvfl.fedsvd import (
    Urandom,
    fedsvd_footprint_bytes,
    generate_masks,
    mask_block,
    server_svd,
    unmask_left,
)
from securevfl.methods.apcvfl.models import (
    DISTILL_LOSSES,
    FitSettings,
    build_autoencoder,
    fit_autoencoder,
    parse_widths,
)
from securevfl.methods.apcvfl.saved import kept_model
from securevfl.methods.base import ActiveOutcome, Method, Role, TrainConfig, as_tensor, register_method
from securevfl.methods.engine.kept import Keep, KeptRole
from securevfl.settings import setting

KEYGEN = "keygen"
SERVER = "server"
MASKS = "vfedtrans.fedsvd.masks"
MASKED_BLOCK = "vfedtrans.fedsvd.masked_block"
MASKED_US = "vfedtrans.fedsvd.masked_us"


@dataclass(frozen=True)
class VFedTransOptions:
    """Student and probe settings as in APC-VFL.

    ``distill_loss`` defaults to ``mae``: the APC-VFL paper (Sec. 4.3) applies "the MAE error as
    proposed in (Huang et al., 2023a)" — MAE is VFedTrans's own distillation loss; ``mse`` stays
    available. ``student_hidden`` are the student's hidden widths (its latent width is fixed by
    FedSVD to the total feature count). ``max_aligned_rows`` guards the dense ``m x m`` mask
    (m^2 floats per party).
    """

    distill_loss: str = setting(
        "mae", help="Distillation loss of the student: mae (L1, VFedTrans's own) | mse (squared L2).")
    lam: float = setting(0.01, help="Weight of the distillation term in the student's loss, >= 0.")
    patience: int = setting(10, help="Early-stopping patience of the student's training, in epochs, >= 1.")
    max_epochs: int = setting(0, help="Most epochs of the student's training (0: --epochs).")
    batch_size: int = setting(0, help="Batch size of the student's training (0: --batch-size).")
    val_fraction: float = setting(
        0.1, help="Share of rows held out to validate the student (early stopping), in [0, 1).")
    student_hidden: str = setting(
        "256", help="Student's hidden widths, comma-separated (its latent width is the total feature count).")
    cv_folds: int = setting(
        0, help="0: off; >= 2: also cross-validate the probe on all the active party's rows (extra.cv).")
    include_test_rows: bool = setting(
        True, help="Exchange and distil the aligned test rows too (labels unused); false: never exchanged.")
    probe_c: float = setting(1.0, help="Inverse L2 strength C of the logistic-regression probe, > 0.")
    max_aligned_rows: int = setting(
        5000, help="Most aligned rows FedSVD takes (its m x m mask is m^2 floats per party).")

    def __post_init__(self) -> None:
        if self.distill_loss not in DISTILL_LOSSES:
            raise ConfigError(f"distill_loss must be one of {', '.join(DISTILL_LOSSES)}, got {self.distill_loss!r}")
        if not self.lam >= 0 or self.patience < 1 or self.max_epochs < 0 or self.batch_size < 0:
            raise ConfigError("lam >= 0, patience >= 1, max_epochs and batch_size >= 0 (0: the run's value)")
        if self.cv_folds == 1 or self.cv_folds < 0:
            raise ConfigError(f"cv_folds must be 0 (off) or >= 2, got {self.cv_folds}")
        if not 0 <= self.val_fraction < 1 or not self.probe_c > 0 or self.max_aligned_rows < 1:
            raise ConfigError("val_fraction in [0, 1), probe_c > 0, max_aligned_rows >= 1")
        parse_widths(self.student_hidden, "student_hidden")

    def fit_settings(self, config: TrainConfig) -> FitSettings:
        return FitSettings(max_epochs=self.max_epochs or config.epochs,
                           batch_size=self.batch_size or config.batch_size, patience=self.patience,
                           val_fraction=self.val_fraction, lr=config.lr, seed=config.seed)


def keygen_role(n_rows: int, widths: dict[str, int], urandom: Urandom | None = None) -> Role:
    """The trusted key generator: fresh orthogonal masks, ``(P, Q_i)`` to each data party.

    ``n_rows`` and ``widths`` are public set-up metadata (aligned count and feature counts).
    """

    def role(ctx: PartyContext) -> None:
        ctx.stage = "generate masks"
        with ctx.meter.crypto("fedsvd.masks"):
            masks = generate_masks(n_rows, widths, urandom)
            P = masks.P.astype(np.float32)
        for party in widths:
            ctx.send(party, MASKS, {"P": P, "Q": masks.Q[party].astype(np.float32)})

    return role


def data_party_step(ctx: PartyContext, X: np.ndarray) -> np.ndarray:
    """Receive ``(P, Q_i)``, send ``P X_i Q_i`` to the server; returns ``P`` (needed to unmask)."""
    ctx.stage = "mask aligned rows"
    masks = ctx.recv(KEYGEN, MASKS)
    P, Q = np.asarray(masks["P"], dtype=np.float64), np.asarray(masks["Q"], dtype=np.float64)
    with ctx.meter.crypto("fedsvd.mask"):
        block = mask_block(P, X, Q).astype(np.float32)
    ctx.send(SERVER, MASKED_BLOCK, block)
    return P


def passive_role(data: PartyData, options: VFedTransOptions) -> Role:
    def role(ctx: PartyContext) -> None:
        data_party_step(ctx, exchanged_rows(data, options.include_test_rows))

    return role


def server_role(order: tuple[str, ...]) -> Role:
    """The third-party server: SVD of the masked blocks, ``U' S`` to the active party only."""

    def role(ctx: PartyContext) -> None:
        blocks = [ctx.recv(p, MASKED_BLOCK) for p in order]
        if len({len(b) for b in blocks}) != 1:
            raise ProtocolError(f"masked blocks disagree on the number of aligned rows: {[b.shape for b in blocks]}")
        ctx.stage = "SVD of masked data"
        with ctx.meter.compute():
            us, _ = server_svd(blocks)
        ctx.send(ctx.active, MASKED_US, us.astype(np.float32))

    return role


def active_role(data: PartyData, options: VFedTransOptions, config: TrainConfig, widths: dict[str, int]) -> KeptRole:
    """FedSVD as a data party, then the student autoencoder and the probe (active party alone); it keeps both."""

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        if data.n_features == 0:
            raise ConfigError("vfedtrans needs the active party to hold features")
        device = ctx.device
        X_exch = exchanged_rows(data, options.include_test_rows)
        X_all = local_rows(data, options.include_test_rows)
        P = data_party_step(ctx, X_exch)
        ctx.stage = "receive U'S"
        masked_us = ctx.recv(SERVER, MASKED_US)
        received = len(codec.encode(masked_us))
        with ctx.meter.crypto("fedsvd.unmask"):
            fed = unmask_left(P, masked_us).astype(np.float32)
        ctx.progress(epoch=1, epochs=2, loss=0.0)
        ctx.stage = "student autoencoder"
        settings = options.fit_settings(config)
        with ctx.meter.compute():
            student = build_autoencoder(data.n_features, (*parse_widths(options.student_hidden, "student_hidden"),
                                                          fed.shape[1]), config.seed, f"{ctx.name}.g3").to(device)
            teacher = torch.zeros(len(X_all), fed.shape[1], device=device)
            teacher[: len(fed)] = as_tensor(fed, device)
            aligned = torch.zeros(len(X_all), dtype=torch.bool, device=device)
            aligned[: len(fed)] = True
            stage = _stage(fit_autoencoder(student, as_tensor(X_all, device), settings, f"{ctx.name}.g3",
                                           teacher=teacher, aligned=aligned, lam=options.lam,
                                           kind=options.distill_loss))
            outcome, probe = student_probe(data, student, options, config, device)
        ctx.progress(epoch=2, epochs=2, loss=stage["best_loss"])
        passive_widths = [w for p, w in widths.items() if p != ctx.name]
        outcome.extra.update({
            "method": "vfedtrans", "distill_loss": options.distill_loss, "stages": {"g3_student": stage},
            "federated_dim": int(fed.shape[1]),
            "communication": {
                "messages": 2 * len(widths) + 1, "rounds": 3, "aligned_rows_exchanged": len(X_exch),
                "received_us_bytes": received,
                "paper_footprint_bytes": fedsvd_footprint_bytes(len(X_exch), data.n_features, passive_widths),
                "paper_formula": "Appendix E, Eq. 10 (Q_i sent as its n_i x n_i block, not n_i x x_total)",
                "meter": "report.cost.comm has the bytes/messages the runtime metered per link"}})
        outcome.history = [{"stage": 1.0, **stage}]
        keep(kept_model({"g3": student}, probe.module(), labels=True))
        return outcome

    return KeptRole(role)


@register_method
class VFedTrans(Method[VFedTransOptions]):
    """FedSVD representation of the aligned rows, distilled into the active party's encoder."""

    name = "vfedtrans"
    summary = "VFedTrans: FedSVD (keygen + server, 5 exchanges) then distillation at the active party"
    Options = VFedTransOptions
    saves_outside_engine = True
    standalone = True
    urandom: Urandom | None = None  # tests may inject a deterministic source for the mask seed

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        self.require_passives(scenario)
        clash = {KEYGEN, SERVER} & set(scenario.parties)
        if clash:
            raise ConfigError(f"party names {sorted(clash)} are reserved for vfedtrans' extra roles")
        datas = {p: scenario.party_data(p) for p in scenario.parties}
        n_rows = len(exchanged_rows(datas[scenario.active], self.options.include_test_rows))
        if n_rows > self.options.max_aligned_rows:
            raise ConfigError(f"{n_rows} aligned rows need a dense {n_rows}x{n_rows} FedSVD mask per party; "
                              f"raise max_aligned_rows (now {self.options.max_aligned_rows}) to allow it")
        widths = {p: datas[p].n_features for p in scenario.parties if datas[p].n_features}
        if scenario.active not in widths:
            raise ConfigError("vfedtrans needs the active party to hold features")
        roles: dict[str, Role] = {p: passive_role(datas[p], self.options) for p in scenario.passives}
        roles[scenario.active] = active_role(datas[scenario.active], self.options, self.config, widths)
        roles[KEYGEN] = keygen_role(n_rows, widths, self.urandom)
        roles[SERVER] = server_role(tuple(widths))
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        return student_scoring_roles(self, scenario)

    def standalone_learns(self, active: str) -> str:
        return (f"{active} holds this model alone: its student autoencoder g3 and the probe, trained on its own "
                "columns and labels. In training the data parties ran FedSVD with the key generator and the server "
                f"(each data party sent the server its masked aligned rows; {active} received the masked U'S and "
                "distilled g3 from the unmasked representation); the other parties saved nothing and take no part "
                "in scoring.")


__all__ = ["KEYGEN", "SERVER", "VFedTrans", "VFedTransOptions"]
