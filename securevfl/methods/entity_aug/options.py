"""Entity Augmentation's options and their allowed values."""

from __future__ import annotations

from dataclasses import dataclass

from securevfl.errors import ConfigError
from securevfl.settings import setting

ARCHS = ("splitnn", "credit-card", "parkinsons", "handwritten")
BOTTOMS = ("auto", "mlp", "cnn")
RESOLUTIONS = ("psi", "ids")
EPOCH_SIZES = ("max", "min")
LOSSES = ("bce", "ce")


@dataclass(frozen=True)
class EntityAugOptions:
    """Options of ``entity-aug``.

    ``drop_prob``: probability that a guest misses a step (simulated, seeded; its last activation
    is reused). ``misalign``: shuffle every guest's entities independently, aligned rows included.
    ``use_unaligned``: also train on each guest's labelled rows outside the global intersection.
    ``epoch_size``: steps per epoch cover the largest (``max``, smaller guests reuse rows) or the
    smallest (``min``) guest's labelled set. ``resolution``: ``psi`` (pairwise ECDH PSI) or ``ids``
    (plaintext ID lists). ``arch``: ``splitnn`` (bottom/top as SplitNN, from ``embedding_dim`` and
    ``hidden``), or the paper's Sec. 5.2 ``credit-card`` / ``parkinsons`` / ``handwritten`` shapes. ``bottom``:
    ``auto`` (a CNN for image strips, else an MLP), ``mlp`` or ``cnn`` (for ``arch=splitnn``).
    ``loss``: ``ce`` (default: softmax cross-entropy with soft targets) or ``bce`` (the paper's, Sec.
    5.5: binary cross-entropy with a sigmoid on every class logit against the interpolated label;
    it trails softmax CE on many classes with little data, docs/entity_aug.md).
    """

    drop_prob: float = setting(
        0.0, help="Probability a guest misses a step (simulated, seeded; its last activation reused), in [0, 1).")
    misalign: bool = setting(
        False, help="Every guest shuffles all its labelled rows independently, aligned rows included.")
    use_unaligned: bool = setting(
        True, help="Also train on each guest's labelled rows outside the global intersection.")
    epoch_size: str = setting(
        "max", help="Steps per epoch cover the largest (max) or the smallest (min) guest's labelled set.")
    resolution: str = setting("psi", help="Entity resolution: psi (pairwise ECDH PSI) | ids (plaintext ID lists).")
    arch: str = setting(
        "splitnn", help="Networks: splitnn (from --embedding-dim, --hidden) | credit-card | parkinsons | handwritten.")
    bottom: str = setting(
        "auto", help="Guests' bottoms for arch=splitnn: auto (a CNN for image strips, else an MLP) | mlp | cnn.")
    loss: str = setting(
        "ce", help="ce (softmax cross-entropy, soft targets) | bce (the paper's sigmoid binary cross-entropy).")

    def __post_init__(self) -> None:
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError(f"drop_prob must be in [0, 1), got {self.drop_prob}")
        for name, value, allowed in (("epoch_size", self.epoch_size, EPOCH_SIZES),
                                     ("resolution", self.resolution, RESOLUTIONS),
                                     ("arch", self.arch, ARCHS), ("bottom", self.bottom, BOTTOMS),
                                     ("loss", self.loss, LOSSES)):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")

