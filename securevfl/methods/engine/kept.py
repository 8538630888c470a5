"""Methods that train outside the engine and still save and score: kept roles, scoring-only sides.

A method whose training roles are plain functions (APC-VFL, VFedTrans, few-shot VFL)
saves a model as the engine's methods do. Each training role is a :class:`KeptRole`: its body
hands what its party keeps of the trained model (a :class:`SavedSide`: its own modules' weights,
never a peer's data) to the ``keep`` callback it is given. For scoring, the method's
:meth:`~securevfl.methods.base.Method.scoring_roles` returns one :func:`side_role` per party over a
:class:`ScoringSide`, which :func:`~securevfl.methods.engine.loop.score_side` runs like an engine
side: built, loaded with the saved weights, and the rows scored through its :meth:`evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from securevfl.errors import ConfigError, ModelError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.engine.loop import Losses, PartySide, SavedSide
from securevfl.methods.engine.objective import Objective
from securevfl.methods.engine.split import SideRole

Keep = Callable[[SavedSide], None]


class KeptRole:
    """A runtime role outside the engine that keeps what its party trained, for ``--model-dir``.

    ``body(ctx, keep)`` runs the party's role; it calls ``keep(saved)`` once training is over (a
    party that keeps nothing, such as a passive party of a standalone model, never calls it).
    """

    def __init__(self, body: Callable[[PartyContext, Keep], Any]) -> None:
        self.body = body
        self.kept: SavedSide | None = None

    def __call__(self, ctx: PartyContext) -> Any:
        return self.body(ctx, self._keep)

    def _keep(self, saved: SavedSide) -> None:
        self.kept = saved

    def saved(self) -> SavedSide:
        """What the party kept; a ModelError if its role kept nothing (it did not finish, or holds no part)."""
        if self.kept is None:
            raise ModelError("this party's role kept no part of the model")
        return self.kept


def kept_side(modules: Mapping[str, nn.Module], objective: Objective | None = None,
              state: Mapping[str, Any] | None = None) -> SavedSide:
    """A :class:`SavedSide` of ``modules`` (copies of their weights), the objective and small model state."""
    weights = {n: {k: v.detach().cpu().clone() for k, v in m.state_dict().items()} for n, m in modules.items()}
    return SavedSide(weights, objective, dict(state or {}))


def saved_of(role: Any) -> SavedSide:
    """What the party running ``role`` keeps of the trained model (an engine side's or a kept role's)."""
    if isinstance(role, SideRole):
        return role.side.saved()
    if isinstance(role, KeptRole):
        return role.saved()
    raise ModelError("this party's role keeps no model")


def keeps_model(role: Any) -> bool:
    """Whether ``role`` keeps a part of the trained model (:func:`saved_of` works on it)."""
    return isinstance(role, (SideRole, KeptRole))


class ScoringSide(PartySide):
    """A party's side that only scores with a saved part; its method trains outside the engine.

    A subclass implements :meth:`build` (create :attr:`state`'s modules for scoring, exchanging
    any set-up messages every party of the method exchanges) and :meth:`evaluate` (the method's
    inference protocol on a batch of rows). A side whose modules' shapes are known only from the
    saved weights builds them in :meth:`load_saved` before calling ``super().load_saved``.
    """

    def train_batch(self, ctx: PartyContext, batch: Any) -> tuple[Losses, int] | None:
        raise ConfigError(f"{self.method.name} trains outside the engine: this side only scores")

