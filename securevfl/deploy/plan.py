"""Phase 1b of a deployed party: the split, each party's table shape and the plan every party runs.

The active party sends each passive party the split: the test positions in the agreed order (a
stratified split by its labels, the same function and seed as ``securevfl train``). Every party
fits its own preprocessing (:mod:`securevfl.data.preprocess`) on its own training rows, never a
test row; the passive parties send their table's shape, and the active party sends every party
(helpers included) the plan: the split, the task, the number of classes and each party's shape.
Every count a peer sends is checked before anything is sized by it (:mod:`securevfl.deploy.party`).
:func:`local_scenario` is the scenario one party runs from its plan: its own table and zero
placeholders of the right shape for its peers.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.data.labels import REGRESSION, TASKS
from securevfl.data.partition import PartyTable, split_train_test
from securevfl.data.scenario import Alignment, Scenario, check_shared_classes, encode_table
from securevfl.deploy.alignment import PsiResult, unaligned_rows
from securevfl.deploy.federation_file import Federation
from securevfl.deploy.links import data_party_order, helper_parties
from securevfl.deploy.progress import log_event
from securevfl.errors import DataError, ProtocolError
from securevfl.federation.runtime import PartyContext

if TYPE_CHECKING:
    from securevfl.data.preprocess import EncodedColumns  # sklearn: imported where it is used

TAG_SPLIT = "deploy.setup.split"
TAG_SHAPE = "deploy.setup.shape"
TAG_PLAN = "deploy.setup.plan"

#: The most encoded feature columns (the width of one party's model input) a peer may announce.
MAX_FEATURES = 100_000
#: The most classes the active party may announce.
MAX_CLASSES = 100_000
#: Row counts beyond this are refused outright (PSI's own message limits bound them well below).
MAX_ROWS = 2**40

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartyShape:
    """What a party tells the others about its table: sizes only."""

    rows: int
    aligned: int
    features: int

    def to_wire(self) -> dict[str, int]:
        return {"rows": self.rows, "aligned": self.aligned, "features": self.features}

    @classmethod
    def from_wire(cls, message: Any, sender: str, party: str | None = None, *, aligned: int | None = None,
                  rows: int | None = None) -> PartyShape:
        """Validate a shape ``sender`` sent (about ``party``, itself by default) before anything is sized by it.

        ``aligned``: the aligned row count the receiver's own PSI gave (the shape must agree);
        ``rows``: the party's set size as the receiver saw it in PSI, when it saw it.
        """
        about = sender if party is None or party == sender else f"{party} (sent by {sender})"
        if not isinstance(message, dict) or set(message) != {"rows", "aligned", "features"}:
            raise ProtocolError(f"malformed table shape of {about}: expected the keys rows, aligned, features")
        for key, limit in (("rows", MAX_ROWS), ("aligned", MAX_ROWS), ("features", MAX_FEATURES)):
            value = message[key]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
                raise ProtocolError(f"table shape of {about}: {key} = {value!r} is not an integer in 0..{limit}")
        if message["aligned"] > message["rows"]:
            raise ProtocolError(f"table shape of {about}: aligned = {message['aligned']} exceeds rows = "
                                f"{message['rows']}")
        if aligned is not None and message["aligned"] != aligned:
            raise ProtocolError(f"table shape of {about}: aligned = {message['aligned']}, but PSI aligned "
                                f"{aligned} rows")
        if rows is not None and message["rows"] != rows:
            raise ProtocolError(f"table shape of {about}: rows = {message['rows']}, but its PSI set had "
                                f"{rows} IDs")
        return cls(message["rows"], message["aligned"], message["features"])



#: Chooses a party's columns between the split and its shape (``train --select``): ``(ctx, table, rows,
#: train, present) -> (the table with its kept columns, the active party's selection summary or None)``.
ChooseColumns = Callable[[PartyContext, PartyTable, np.ndarray, np.ndarray, Mapping[str, np.ndarray]],
                         tuple[PartyTable, Any]]


def plan_role(table: PartyTable, classes: tuple[str, ...], federation: Federation,
              psi: Callable[[PartyContext], PsiResult],
              cover: bool = False, choose: ChooseColumns | None = None) -> Callable[[PartyContext], dict[str, Any]]:
    """PSI, then shapes in and the plan out (see the module docstring).

    ``cover`` (the default where the method can; not with ``--require-all-parties``): the agreed
    positions are every row of the active party, each passive party holding those PSI matched
    (:func:`~securevfl.deploy.alignment.psi_role`); a passive party's shape then gives the rows it
    holds, and every party fits its preprocessing on its own training rows. ``choose`` (``--select``):
    once the split is known and before any party fits its preprocessing, the parties choose their
    columns together (:mod:`securevfl.exploration.selection`); the table each keeps is in the result.
    """
    job = federation.job
    chosen: dict[str, Any] = {"table": table, "selection": None}

    def encode(rows: np.ndarray, train: np.ndarray, held: np.ndarray | None) -> tuple[PartyShape, EncodedColumns]:
        """The party's own preprocessing fitted on its own training rows, and the shape it gives."""
        own_train = rows[train] if held is None else rows[(np.cumsum(held) - 1)[train[held[train]]]]
        encoded = encode_table(chosen["table"], np.concatenate([own_train, unaligned_rows(table.n_rows, rows)]))
        return PartyShape(table.n_rows, len(rows), encoded.X.shape[1]), encoded

    def role(ctx: PartyContext) -> dict[str, Any]:
        psi_result = psi(ctx)
        rows, size, present = psi_result.rows, psi_result.size, dict(psi_result.present)
        ctx.stage = "plan"
        if not ctx.is_active:
            split = _parse_split(ctx.recv(ctx.active, TAG_SPLIT), ctx.active, size)
            if choose is not None:
                chosen["table"], _ = choose(ctx, table, rows, split["train"], present)
                ctx.stage = "plan"
            own, encoded = encode(rows, split["train"], present.get(ctx.name))
            ctx.send(ctx.active, TAG_SHAPE, own.to_wire())
            plan = parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, (ctx.active, *ctx.passives), size,
                              partial=cover)
            if not (np.array_equal(plan["train"], split["train"]) and np.array_equal(plan["test"], split["test"])):
                raise ProtocolError(f"the plan from {ctx.active} has another train/test split than it announced")
            if plan["shapes"][ctx.name] != own:
                raise ProtocolError(f"the plan from {ctx.active} gives {ctx.name} the table shape "
                                    f"{plan['shapes'][ctx.name].to_wire()}; {ctx.name} sent {own.to_wire()}")
            log_plan(ctx, plan)
            return {"rows": rows, "plan": plan, "encoded": encoded, "present": present, "table": chosen["table"]}
        if size < 10:
            raise DataError(f"only {size} rows are shared by all parties; at least 10 are needed to train and test")
        assert table.labels is not None
        check_shared_classes(table.labels[rows], classes, size, table.task)
        train, test = split_train_test(size, table.labels[rows], job.run.partition.test_size, job.run.train.seed)
        split = {"train": np.sort(train).astype(np.int64), "test": np.sort(test).astype(np.int64)}
        ctx.broadcast(ctx.passives, TAG_SPLIT, split)
        if choose is not None:
            chosen["table"], chosen["selection"] = choose(ctx, table, rows, split["train"], present)
            ctx.stage = "plan"
        own, encoded = encode(rows, split["train"], None)
        shapes = {ctx.name: own}
        for p in ctx.passives:  # checked against what PSI showed before anything is sized by it
            held = int(present[p].sum()) if p in present else size
            shapes[p] = PartyShape.from_wire(ctx.recv(p, TAG_SHAPE), p, aligned=held,
                                             rows=psi_result.peer_sizes.get(p))
        n_classes = 1 if table.task == REGRESSION else len(classes)  # the model's output width
        plan = {**split, "task": table.task, "n_classes": n_classes,
                "shapes": {n: s.to_wire() for n, s in shapes.items()},
                "model": secrets.token_hex(16)}  # names the model every party may save (--model-dir)
        ctx.broadcast((*ctx.passives, *helper_parties(federation)), TAG_PLAN, plan)
        log_plan(ctx, {**plan, "shapes": shapes})
        return {"rows": rows, "plan": {**plan, "shapes": shapes}, "encoded": encoded, "present": present,
                "table": chosen["table"], "selection": chosen["selection"]}

    return role


