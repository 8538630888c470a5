"""SecureBoost scoring with a saved model: the trees walked jointly, one round per tree level.

The active party holds the trees (structure, owners, record ids, leaf weights) and its own lookup
table; each passive party its own lookup table. Per batch of scoring rows, the active party moves
every row down every tree at once, one level per round: it answers the nodes it owns itself, and
asks each passive party, for the (row, record) pairs at nodes that party owns, which way each row
goes (:data:`QUERY`); the owner answers one bit per pair from its own columns (:data:`ANSWER`).
After the deepest level it sends :data:`QUERY` with ``done``. The margin is the base margin plus the
reached leaves' weights; the scores are the objective's (probabilities, or values).

A row a passive party does not hold (partial coverage: :attr:`PartySide.present`) is never asked
about: at that party's nodes the active party sends it the way the tree's ``absent_left`` says (the
default direction learned in training), so the party is asked about its own rows only.

What each party learns: the **active party** which way each scored row goes at each passive node it
reaches (the instance space of the nodes, as in training), never a feature or threshold; a
**passive party** which of its own records each scored row reaches (its records' rows), never a
leaf weight, another party's split, or a score.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from securevfl.data.scenario import PartyData, Scenario
from securevfl.errors import ModelError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import Method, Role
from securevfl.methods.engine.kept import ScoringSide
from securevfl.methods.engine.loop import Evaluation, SavedSide
from securevfl.methods.engine.split import side_role
from securevfl.methods.secureboost.objective import BoostObjective
from securevfl.methods.secureboost.tree import LEAF, SPLITS, TREES, SplitTable, TreeArrays

QUERY = "secureboost.score.query"
ANSWER = "secureboost.score.answer"


class _Scorer(ScoringSide):
    """A party's scoring side: its saved lookup table (and at the active party the trees)."""

    def build(self, ctx: PartyContext) -> None:
        """Nothing to exchange: the modules take the saved shapes in :meth:`load_saved`."""

    def load_saved(self, saved: SavedSide) -> None:
        if SPLITS not in saved.weights:
            raise ModelError(f"{self.name}'s saved part holds no secureboost lookup table")
        self.state.modules[SPLITS] = SplitTable.shaped_like(saved.weights[SPLITS])
        if TREES in saved.weights:
            saved = replace(saved, weights={**saved.weights, TREES: TreeArrays.with_defaults(saved.weights[TREES])})
            self.state.modules[TREES] = TreeArrays.shaped_like(saved.weights[TREES])
        super().load_saved(saved)

    def table(self) -> SplitTable:
        module = self.state.modules[SPLITS]
        assert isinstance(module, SplitTable)
        return module


class PassiveScorer(_Scorer):
    """A passive party: answers which way rows go at its own records, one level at a time."""

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        X = np.asarray(X, dtype=np.float64)
        table = self.table()
        while True:
            message = ctx.recv(ctx.active, QUERY)
            if not isinstance(message, dict):
                raise ProtocolError(f"{ctx.active} sent a malformed {QUERY}")
            if message.get("done"):
                return None
            rows, records = message.get("rows"), message.get("records")
            if (not isinstance(rows, np.ndarray) or not isinstance(records, np.ndarray) or rows.shape != records.shape
                    or rows.ndim != 1 or rows.dtype.kind not in "iu" or records.dtype.kind not in "iu"
                    or (len(rows) and (rows.min() < 0 or rows.max() >= len(X)))):
                raise ProtocolError(f"{ctx.active} asked about rows outside the {len(X)} rows of this batch")
            try:
                with ctx.meter.compute():
                    left = table.go_left(X, rows.astype(np.int64), records.astype(np.int64))
            except ModelError as exc:
                raise ProtocolError(f"{ctx.active} asked about a record this party does not hold: {exc}") from None
            ctx.send(ctx.active, ANSWER, np.packbits(left).tobytes())


