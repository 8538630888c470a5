"""Entity Augmentation: split learning without entity alignment, on interpolated labels.

Amalanshu et al., "Entity Augmentation for Efficient Classification of Vertically Partitioned
Data with Limited Overlap" (2024), Algorithm 1. Every guest (passive party) sends, per step, the
activations of a batch of *its own* labelled entities together with their entity keys; the host
(active party, the label holder) reads the newest activation of each guest from a per-guest queue,
concatenates them, and trains the top model on the *interpolated* label
``y = sum_i w_i y_{j_i} / sum_i w_i`` with ``w_i`` the activation dimension of guest ``i`` (a
CutMix across parties), using the paper's binary cross-entropy with a sigmoid on each class logit
against the interpolated label (Sec. 5.5; ``loss="ce"``: softmax cross-entropy with soft targets
instead). Gradients go back to the guests
that sent this step. A guest that misses a step has its last activation (and its entity keys)
reused from its queue — the paper's fault tolerance; ``drop_prob`` simulates such misses.

Which entities a guest may send: only those the host has labels for. By default
(``resolution="psi"``) the host and each guest run a pairwise ECDH PSI (``psi`` package) through
the runtime's channel before training; a guest then sends, per row, its position in that pair's
intersection order, from which the host reads the label. ``resolution="ids"`` is the plaintext
stand-in: each guest sends its whole ID list and the host answers which positions it labels.

What the host learns: for every activation row, which labelled entity it belongs to (the pair
index, equivalent to the ID since the host knows its intersection with each guest), so it learns
which of its labelled entities each guest holds and in which batches it used them; with
``resolution="psi"`` it learns nothing about a guest's unlabelled rows beyond their count. The
guests learn the gradients of the loss on their activations, as in SplitNN, and which of their
rows the host labels (the PSI output).

Aligned rows (the global intersection, in the agreed order) keep their pairing by default: their
slots in every epoch are agreed from the run seed, so all guests send the same entity there and
the interpolated label is that entity's own label; the guests' other labelled rows fill the other
slots in each guest's own order. With ``misalign=True`` every guest shuffles all its labelled rows
independently (the paper's "misaligned" setup). With one guest, full alignment, ``arch="splitnn"``
and no drops, the method performs exactly SplitNN's computation.

The package: :mod:`.options`; :mod:`.augmentation` (interpolated labels and their losses, entity
schedules, activation queues: no messages); :mod:`.models` (bottoms and tops); :mod:`.resolution`
(the pairwise PSI of labelled entities); :mod:`.sides` (the guest and the host on the engine); here
the method and its partition preset.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from securevfl.data.datasets import Dataset
from securevfl.data.partition import PartitionSpec, register_preset
from securevfl.data.scenario import Scenario
from securevfl.errors import ConfigError, DataError, ProtocolError
from securevfl.methods.base import Role, register_method
from securevfl.methods.engine import PartySide, SplitMethod, checked_tensor, side_role
from securevfl.methods.entity_aug.models import build_passive_model
from securevfl.methods.entity_aug.options import EntityAugOptions
from securevfl.methods.entity_aug.sides import EntityAugActive, EntityAugPassive


@register_preset("entity-aug", "label-only host (active party, no features); the features are split "
                 "evenly among the guests (image strips for image datasets), as in the paper")
def label_only_host(dataset: Dataset, spec: PartitionSpec) -> PartitionSpec:
    """Partition preset for Entity Augmentation: the active party holds the labels only."""
    return replace(spec, active_features=0)


@register_method
class EntityAugmentation(SplitMethod[EntityAugOptions]):
    """Guests send activations of any labelled entities; the host trains on interpolated labels."""

    name = "entity-aug"
    summary = ("Entity Augmentation (Amalanshu et al. 2024): no alignment needed, "
               "labels mixed by activation width")
    Options = EntityAugOptions
    partial_rows = False  # its own entity resolution decides who trains on which row
    supports_objectives = False  # soft labels interpolated across guests: classification only

    def bottom(self, side: PartySide) -> nn.Module:
        return build_passive_model(side.data, self.config, self.options, side.name)

    def decode(self, side: PartySide, message: Any, sender: str, rows: int, phase: str) -> torch.Tensor:
        """A guest's evaluation embedding: ``rows`` rows of the width its training activations had."""
        h = checked_tensor(message, sender, rows)
        layout = getattr(side, "layout", None)
        width = layout.widths.get(sender, 0) if layout is not None else 0
        if width and h.shape[1] != width:
            raise ProtocolError(f"{sender} sent an embedding of width {h.shape[1]}; its activations had {width}")
        return h

    def roles(self, scenario: Scenario) -> dict[str, Role]:
        """Return a guest role per passive party and the host role for the active party."""
        if not scenario.passives:
            raise ConfigError("entity-aug needs at least one guest (passive party)")
        active = scenario.party_data(scenario.active)
        if active.y_train is None:
            raise DataError(f"the active party {scenario.active!r} must hold the labels")
        roles = {p: side_role(EntityAugPassive(self, scenario.party_data(p))) for p in scenario.passives}
        roles[scenario.active] = side_role(EntityAugActive(self, active, tuple(scenario.passives)))
        return roles


__all__ = ["EntityAugOptions", "EntityAugmentation", "label_only_host"]