def helper_plan_role(federation: Federation, cover: bool = False) -> Callable[[PartyContext], dict[str, Any]]:
    """A party without data (an arbiter, a key generator, a server): it only receives the plan."""
    data_parties = data_party_order(federation)

    def role(ctx: PartyContext) -> dict[str, Any]:
        ctx.stage = "plan"
        plan = parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, data_parties, None, partial=cover)
        log_plan(ctx, plan)
        return {"rows": np.zeros(0, np.int64), "plan": plan}

    return role


def log_plan(ctx: PartyContext, plan: Mapping[str, Any]) -> None:
    """The plan as this party has it: rows to train and test, classes, each party's encoded width."""
    train, test = len(plan["train"]), len(plan["test"])
    widths = {p: int(s.features) for p, s in plan["shapes"].items()}
    source = "" if ctx.is_active else f" from {ctx.active}"
    what = f"{train} to train, {test} to test" if train else f"{test} to score"
    log_event(_log, ctx.name, "plan", "plan", f"plan{source}: {train + test} agreed rows ({what}); encoded "
              "features " + ", ".join(f"{p} {w}" for p, w in widths.items()), rows=train + test, train=train,
              test=test, classes=plan["n_classes"], features=widths)


def _parse_split(message: Any, sender: str, size: int) -> dict[str, np.ndarray]:
    """Validate the announced train/test split of the ``size`` aligned rows."""
    if not isinstance(message, dict) or set(message) != {"train", "test"}:
        raise ProtocolError(f"malformed split from {sender}")
    _check_positions(message["train"], message["test"], f"malformed split from {sender}", size)
    return {"train": message["train"], "test": message["test"]}


