"""APC-VFL: active-participant-centric VFL with a single exchange of aligned latents.

Steps (Irureta et al., "Towards Active Participant Centric Vertical Federated Learning: Some
Representations May Be All You Need", Sec. 4, Fig. 3):

1. every party trains a local overcomplete autoencoder ``g1`` on all of its rows, alone;
2. each passive party sends the ``g1`` latents of the aligned rows to the active party — ONE
   message per passive party, the only communication of the method;
3. the active party trains a joint autoencoder ``g2`` on ``[g1_active(x_a) | z_p1 | ...]`` and
   distils its latent into a student autoencoder ``g3`` over its own features (Eq. 5:
   reconstruction on every row + ``lam`` x distillation on aligned rows only);
4. a logistic regression on ``g3``'s latents of all its labelled rows, so training and
   prediction need the active party alone (aligned and unaligned rows alike).

Also here: ``apcvfl-ablation`` (``g3`` without distillation, no communication), ``local-logreg``
(logistic regression on the active party's raw features: the paper's *Local*), ``apcvfl-splitnn``
(the adjusted APC-VFL of Sec. 6 / Fig. 4 for fully aligned data: the probe is trained on ``g2``'s
joint latents) and the ``apcvfl-paper[-aN]`` partition presets of Appendix A.

Saved models (``--model-dir``, :mod:`.saved`): ``apcvfl``, ``apcvfl-ablation`` and ``local-logreg``
are **standalone**: the active party keeps its student ``g3`` (``local-logreg``: none) and the
probe, and scores its own rows alone (no passive party, no PSI). ``apcvfl-splitnn`` is joint: every
party keeps its ``g1``, the active party also ``g2`` and the probe, and scoring runs training's
information flow (see :class:`APCVFLJoint`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from securevfl.data.datasets import Dataset
from securevfl.data.partition import PartitionSpec, register_preset
from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ConfigError
from securevfl.federation import codec
from securevfl.federation.runtime import PartyContext
from securevfl.methods.apcvfl.models import (
    DISTILL_LOSSES,
    FitResult,
    FitSettings,
    SymmetricAutoencoder,
    build_autoencoder,
    fit_autoencoder,
    parse_widths,
)
from securevfl.methods.apcvfl.probe import FittedProbe, cross_validate_probe, fit_probe
from securevfl.methods.apcvfl.saved import JointActiveScoring, JointPassiveScoring, StudentScoring, kept_model
from securevfl.methods.base import ActiveOutcome, Method, Role, TrainConfig, as_tensor, register_method
from securevfl.methods.engine.kept import Keep, KeptRole
from securevfl.methods.engine.split import side_role
from securevfl.settings import setting

LATENTS = "apcvfl.exchange.aligned_latents"
BYTES_PER_FLOAT = 4


# -- options -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class APCOptions:
    """APC-VFL options (defaults: Table 3 and Appendix B of the paper).

    ``max_epochs`` / ``batch_size`` of 0 take ``TrainConfig.epochs`` / ``batch_size`` (the paper:
    200 epochs, batch 8 on Breast Cancer, 128 on the large datasets). ``cv_folds`` > 0 also
    cross-validates the probe on all of the active party's rows (the paper's protocol) into
    ``extra["cv"]``. ``include_test_rows``: the aligned test rows are exchanged and distilled
    like the other aligned rows (paper's protocol; labels are never used); set it false for a
    strictly held-out test set the federation never sees.
    """

    distill_loss: str = setting("mse", help="Distillation loss of the student g3: mse (squared L2) | mae (L1).")
    lam: float = setting(0.01, help="Weight of the distillation term in the student's loss (Eq. 5), >= 0.")
    patience: int = setting(10, help="Early-stopping patience of each autoencoder's training, in epochs, >= 1.")
    max_epochs: int = setting(0, help="Most epochs of each autoencoder's training (0: --epochs).")
    batch_size: int = setting(0, help="Batch size of the autoencoders' training (0: --batch-size).")
    val_fraction: float = setting(
        0.1, help="Share of rows held out to validate each autoencoder (early stopping), in [0, 1).")
    active_encoder: str = setting(
        "64,128", help="Active party's local encoder g1 widths, comma-separated (last: its latent).")
    passive_encoder: str = setting(
        "128,256", help="Each passive party's local encoder g1 widths (last: the latent it sends once).")
    joint_encoder: str = setting("256,256", help="Active party's joint encoder g2 widths (last: the joint latent).")
    student_encoder: str = setting(
        "256,256", help="Student encoder g3 widths over the active party's features (last = joint_encoder's last).")
    cv_folds: int = setting(
        0, help="0: off; >= 2: also cross-validate the probe on all the active party's rows (extra.cv).")
    include_test_rows: bool = setting(
        True, help="Exchange and distil the aligned test rows too (labels unused); false: never exchanged.")
    probe_c: float = setting(1.0, help="Inverse L2 strength C of the logistic-regression probe, > 0.")

    def __post_init__(self) -> None:
        if self.distill_loss not in DISTILL_LOSSES:
            raise ConfigError(f"distill_loss must be one of {', '.join(DISTILL_LOSSES)}, got {self.distill_loss!r}")
        if not self.lam >= 0:
            raise ConfigError(f"lam must be >= 0, got {self.lam}")
        if self.patience < 1 or self.max_epochs < 0 or self.batch_size < 0:
            raise ConfigError("patience must be >= 1; max_epochs and batch_size >= 0 (0: the run's value)")
        if not 0 <= self.val_fraction < 1:
            raise ConfigError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.cv_folds == 1 or self.cv_folds < 0:
            raise ConfigError(f"cv_folds must be 0 (off) or >= 2, got {self.cv_folds}")
        if not self.probe_c > 0:
            raise ConfigError(f"probe_c must be > 0, got {self.probe_c}")
        joint = parse_widths(self.joint_encoder, "joint_encoder")
        student = parse_widths(self.student_encoder, "student_encoder")
        parse_widths(self.active_encoder, "active_encoder")
        parse_widths(self.passive_encoder, "passive_encoder")
        if joint[-1] != student[-1]:
            raise ConfigError(f"the student's latent ({student[-1]}) must match the joint latent ({joint[-1]}) "
                              "for feature distillation (M3 = M2, Sec. 4.3)")

    def widths(self, which: str) -> tuple[int, ...]:
        return parse_widths(getattr(self, which), which)

    def fit_settings(self, config: TrainConfig) -> FitSettings:
        return FitSettings(max_epochs=self.max_epochs or config.epochs,
                           batch_size=self.batch_size or config.batch_size, patience=self.patience,
                           val_fraction=self.val_fraction, lr=config.lr, seed=config.seed)


@dataclass(frozen=True)
class LocalProbeOptions:
    """``cv_folds`` > 0 also cross-validates on all of the active party's rows (``extra["cv"]``)."""

    cv_folds: int = setting(
        0, help="0: off; >= 2: also cross-validate the probe on all the active party's rows (extra.cv).")
    probe_c: float = setting(1.0, help="Inverse L2 strength C of the logistic-regression probe, > 0.")

    def __post_init__(self) -> None:
        if self.cv_folds == 1 or self.cv_folds < 0:
            raise ConfigError(f"cv_folds must be 0 (off) or >= 2, got {self.cv_folds}")
        if not self.probe_c > 0:
            raise ConfigError(f"probe_c must be > 0, got {self.probe_c}")


# -- shared pieces -----------------------------------------------------------------------------

def _stage(result: FitResult) -> dict[str, float]:
    return {"epochs": result.epochs, "best_epoch": result.best_epoch, "best_loss": result.best_loss,
            "train_loss": result.train_loss}


def exchanged_rows(data: PartyData, include_test_rows: bool) -> np.ndarray:
    """The aligned rows whose latents cross the wire, in the agreed order (train, then test)."""
    return np.concatenate([data.X_train, data.X_test]) if include_test_rows else data.X_train


def local_rows(data: PartyData, include_test_rows: bool) -> np.ndarray:
    """Every row a party trains its local autoencoder on: aligned (+ test) rows first, then the rest."""
    return np.concatenate([exchanged_rows(data, include_test_rows), data.X_unaligned])


def labelled_rows(data: PartyData) -> tuple[np.ndarray, np.ndarray]:
    """The active party's training rows with labels: aligned training rows and its unaligned rows."""
    X = np.concatenate([data.X_train, data.X_unaligned])
    y = np.concatenate([data.y_train, data.y_unaligned if data.y_unaligned is not None else []]).astype(np.int64)
    return X, y


class ProbeSettings(Protocol):
    """The probe's options (APC-VFL's and VFedTrans's)."""

    @property
    def cv_folds(self) -> int: ...

    @property
    def probe_c(self) -> float: ...


def _probe_outcome(data: PartyData, Z_fit: np.ndarray, y_fit: np.ndarray, Z_test: np.ndarray,
                   cv_folds: int, probe_c: float, seed: int, Z_all: np.ndarray | None,
                   y_all: np.ndarray | None) -> tuple[np.ndarray, dict[str, Any], FittedProbe]:
    """The fitted probe's test scores, the CV report (if asked) and the probe itself (what the party keeps)."""
    probe = fit_probe(Z_fit, y_fit, data.n_classes, probe_c)
    scores = probe.scores(Z_test)
    extra: dict[str, Any] = {}
    if cv_folds and Z_all is not None and y_all is not None:
        extra["cv"] = cross_validate_probe(Z_all, y_all, cv_folds, seed, data.n_classes, probe_c)
    return scores, extra, probe


def apc_footprint_bytes(n_aligned: int, latent_dims: Sequence[int]) -> int:
    """Appendix E.1, Eq. 6: ``|D_A| * z_p * 4`` bytes, summed over passive parties."""
    return int(sum(n_aligned * z * BYTES_PER_FLOAT for z in latent_dims))


def _send_latents(ctx: PartyContext, data: PartyData, options: APCOptions, config: TrainConfig,
                  joint_only: bool) -> SymmetricAutoencoder:
    """Train ``g1``, send the aligned rows' latents once; returns ``g1``."""
    device = ctx.device
    settings = options.fit_settings(config)
    if joint_only:
        X_fit, X_send = data.X_train, np.concatenate([data.X_train, data.X_test])
    else:
        X_fit = local_rows(data, options.include_test_rows)
        X_send = exchanged_rows(data, options.include_test_rows)
    ctx.stage = "g1: local autoencoder"
    with ctx.meter.compute():
        g1 = build_autoencoder(data.n_features, options.widths("passive_encoder"), config.seed,
                               f"{ctx.name}.g1").to(device)
        fit_autoencoder(g1, as_tensor(X_fit, device), settings, f"{ctx.name}.g1")
        latents = g1.encode(as_tensor(X_send, device)).float().cpu()
    ctx.stage = "send aligned latents"
    ctx.send(ctx.active, LATENTS, latents)
    return g1


def passive_role(data: PartyData, options: APCOptions, config: TrainConfig) -> Role:
    """Train ``g1`` on all own rows, send the aligned rows' latents once, stop (it keeps nothing)."""

    def role(ctx: PartyContext) -> None:
        _send_latents(ctx, data, options, config, joint_only=False)

    return role


def joint_passive_role(data: PartyData, options: APCOptions, config: TrainConfig) -> KeptRole:
    """A passive party of the adjusted method on fully aligned data; it keeps ``g1`` (it scores with it).

    ``g1`` trains on the aligned training rows only and the message carries training then test latents.
    """

    def body(ctx: PartyContext, keep: Keep) -> None:
        keep(kept_model({"g1": _send_latents(ctx, data, options, config, joint_only=True)}))

    return KeptRole(body)


def _received_latents(ctx: PartyContext, passives: Sequence[str], n_rows: int) -> tuple[list[torch.Tensor], int]:
    received, n_bytes = [], 0
    for p in passives:
        z = ctx.recv(p, LATENTS)
        if not isinstance(z, torch.Tensor) or z.ndim != 2 or z.shape[0] != n_rows:
            raise ConfigError(f"{p} sent latents of shape {getattr(z, 'shape', None)}; expected ({n_rows}, z_p)")
        n_bytes += len(codec.encode(z))
        received.append(z.to(ctx.device))
    return received, n_bytes


def _communication(n_rows: int, received: Sequence[torch.Tensor], measured: int, passives: Sequence[str]) -> dict:
    dims = [int(z.shape[1]) for z in received]
    return {"messages": len(passives), "links": [f"{p}->active party" for p in passives],
            "rounds": 1 if passives else 0, "aligned_rows_exchanged": n_rows, "passive_latent_dims": dims,
            "measured_payload_bytes": measured,
            "paper_footprint_bytes": apc_footprint_bytes(n_rows, dims),
            "paper_formula": "Appendix E.1, Eq. 6: |D_A| * z_p * 4 bytes per passive party",
            "meter": "report.cost.comm has the bytes/messages the runtime metered per link"}


def active_role(data: PartyData, options: APCOptions, config: TrainConfig, passives: tuple[str, ...], *,
                distill: bool = True) -> KeptRole:
    """Steps 1-4 at the active party; ``distill=False`` is the ablation (no exchange, no teacher).

    It keeps its student ``g3`` and the probe: the standalone model.
    """

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        if data.n_features == 0:
            raise ConfigError("APC-VFL needs the active party to hold features (its encoders read them)")
        device = ctx.device
        settings = options.fit_settings(config)
        X_exch = exchanged_rows(data, options.include_test_rows)
        X_all = local_rows(data, options.include_test_rows)
        n_exch = len(X_exch)
        stages: dict[str, dict[str, float]] = {}
        extra: dict[str, Any] = {"method": "apcvfl" if distill else "apcvfl-ablation",
                                 "distill_loss": options.distill_loss if distill else None}
        teacher = aligned = None
        if distill:
            ctx.stage = "g1: local autoencoder"
            with ctx.meter.compute():
                g1 = build_autoencoder(data.n_features, options.widths("active_encoder"), config.seed,
                                       f"{ctx.name}.g1").to(device)
                stages["g1_active"] = _stage(fit_autoencoder(g1, as_tensor(X_all, device), settings,
                                                             f"{ctx.name}.g1"))
                own = g1.encode(as_tensor(X_exch, device))
            ctx.progress(epoch=1, epochs=4, loss=stages["g1_active"]["best_loss"])
            ctx.stage = "receive aligned latents"
            received, measured = _received_latents(ctx, passives, n_exch)
            extra["communication"] = _communication(n_exch, received, measured, passives)
            ctx.stage = "g2: joint autoencoder"
            with ctx.meter.compute():
                joint_in = torch.cat([own, *received], dim=1)
                g2 = build_autoencoder(joint_in.shape[1], options.widths("joint_encoder"), config.seed,
                                       f"{ctx.name}.g2").to(device)
                stages["g2_joint"] = _stage(fit_autoencoder(g2, joint_in, settings, f"{ctx.name}.g2"))
                z_joint = g2.encode(joint_in)
                teacher = torch.zeros(len(X_all), z_joint.shape[1], device=device)
                teacher[:n_exch] = z_joint
                aligned = torch.zeros(len(X_all), dtype=torch.bool, device=device)
                aligned[:n_exch] = True
            ctx.progress(epoch=2, epochs=4, loss=stages["g2_joint"]["best_loss"])
        else:
            extra["communication"] = {"messages": 0, "rounds": 0, "paper_footprint_bytes": 0}
        ctx.stage = "g3: student autoencoder"
        with ctx.meter.compute():
            g3 = build_autoencoder(data.n_features, options.widths("student_encoder"), config.seed,
                                   f"{ctx.name}.g3").to(device)
            stages["g3_student"] = _stage(fit_autoencoder(
                g3, as_tensor(X_all, device), settings, f"{ctx.name}.g3", teacher=teacher, aligned=aligned,
                lam=options.lam if distill else 0.0, kind=options.distill_loss))
        ctx.progress(epoch=3, epochs=4, loss=stages["g3_student"]["best_loss"])
        ctx.stage = "step 4: classifier on g3 latents"
        with ctx.meter.compute():
            outcome, probe = student_probe(data, g3, options, config, device)
        ctx.progress(epoch=4, epochs=4, loss=stages["g3_student"]["best_loss"])
        outcome.extra.update(extra)
        outcome.extra["stages"] = stages
        outcome.history = [{"stage": float(i + 1), **s} for i, s in enumerate(stages.values())]
        keep(kept_model({"g3": g3}, probe.module(), labels=True))
        return outcome

    return KeptRole(role)


def student_probe(data: PartyData, g3: SymmetricAutoencoder, options: ProbeSettings, config: TrainConfig,
                  device: Any) -> tuple[ActiveOutcome, FittedProbe]:
    """Step 4 at the active party alone: the probe on its student's latents, and the fitted probe.

    Fits on ``g3`` latents of the active party's labelled rows (aligned and unaligned) and
    scores its test rows — from the active party's own data and model only.
    """
    X_fit, y_fit = labelled_rows(data)
    assert data.y_test is not None  # the active party holds the labels
    encode = lambda X: g3.encode(as_tensor(X, device)).cpu().numpy()  # noqa: E731
    Z_fit, Z_test = encode(X_fit), encode(data.X_test)
    Z_all = np.concatenate([Z_fit, Z_test])
    y_all = np.concatenate([y_fit, data.y_test])
    scores, extra, probe = _probe_outcome(data, Z_fit, y_fit, Z_test, options.cv_folds, options.probe_c,
                                          config.seed, Z_all, y_all)
    extra["probe_rows"] = int(len(y_fit))
    return ActiveOutcome(y_true=data.y_test, scores=scores, extra=extra), probe


def probe_on_student(data: PartyData, g3: SymmetricAutoencoder, options: ProbeSettings, config: TrainConfig,
                     device: Any) -> ActiveOutcome:
    """:func:`student_probe`'s outcome (the test rows' scores from the active party alone)."""
    return student_probe(data, g3, options, config, device)[0]


def joint_active_role(data: PartyData, options: APCOptions, config: TrainConfig,
                      passives: tuple[str, ...]) -> KeptRole:
    """Adjusted APC-VFL on fully aligned data (Sec. 6, Fig. 4): probe on ``g2``'s joint latents.

    It keeps its ``g1`` (if it holds features), ``g2`` and the probe.
    """

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        device = ctx.device
        settings = options.fit_settings(config)
        n_train = len(data.X_train)
        stages: dict[str, dict[str, float]] = {}
        parts = []
        kept: dict[str, SymmetricAutoencoder] = {}
        if data.n_features:
            ctx.stage = "g1: local autoencoder"
            with ctx.meter.compute():
                g1 = build_autoencoder(data.n_features, options.widths("active_encoder"), config.seed,
                                       f"{ctx.name}.g1").to(device)
                stages["g1_active"] = _stage(fit_autoencoder(g1, as_tensor(data.X_train, device), settings,
                                                             f"{ctx.name}.g1"))
                parts.append(g1.encode(as_tensor(np.concatenate([data.X_train, data.X_test]), device)))
                kept["g1"] = g1
        ctx.stage = "receive aligned latents"
        received, measured = _received_latents(ctx, passives, n_train + len(data.X_test))
        ctx.stage = "g2: joint autoencoder"
        with ctx.meter.compute():
            joint_in = torch.cat([*parts, *received], dim=1)
            g2 = build_autoencoder(joint_in.shape[1], options.widths("joint_encoder"), config.seed,
                                   f"{ctx.name}.g2").to(device)
            stages["g2_joint"] = _stage(fit_autoencoder(g2, joint_in[:n_train], settings, f"{ctx.name}.g2"))
            Z = g2.encode(joint_in).cpu().numpy()
            assert data.y_train is not None and data.y_test is not None  # the active party holds the labels
            probe = fit_probe(Z[:n_train], data.y_train, data.n_classes, options.probe_c)
            scores = probe.scores(Z[n_train:])
        extra = {"method": "apcvfl-splitnn", "stages": stages,
                 "communication": _communication(n_train + len(data.X_test), received, measured, passives)}
        history = [{"stage": float(i + 1), **s} for i, s in enumerate(stages.values())]
        keep(kept_model({**kept, "g2": g2}, probe.module(), labels=True,
                        passive_latents={p: int(z.shape[1]) for p, z in zip(passives, received, strict=True)}))
        return ActiveOutcome(y_true=data.y_test, scores=scores, history=history, extra=extra)

    return KeptRole(role)


def idle(ctx: PartyContext) -> None:
    """A passive party that takes no part."""
    return None


# -- methods -----------------------------------------------------------------------------------

def student_scoring_roles(method: Method[Any], scenario: Scenario) -> dict[str, Role]:
    """A standalone model's scoring: the active party's side alone (:class:`~.saved.StudentScoring`)."""
    return {scenario.active: side_role(StudentScoring(method, scenario.party_data(scenario.active)))}


@register_method
class APCVFL(Method[APCOptions]):
    """Local autoencoders, one exchange of aligned latents, joint AE, distilled student, probe.

    The saved model is standalone: the active party's student ``g3`` and probe.
    """

    name = "apcvfl"
    summary = "APC-VFL: one exchange of aligned latents, distillation, active-only inference"
    Options = APCOptions
    distill: ClassVar[bool] = True
    saves_outside_engine = True
    standalone = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        if self.distill:
            self.require_passives(scenario)
        roles: dict[str, Role] = {}
        for p in scenario.passives:
            roles[p] = passive_role(scenario.party_data(p), self.options, self.config) if self.distill else idle
        roles[scenario.active] = active_role(scenario.party_data(scenario.active), self.options, self.config,
                                             scenario.passives, distill=self.distill)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        return student_scoring_roles(self, scenario)

    def standalone_learns(self, active: str) -> str:
        if not self.distill:
            return super().standalone_learns(active)
        return (f"{active} holds this model alone: its student autoencoder g3 and the probe, trained on its own "
                "columns and labels. In training each passive party sent it the g1 latents of the aligned rows, "
                "once (g3 was distilled from the joint latents of those rows); the passive parties saved nothing "
                "and take no part in scoring.")


@register_method
class APCVFLAblation(APCVFL):
    """The paper's *Ablation*: the student g3 trained without distillation (no communication)."""

    name = "apcvfl-ablation"
    summary = "APC-VFL ablation: g3 autoencoder on the active party's rows, no distillation, no exchange"
    distill = False


@register_method
class APCVFLJoint(Method[APCOptions]):
    """Adjusted APC-VFL for fully aligned data, to compare with SplitNN (Sec. 6, Fig. 4).

    The saved model is joint: each passive party keeps its ``g1``; the active party its own ``g1``
    (if it holds features), ``g2`` and the probe. What each party learns at scoring: per batch each
    passive party sends the active party the ``g1`` latents of its rows (tag ``apcvfl.score.latents``),
    as it sent those of the aligned rows in training, and nothing else; the passive parties receive
    nothing and learn nothing of the predictions; the active party learns the passive parties'
    latents of the scored rows and the predictions.
    """

    name = "apcvfl-splitnn"
    summary = "APC-VFL adjusted for fully aligned data: probe on g2 joint latents (one exchange)"
    Options = APCOptions
    saves_outside_engine = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        self.require_passives(scenario)
        roles: dict[str, Role] = {p: joint_passive_role(scenario.party_data(p), self.options, self.config)
                                  for p in scenario.passives}
        roles[scenario.active] = joint_active_role(scenario.party_data(scenario.active), self.options,
                                                   self.config, scenario.passives)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        passives = self.require_passives(scenario)
        roles: dict[str, Role] = {p: side_role(JointPassiveScoring(self, scenario.party_data(p))) for p in passives}
        roles[scenario.active] = side_role(JointActiveScoring(self, scenario.party_data(scenario.active), passives))
        return roles


def local_probe_role(data: PartyData, options: LocalProbeOptions, config: TrainConfig) -> KeptRole:
    """Logistic regression on the active party's raw (standardised) features, all labelled rows; it keeps the probe."""

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        if data.n_features == 0:
            raise ConfigError("local-logreg needs the active party to hold features")
        assert data.y_test is not None  # the active party holds the labels
        with ctx.meter.compute():
            X_fit, y_fit = labelled_rows(data)
            scores, extra, probe = _probe_outcome(data, X_fit, y_fit, data.X_test, options.cv_folds,
                                                  options.probe_c, config.seed, np.concatenate([X_fit, data.X_test]),
                                                  np.concatenate([y_fit, data.y_test]))
        extra.update({"method": "local-logreg", "probe_rows": int(len(y_fit)),
                      "communication": {"messages": 0, "rounds": 0, "paper_footprint_bytes": 0}})
        keep(kept_model({}, probe.module(), labels=True))
        return ActiveOutcome(y_true=data.y_test, scores=scores, extra=extra)

    return KeptRole(role)


@register_method
class LocalLogReg(Method[LocalProbeOptions]):
    """The paper's *Local* baseline: logistic regression on the active party's own features."""

    name = "local-logreg"
    summary = "active party alone: logistic regression on its raw features, aligned + unaligned rows"
    Options = LocalProbeOptions
    saves_outside_engine = True
    standalone = True

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        roles: dict[str, Role] = {p: idle for p in scenario.passives}
        roles[scenario.active] = local_probe_role(scenario.party_data(scenario.active), self.options, self.config)
        return roles

    def scoring_roles(self, scenario: Scenario) -> dict[str, Role]:
        return student_scoring_roles(self, scenario)


# -- the paper's partitions (Appendix A) --------------------------------------------------------

#: Breast Cancer Wisconsin: the five features Appendix A gives the active party (a = 5). Its
#: "transfer order" lists the first three; we read it literally: with ``a`` features the active
#: party holds the first ``a - 2`` of the transfer order plus the last two (a = 2: mean texture and
#: worst fractal dimension); every other feature is the passive party's.
BREAST_CANCER_ACTIVE = ("worst compactness", "concave points error", "smoothness error", "mean texture",
                        "worst fractal dimension")
#: UCI Credit Card (Yeh 2009, columns X1..X23), same rule: transfer order X3, X5, X7; base X9, X11.
CREDIT_ACTIVE = ("X3", "X5", "X7", "X9", "X11")
#: The names the same columns carry in the common CSV export of the UCI file.
CREDIT_ALIASES = {"X1": "LIMIT_BAL", "X2": "SEX", "X3": "EDUCATION", "X4": "MARRIAGE", "X5": "AGE",
                  "X6": "PAY_0", "X7": "PAY_2", "X8": "PAY_3", "X9": "PAY_4", "X10": "PAY_5", "X11": "PAY_6",
                  **{f"X{11 + i}": f"BILL_AMT{i}" for i in range(1, 7)},
                  **{f"X{17 + i}": f"PAY_AMT{i}" for i in range(1, 7)}}


@dataclass(frozen=True)
class PaperLayout:
    """Rows of one paper dataset: the active party's rows, the test rows and the default aligned count."""

    active_rows: int
    test_rows: int
    aligned: int


def paper_active_features(dataset: Dataset, a: int) -> tuple[str, list[str]]:
    """``(kind, active features)`` for ``a`` in 2..5 — breast-cancer or credit, detected by column."""
    if not 2 <= a <= 5:
        raise ConfigError(f"the paper's partitions have a in 2..5 active features, got {a}")
    columns = set(dataset.feature_columns)
    pick = lambda initial: list(initial[: a - 2]) + list(initial[3:])  # noqa: E731
    if set(BREAST_CANCER_ACTIVE) <= columns:
        return "breast-cancer", pick(BREAST_CANCER_ACTIVE)
    if set(CREDIT_ACTIVE) <= columns:
        return "credit", pick(CREDIT_ACTIVE)
    if {CREDIT_ALIASES[c] for c in CREDIT_ACTIVE} <= columns:
        return "credit", [CREDIT_ALIASES[c] for c in pick(CREDIT_ACTIVE)]
    raise ConfigError(f"the apcvfl-paper presets need Breast Cancer Wisconsin or UCI Credit Card columns "
                      f"({', '.join(BREAST_CANCER_ACTIVE)} or {', '.join(CREDIT_ACTIVE)}); {dataset.name} has neither")


def paper_layout(kind: str, n_rows: int) -> PaperLayout:
    """Row counts of Appendix A.

    Breast Cancer — 500 rows at the active party, 50 aligned test rows, 250 aligned;
    Credit Card — 20,000 rows, 500 test rows, 10,000 aligned (scaled down for smaller files).
    """
    if kind == "breast-cancer":
        return PaperLayout(active_rows=min(500, n_rows - 1), test_rows=50, aligned=250)
    active = min(20_000, (2 * n_rows) // 3)
    return PaperLayout(active_rows=active, test_rows=min(500, max(2, n_rows // 40)), aligned=active // 2)


def apcvfl_paper_spec(dataset: Dataset, spec: PartitionSpec, a: int) -> PartitionSpec:
    """The paper's two-party layout for ``a`` active features.

    ``spec.aligned`` counts ALL aligned rows (test rows included); the active party holds
    ``active_rows`` rows, the passive party the aligned rows plus the rest.
    """
    kind, active_features = paper_active_features(dataset, a)
    return apc_layout_spec(dataset, spec, active_features, paper_layout(kind, dataset.n_rows))


def apc_layout_spec(dataset: Dataset, spec: PartitionSpec, active_features: Sequence[str],
                    layout: PaperLayout) -> PartitionSpec:
    """Appendix A's layout for any table: ``active_features`` at the active party, the rest split over the passives.

    The active party holds ``layout.active_rows`` rows; ``spec.aligned`` (default ``layout.aligned``)
    counts all aligned rows, the ``layout.test_rows`` aligned test rows included; the passive
    parties hold the aligned rows plus every row the active party lacks.
    """
    unknown = [c for c in active_features if c not in dataset.feature_columns]
    if unknown or not active_features:
        raise ConfigError(f"active features {unknown or '(none)'} are not features of {dataset.name}")
    if spec.aligned_ratio is not None:
        raise ConfigError("the apcvfl-paper presets take --aligned (a row count), not --aligned-ratio")
    aligned_total = spec.aligned if spec.aligned is not None else layout.aligned
    if aligned_total <= layout.test_rows:
        raise ConfigError(f"aligned={aligned_total} must exceed the {layout.test_rows} aligned test rows")
    if aligned_total > layout.active_rows:
        raise ConfigError(f"aligned={aligned_total} exceeds the {layout.active_rows} rows of the active party")
    names = spec.resolved_party_names
    rest = [c for c in dataset.feature_columns if c not in active_features]
    features = {names[0]: list(active_features)}
    for party, chunk in zip(names[1:], np.array_split(np.arange(len(rest)), max(1, len(names) - 1))):
        features[party] = [rest[i] for i in chunk]
    return replace(spec, features=features, split=None, active_features=None, aligned=aligned_total - layout.test_rows,
                   aligned_ratio=None, unaligned="disjoint", active_rows=layout.active_rows,
                   test_size=(layout.test_rows - 0.5) / dataset.n_rows)


def _register_paper_presets() -> None:
    describe = ("APC-VFL paper (Appendix A): Breast Cancer or UCI Credit Card, active party with {a} "
                "features, --aligned = all aligned rows incl. test rows")
    register_preset("apcvfl-paper", describe.format(a=5))(lambda d, s: apcvfl_paper_spec(d, s, 5))
    for a in (2, 3, 4, 5):
        register_preset(f"apcvfl-paper-a{a}", describe.format(a=a))(partial(apcvfl_paper_spec, a=a))


_register_paper_presets()

__all__ = ["APCOptions", "APCVFL", "APCVFLAblation", "APCVFLJoint", "BREAST_CANCER_ACTIVE", "CREDIT_ACTIVE",
           "LocalLogReg", "LocalProbeOptions", "PaperLayout", "ProbeSettings", "apc_footprint_bytes",
           "apc_layout_spec", "apcvfl_paper_spec",
           "paper_active_features", "probe_on_student", "student_probe", "student_scoring_roles"]
