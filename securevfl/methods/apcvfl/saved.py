"""What APC-VFL's parties keep of a trained model, and the sides that score new rows with it.

A party keeps its trained autoencoders and, at the active party, the fitted probe
(:class:`~securevfl.methods.apcvfl.probe.LogisticProbe`); its small model state records each
autoencoder's input and layer widths (and, for ``apcvfl-splitnn``, the passive parties' latent
widths in training's order), from which the scoring side rebuilds the modules before loading the
weights. Never rows of training data.

* **Standalone** (``apcvfl``, ``apcvfl-ablation``, ``vfedtrans``, ``local-logreg``): the active
  party keeps ``g3`` (its student; none for ``local-logreg``) and the probe;
  :class:`StudentScoring` scores its own rows alone: ``g3`` latents, then the probe.
* **Joint** (``apcvfl-splitnn``): every passive party keeps its ``g1``; the active party its own
  ``g1`` (if it holds features), the joint ``g2`` and the probe. Per batch each passive party sends
  the ``g1`` latents of its rows (:data:`SCORE_LATENTS`), the information flow of training, and the
  active party scores ``probe(g2([g1_a | z_p1 | ...]))`` (:class:`JointActiveScoring`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from securevfl.errors import ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.apcvfl.models import SymmetricAutoencoder, autoencoder_widths
from securevfl.methods.apcvfl.probe import LogisticProbe
from securevfl.methods.base import as_tensor
from securevfl.methods.engine.kept import ScoringSide, kept_side
from securevfl.methods.engine.loop import Evaluation, SavedSide
from securevfl.methods.engine.objective import Objective
from securevfl.methods.engine.split import checked_tensor

SCORE_LATENTS = "apcvfl.score.latents"
#: The autoencoders that read the party's own columns (their input width is its encoded width).
OWN_INPUTS = ("g1", "g3")


def kept_model(autoencoders: Mapping[str, SymmetricAutoencoder], probe: LogisticProbe | None = None, *,
               labels: bool = False, passive_latents: Mapping[str, int] | None = None) -> SavedSide:
    """What a party keeps: its ``autoencoders``, the ``probe`` (active party), and their widths as model state.

    ``labels``: the party holds the labels (classification: a plain :class:`Objective`).
    ``passive_latents``: the joint model's passive parties and their latent widths, in training's order.
    """
    modules: dict[str, torch.nn.Module] = dict(autoencoders)
    if probe is not None:
        modules["probe"] = probe
    state: dict[str, Any] = {"autoencoders": {n: {"inputs": m.in_dim, "widths": autoencoder_widths(m)}
                                              for n, m in autoencoders.items()}}
    if passive_latents is not None:
        state["passive_latents"] = [[p, int(w)] for p, w in passive_latents.items()]
    return kept_side(modules, Objective() if labels else None, state)


def _positive_ints(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int and v > 0 for v in value)


class SavedModules(ScoringSide):
    """A scoring side that builds the modules its saved part holds, from the part's model state."""

    def build(self, ctx: PartyContext) -> None:
        return None  # shapes come with the saved part: built in load_saved

    def load_saved(self, saved: SavedSide) -> None:
        specs = saved.state.get("autoencoders")
        if not isinstance(specs, dict):
            raise ModelError(f"{self.name}'s saved part does not describe its autoencoders")
        for name, spec in specs.items():
            if not isinstance(spec, dict) or type(spec.get("inputs")) is not int or not _positive_ints(
                    spec.get("widths")) or spec["inputs"] < 1:
                raise ModelError(f"{self.name}'s saved autoencoder {name!r} is malformed")
            if name in OWN_INPUTS and spec["inputs"] != self.data.n_features:
                raise ModelError(f"{self.name}'s {name} was trained on {spec['inputs']} encoded columns; its new "
                                 f"file encodes to {self.data.n_features}")
            self.state.modules[name] = SymmetricAutoencoder(spec["inputs"], tuple(spec["widths"])).to(self.device)
        if "probe" in saved.weights:
            self.state.modules["probe"] = LogisticProbe.shaped_like(saved.weights["probe"], self.data.n_classes)
        super().load_saved(saved)

    def encoded(self, name: str, X: np.ndarray) -> torch.Tensor:
        """The latents of rows ``X`` by the saved autoencoder ``name`` (float32, as in training)."""
        model = self.state.modules[name]
        assert isinstance(model, SymmetricAutoencoder)
        return model.encode(as_tensor(X, self.device))

    def probabilities(self, Z: torch.Tensor) -> np.ndarray:
        """The saved probe's ``(n, n_classes)`` probabilities of latents (or raw features) ``Z``."""
        return self.state.modules["probe"](Z.cpu()).to(torch.float64).numpy()


class StudentScoring(SavedModules):
    """The active party of a standalone model, alone: its rows, its student ``g3`` (if any), its probe."""

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        with ctx.meter.compute():
            Z = self.encoded("g3", X) if "g3" in self.state.modules else torch.as_tensor(X)
            return Evaluation(self.probabilities(Z))


class JointPassiveScoring(SavedModules):
    """A passive party of ``apcvfl-splitnn``: the ``g1`` latents of its rows to the active party, per batch."""

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> None:
        with ctx.meter.compute():
            latents = self.encoded("g1", X).float().cpu()
        ctx.send(ctx.active, SCORE_LATENTS, latents)
        return None


class JointActiveScoring(SavedModules):
    """The active party of ``apcvfl-splitnn``: ``probe(g2([own g1 latents | each passive party's latents]))``."""

    latents: list[tuple[str, int]]

    def load_saved(self, saved: SavedSide) -> None:
        pairs = saved.state.get("passive_latents")
        if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _positive_ints(p[1:]) for p in pairs):
            raise ModelError(f"{self.name}'s saved part does not list the passive parties' latent widths")
        self.latents = [(p, w) for p, w in pairs]
        if sorted(p for p, _ in self.latents) != sorted(self.passives):
            raise ModelError(f"the model was trained with passive parties {', '.join(p for p, _ in self.latents)}; "
                             f"scoring has {', '.join(self.passives) or 'none'}")
        super().load_saved(saved)

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation:
        parts = [self.encoded("g1", X)] if "g1" in self.state.modules else []
        for party, width in self.latents:  # training's order: g2 reads its inputs in that order
            z = checked_tensor(ctx.recv(party, SCORE_LATENTS), party, len(X), "latents")
            if z.shape[1] != width:
                raise ProtocolError(f"{party} sent latents of width {z.shape[1]}; its g1 latents are {width} wide")
            parts.append(z.to(self.device, torch.float32))
        with ctx.meter.compute():
            g2 = self.state.modules["g2"]
            assert isinstance(g2, SymmetricAutoencoder)
            return Evaluation(self.probabilities(g2.encode(torch.cat(parts, dim=1))))


__all__ = ["SCORE_LATENTS", "JointActiveScoring", "JointPassiveScoring", "StudentScoring", "kept_model"]