def _check_positions(train: Any, test: Any, bad: str, size: int | None) -> int:
    """Train and test positions: int64 vectors covering ``0..size-1`` once; returns the size."""
    for part in (train, test):
        if not isinstance(part, np.ndarray) or part.dtype != np.int64 or part.ndim != 1:
            raise ProtocolError(f"{bad}: train/test positions must be int64 vectors")
    joined = np.concatenate([train, test])
    size = len(joined) if size is None else size
    if len(joined) != size or not np.array_equal(np.sort(joined), np.arange(size)):
        raise ProtocolError(f"{bad}: train and test positions do not cover the {size} aligned rows once")
    return size


def parse_plan(message: Any, sender: str, me: str, parties: tuple[str, ...], size: int | None, *,
               partial: bool = False) -> dict[str, Any]:
    """Validate the active party's plan; ``size``: this party's aligned rows (``None`` for a helper).

    ``partial`` (every row): a passive party's shape may hold fewer rows than the agreed positions.
    """
    bad = f"malformed plan from {sender}"
    keys = {"train", "test", "task", "n_classes", "shapes"}
    if not isinstance(message, dict) or set(message) not in (keys, keys | {"model"}):
        raise ProtocolError(bad)
    model = message.get("model")
    if model is not None and not (isinstance(model, str) and re.fullmatch(r"[0-9a-f]{32}", model)):
        raise ProtocolError(f"{bad}: model id")
    train, test = message["train"], message["test"]
    size = _check_positions(train, test, bad, size)
    task, n_classes = message["task"], message["n_classes"]
    if task not in TASKS:
        raise ProtocolError(f"{bad}: task")
    low, high = (1, 1) if task == REGRESSION else (2, MAX_CLASSES)
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or not low <= n_classes <= high:
        raise ProtocolError(f"{bad}: n_classes")
    shapes = message["shapes"]
    if not isinstance(shapes, dict) or set(shapes) != set(parties):
        raise ProtocolError(f"{bad}: shapes must name every party")
    parsed = {n: PartyShape.from_wire(s, sender, n, aligned=None if partial else size) for n, s in shapes.items()}
    if any(s.aligned > size for s in parsed.values()):
        raise ProtocolError(f"{bad}: a shape holds more rows than the {size} agreed positions")
    return {"train": train, "test": test, "task": task, "n_classes": n_classes, "shapes": parsed,
            **({"model": model} if model is not None else {})}