class ActiveScorer(_Scorer):
    """The active party: walks every tree, asking each node's owner; margin and scores from the leaves.

    A passive party left out (:attr:`silent`: down at batch scoring, or out of a serving batch before it
    starts) is asked nothing: every row takes the learned default direction at its nodes, as a row it
    does not hold. Its questions come one tree level at a time, so serving cannot collect one message
    of it with a deadline: a party lost in the middle of a batch is found when a question or answer
    fails, and serving scores that batch again with every passive party left out. A restarted passive
    party needs nothing from the others to score (its lookup table is its own): it is taken back.
    """

    leave_out = True
    takes_back = True

    def load_saved(self, saved: SavedSide) -> None:
        kind = saved.state.get("objective")
        parties = saved.state.get("parties")
        if not isinstance(kind, str) or not isinstance(parties, list):
            raise ModelError(f"{self.name}'s saved secureboost part lacks its objective or party list")
        self.kind, self.parties = kind, [str(p) for p in parties]
        if TREES not in saved.weights:
            raise ModelError(f"{self.name}'s saved secureboost part holds no trees (is it the active party's?)")
        super().load_saved(saved)
        missing = [p for p in self.parties[1:] if p not in self.passives]
        if missing:
            raise ModelError(f"the trees ask {', '.join(missing)}, which take no part in this scoring run")

    def evaluate(self, ctx: PartyContext, X: np.ndarray, phase: str) -> Evaluation | None:
        X = np.asarray(X, dtype=np.float64)
        trees = self.state.modules[TREES]
        assert isinstance(trees, TreeArrays)
        left, right = trees.array("left"), trees.array("right")
        owner, record = trees.array("owner"), trees.array("record")
        roots, output = trees.array("roots"), trees.array("output")
        base = trees.array("base_margin")
        absent_left = trees.array("absent_left").astype(bool)
        rows = len(X)
        current = np.tile(roots, (rows, 1))  # (rows, trees): each row's node in each tree
        row_of = np.repeat(np.arange(rows), len(roots)).reshape(rows, len(roots))
        table = self.table()
        present = dict(self.present or {})
        for p in self.silent:  # left out: it holds none of these rows, and is asked nothing
            present[p] = np.zeros(rows, dtype=bool)
        held = {p: np.asarray(present[p], dtype=bool) for p in self.parties[1:] if p in present}
        own_row = {p: np.cumsum(mask) - 1 for p, mask in held.items()}  # a held row's index in the party's batch
        while True:
            owners = owner[current]
            inner = owners != LEAF
            if not inner.any():
                break
            go_left = np.zeros(current.shape, dtype=bool)
            for index, party in enumerate(self.parties):
                at = inner & (owners == index)
                if index == 0:
                    with ctx.meter.compute():
                        go_left[at] = table.go_left(X, row_of[at], record[current[at]])
                    continue
                if party in held:  # rows it does not hold take the node's learned default direction
                    absent = at & ~held[party][row_of]
                    go_left[absent] = absent_left[current[absent]]
                    at = at & ~absent
                if party in self.silent:
                    continue
                queried_rows, queried_records = row_of[at], record[current[at]]
                if party in held:
                    queried_rows = own_row[party][queried_rows]
                ctx.send(party, QUERY, {"rows": queried_rows.astype(np.int32),
                                        "records": queried_records.astype(np.int32)})
                answer = ctx.recv(party, ANSWER)
                if not isinstance(answer, bytes) or len(answer) != -(-len(queried_rows) // 8):
                    raise ProtocolError(f"{party} answered {len(queried_rows)} questions with a malformed reply")
                go_left[at] = np.unpackbits(np.frombuffer(answer, dtype=np.uint8), count=len(queried_rows)).astype(bool)
            current = np.where(inner, np.where(go_left, left[current], right[current]), current)
        for party in self.parties[1:]:
            if party not in self.silent:
                ctx.send(party, QUERY, {"done": True})
        with ctx.meter.compute():
            values = trees.array("value")
            margin = np.tile(base, (rows, 1)).astype(np.float64)
            for t in range(len(roots)):
                margin[:, output[t]] += values[current[:, t]]
            objective = BoostObjective(self.kind, self.data.n_classes if self.kind != "reg:squarederror" else 1)
            scores = objective.scores(margin)
        return Evaluation(scores)


def scoring_roles(method: Method[Any], scenario: Scenario) -> dict[str, Role]:
    """One scoring side per data party: the active party walks the trees, the passive parties answer."""
    passives = tuple(scenario.passives)
    roles: dict[str, Role] = {p: side_role(PassiveScorer(method, scenario.party_data(p))) for p in passives}
    active: PartyData = scenario.party_data(scenario.active)
    roles[scenario.active] = side_role(ActiveScorer(method, active, passives))
    return roles


__all__ = ["ANSWER", "QUERY", "ActiveScorer", "PassiveScorer", "scoring_roles"]