def local_scenario(name: str, federation: Federation, table: PartyTable | None, classes: tuple[str, ...],
                   rows: np.ndarray, plan: Mapping[str, Any], cost: Mapping[str, Any],
                   encoded: EncodedColumns | None = None,
                   present: Mapping[str, np.ndarray] | None = None) -> Scenario:
    """The scenario one party runs: its own table, and a zero placeholder of the right shape per peer.

    Its own table is encoded by its own preprocessing, fitted on its training rows (``plan``'s split);
    ``encoded``: that encoding, when the plan already fitted it. A peer's placeholder has the peer's
    encoded width and the aligned rows only (the count this party's own PSI agreed; a peer's unaligned
    rows are its own business), and its zeros are one shared read-only value: it costs no memory per
    row or column, so no count a peer announces sizes an allocation here. ``present`` (every row): the
    masks of the agreed positions this party knows (the active party: every passive party's; a passive
    party: its own); a peer whose mask it does not know gets a placeholder of every position.
    """
    present = dict(present or {})
    size = len(plan["train"]) + len(plan["test"])
    parties = data_party_order(federation)
    tables: dict[str, PartyTable] = {}
    aligned: dict[str, np.ndarray] = {}
    unaligned: dict[str, np.ndarray] = {}
    n_classes = plan["n_classes"]
    for party in parties:
        shape: PartyShape = plan["shapes"][party]
        if party == name and table is not None:
            tables[party] = table
            aligned[party] = rows
            unaligned[party] = unaligned_rows(table.n_rows, rows)
            continue
        # The active party's placeholder carries placeholder labels (all class 0, or 0.0) so that methods
        # that check "the active party holds the labels" build every role; only this party's role ever runs.
        # this party's own PSI size (checked when the shape was received), or a peer's rows among them
        n = shape.aligned if party in present else size
        dtype = np.float64 if plan["task"] == REGRESSION else np.int64
        labels = np.zeros(n, dtype) if party == federation.active else None
        tables[party] = PartyTable(name=party, ids=np.broadcast_to(np.array("#", dtype=object), (n,)),
                                   features=np.broadcast_to(np.float32(0), (n, shape.features)),
                                   feature_names=tuple(f"{party}.f{i}" for i in range(shape.features)),
                                   labels=labels, columns=None)  # model inputs as they are: nothing to encode
        aligned[party] = np.arange(n, dtype=np.int64)
        unaligned[party] = np.zeros(0, dtype=np.int64)
    if name != federation.active:
        classes = () if plan["task"] == REGRESSION else tuple(str(i) for i in range(n_classes))
    what = f"{size} rows of {federation.active}, every row" if present else f"{size} shared IDs"
    alignment = Alignment(aligned=aligned, unaligned=unaligned, present=present,
                          method=f"ECDH PSI over the network (X25519, {what})", cost=dict(cost))
    scenario = Scenario(tables=tables, active=federation.active, classes=classes, alignment=alignment,
                        train=plan["train"], test=plan["test"], task=plan["task"],
                        dataset=f"federation {federation.source.name if federation.source else ''}".strip(),
                        notes=(f"alignment: ECDH PSI over the network; {size} shared rows",
                               f"deployment: one process per party ({', '.join(federation.parties)})"))
    if encoded is not None:
        scenario.remember_encoding(name, encoded)
    return scenario
