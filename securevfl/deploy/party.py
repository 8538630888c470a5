"""One organisation's process: its own table, PSI with its peers over the network, then its role.

``securevfl party --federation fed.toml --as shop --data shop.csv`` calls :func:`run_deployed_party`.
The party loads only its own file, connects to its peers with mutual TLS (they agree on the job by
fingerprint before any data frame), and then runs three phases over the same links:

1. **Setup** (tags ``deploy.*``). ECDH PSI between the active party and each passive party (the
   ``psi`` package's protocol cores, unchanged), then the N-party alignment message. Every party
   sorts its aligned rows by their (normalised) IDs, as the threaded run does, and sends the active
   party a SHA-256 digest of that ordered list so a mismatch stops the run. The active party then
   sends each passive party the split: the test positions in the agreed order (a stratified split by
   its labels, the same function and seed as ``securevfl train``). Every party fits its own
   preprocessing (:mod:`securevfl.data.preprocess`) on its own training rows — never a test row — and
   the passive parties send their table's shape (rows, encoded feature count); the active party sends
   every party the plan: the split, the number of classes, and each party's shape.
2. **Training**: the method's role for this party, built by the method from a scenario holding this
   party's own table and, for each peer, a placeholder table of the right shape (zeros: no peer data
   ever reaches this process). The method code is the one the threaded run uses.
3. **Costs**: each passive party sends the active party its meter snapshot (times, bytes, messages,
   never data); the active party writes the report.

What the setup reveals beyond PSI: row counts (PSI reveals set sizes anyway), encoded feature counts
(the width of each party's model input; not its columns, categories or statistics) and the number of
classes, and the test positions (which agreed rows are held out).

Sizes a peer sends are never trusted to size an allocation. Every party sizes its peers'
placeholders by the aligned row count its own PSI produced (a peer's unaligned rows are never
materialised anywhere but at that peer), and every count is checked before use: the aligned count
against this party's PSI result, a passive party's row count against the set size the active party
saw in PSI, a party's own entry in the plan against what it sent, feature counts against
:data:`MAX_FEATURES` and class counts against :data:`MAX_CLASSES`. A count that fails is a
:class:`ProtocolError` naming the sender and the field, before anything is allocated.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.data.columns import ColumnSpec
from securevfl.data.labels import REGRESSION, TASKS
from securevfl.data.partition import PartyTable, split_train_test
from securevfl.data.scenario import Alignment, Scenario, check_shared_classes, encode_table, training_rows
from securevfl.deploy.federation import Federation, check_tls_paths, job_fingerprint, job_mismatch
from securevfl.deploy.progress import PartyWatch, log_event, sent_bytes
from securevfl.deploy.threads import ThreadChoice
from securevfl.errors import ConfigError, DataError, ProtocolError, SecureVFLError, psi_errors
from securevfl.eval import positive_index
from securevfl.federation.meter import MeterSnapshot
from securevfl.federation.network import TlsCredentials
from securevfl.federation.runtime import PartyContext, run_party

TAG_PSI = "deploy.setup.psi"
TAG_SPLIT = "deploy.setup.split"
TAG_SHAPE = "deploy.setup.shape"
TAG_DIGEST = "deploy.setup.alignment_digest"
TAG_PLAN = "deploy.setup.plan"
TAG_COST = "deploy.end.cost"

#: The most encoded feature columns (the width of one party's model input) a peer may announce.
MAX_FEATURES = 100_000
#: The most classes the active party may announce.
MAX_CLASSES = 100_000
#: Row counts beyond this are refused outright (PSI's own message limits bound them well below).
MAX_ROWS = 2**40

if TYPE_CHECKING:
    from securevfl.data.preprocess import EncodedColumns  # sklearn: imported where it is used

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


@dataclass(frozen=True)
class LocalAlignment:
    """One party's PSI result: its aligned rows in the agreed order, the rest, and what it cost."""

    aligned: np.ndarray
    unaligned: np.ndarray
    size: int
    snapshot: MeterSnapshot


@dataclass
class DeployedResult:
    """What one party's process produced. ``report`` only at the active party."""

    party: str
    alignment: LocalAlignment
    report: Any = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, MeterSnapshot] = field(default_factory=dict)
    link_stats: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_s: float = 0.0
    #: The torch threads this party's process used (:mod:`securevfl.deploy.threads`).
    threads: int = 0


# ------------------------------------------------------------------ transport


def open_transport(federation: Federation, name: str, phase: str = "train", watch: PartyWatch | None = None) -> Any:
    """Start this party's gRPC transport (TLS material checked first) and wait for every handshake.

    ``phase``: ``train`` or ``predict`` (part of the job fingerprint every peer must match); ``watch``:
    reports a peer that keeps this party waiting, and each link that comes up.
    """
    from securevfl.deploy.certs import load_tls_material, verify_party_certificate
    from securevfl.federation.grpc_transport import GrpcTransport

    spec = federation.party(name)
    check_tls_paths(federation)
    tls: TlsCredentials | None = None
    if not federation.insecure:
        assert federation.tls is not None and spec.cert is not None and spec.key is not None
        tls = load_tls_material(spec.cert, spec.key, federation.tls.ca)
        verify_party_certificate(tls.cert_chain, tls.root_ca, name)
    digest, job = job_fingerprint(federation, phase)
    transport = GrpcTransport(name, ordered_addresses(federation), tls=tls, fingerprint=digest, job=job,
                              settings=federation.limits, insecure=federation.insecure,
                              differences=functools.partial(job_mismatch, here=name),
                              hub=federation.active if federation.topology == "star" else None)
    transport.start()
    # star: a party without an address dials the active party (the messages between two such are relayed)
    addresses = {p: a or f"no address: it dials {federation.active}" for p, a in ordered_addresses(federation).items()}
    try:
        with watch.connecting(transport, addresses) if watch is not None else contextlib.nullcontext():
            transport.wait_ready()
    except BaseException as exc:
        transport.abort(f"{name} could not set up its links: {exc}")
        transport.close()
        raise
    security = "plaintext, loopback" if federation.insecure else "mutual TLS"
    for peer in getattr(transport, "peers", ()):
        log_event(_log, name, "connect", "link_up", f"link to {peer} up ({security})", peer=peer,
                  address=addresses.get(peer))
    return transport


@contextmanager
def party_links(federation: Federation, name: str, transport: Any = None, phase: str = "train",
                watch: PartyWatch | None = None) -> Iterator[Any]:
    """The links of party ``name`` for one run, opened here unless given, and closed here if opened here.

    On any failure every peer is told at once (ABORT with the reason), so they stop now, not at a timeout.
    """
    own = transport is None
    transport = transport or open_transport(federation, name, phase, watch)
    try:
        yield transport
    except BaseException as exc:
        transport.abort(f"{name} stopped: {type(exc).__name__}: {exc}")
        raise
    finally:
        if own:
            transport.close()


def ordered_addresses(federation: Federation) -> dict[str, str | None]:
    """Parties in run order: the active party first, then the others as the file lists them."""
    addresses = federation.addresses
    return {federation.active: addresses[federation.active],
            **{n: a for n, a in addresses.items() if n != federation.active}}


# ------------------------------------------------------------------ phase 1: PSI over the links


def _ids_digest(items: list[str]) -> str:
    h = hashlib.sha256(b"securevfl/deploy/alignment/v1")
    for item in items:
        data = item.encode("utf-8")
        h.update(len(data).to_bytes(4, "big") + data)
    return h.hexdigest()


@dataclass(frozen=True)
class PsiResult:
    """One party's PSI outcome.

    Its aligned rows in the agreed order, their count, and at the active party the set size each
    passive party showed in PSI (what it may later claim as its row count).
    """

    rows: np.ndarray
    size: int
    peer_sizes: Mapping[str, int] = field(default_factory=dict)


def psi_role(table: PartyTable, federation: Federation) -> Callable[[PartyContext], PsiResult]:
    """The PSI part of the setup phase for one party."""
    from psi import CurveEngine, PSIConfig, PSIInitiator, PSIResponder, prepare_ids
    from psi.protocol import Mode, global_alignment

    job = federation.job
    with psi_errors():
        config = PSIConfig(mode=job.psi_mode, normalize=job.normalize)
    if config.mode is not Mode.BOTH:
        raise ConfigError(f"training needs psi_mode = 'both' (every party learns its rows), got {job.psi_mode!r}")

    @psi_errors()  # a bad PSI message is securevfl's ProtocolError, a bad ID its DataError
    def role(ctx: PartyContext) -> PsiResult:
        ctx.stage = "PSI"
        prepared = prepare_ids(list(table.ids), config.normalize, source=f"party {ctx.name!r}")
        own = len(prepared.items)
        peers = ctx.passives if ctx.is_active else (ctx.active,)
        log_event(_log, ctx.name, "psi", "psi_start", f"PSI: {own} IDs, with {', '.join(peers)}", rows=own,
                  peers=list(peers))
        align = len(ctx.passives) > 1
        with CurveEngine(1) as engine:
            if ctx.is_active:
                inits = {}
                for p in ctx.passives:
                    with ctx.meter.crypto("psi"):
                        init = PSIInitiator(prepared.items, config, engine, align_follows=align)
                        message = init.start()
                    step = 0  # HELLO out, REPLY in; BLINDED out, DOUBLE in
                    while message is not None:
                        _psi_step(ctx, p, "sent", ctx.send(p, TAG_PSI, message),
                                  f"sent our {own} blinded IDs" if step == 1 else "")
                        answer = _bytes(ctx.recv(p, TAG_PSI), p)
                        _psi_step(ctx, p, "received", len(answer), "received its blinded IDs; blinding them, and "
                                  f"hashing and blinding our {own}" if step == 0 else "")
                        with ctx.meter.crypto("psi"):
                            message = init.handle(answer)
                        step += 1
                    inits[p] = init
                    assert init.outcome is not None and init.outcome.positions is not None
                    _psi_pair(ctx, p, len(init.outcome.positions), own, init.peer_size)
                with ctx.meter.crypto("psi"):
                    positions, orders = global_alignment([inits[p].outcome.positions for p in ctx.passives])
                if align:
                    for p, order in zip(ctx.passives, orders, strict=True):
                        ctx.send(p, TAG_PSI, inits[p].align(order))
            else:
                responder = PSIResponder(prepared.items, config, engine)
                step = 0  # HELLO in, REPLY out; BLINDED in, DOUBLE out; ALIGN in (N parties)
                while not responder.done:
                    message = _bytes(ctx.recv(ctx.active, TAG_PSI), ctx.active)
                    _psi_step(ctx, ctx.active, "received", len(message),
                              f"hashing and blinding our {own} IDs" if step == 0 else
                              "received its blinded IDs; blinding them" if step == 1 else "")
                    with ctx.meter.crypto("psi"):
                        reply = responder.handle(message)
                    if reply is not None:
                        _psi_step(ctx, ctx.active, "sent", ctx.send(ctx.active, TAG_PSI, reply),
                                  f"sent our {own} blinded IDs" if step == 0 else "")
                    step += 1
                assert responder.outcome is not None and responder.outcome.positions is not None
                _psi_pair(ctx, ctx.active, len(responder.outcome.positions), own, responder.peer_size)
                if responder.align_follows != align:
                    raise ProtocolError(f"{ctx.active} announced a PSI alignment step contrary to the federation")
                # With an ALIGN step (N parties) the loop above handled it: the global order.
                positions = responder.outcome.global_positions if align else responder.outcome.positions
        # The agreed order follows the session's random blinded values; every party re-sorts by the
        # (normalised) IDs, as the threaded run does, so a seeded run is the same in every session.
        items = [prepared.items[i] for i in positions]
        order = sorted(range(len(items)), key=items.__getitem__)
        rows = prepared.rows[np.asarray(positions, dtype=np.int64)[order]] if order else np.zeros(0, np.int64)
        digest = _ids_digest([items[i] for i in order])
        if ctx.is_active:
            for p in ctx.passives:
                if ctx.recv(p, TAG_DIGEST) != digest:
                    raise ProtocolError(f"the aligned rows of {p} are not in the active party's order "
                                        "(different ID normalisation?)")
        else:
            ctx.send(ctx.active, TAG_DIGEST, digest)
        peer_sizes = {p: int(inits[p].peer_size) for p in ctx.passives} if ctx.is_active else {}
        log_event(_log, ctx.name, "psi", "psi_done", f"PSI: {len(items)} rows shared by every party",
                  rows=len(items), bytes=sent_bytes(ctx))
        return PsiResult(rows, len(items), peer_sizes)

    return role


def _psi_step(ctx: PartyContext, peer: str, direction: str, size: int, stage: str) -> None:
    """One PSI message: its size (debug), and the stage it starts or ends when it does (info)."""
    if stage:
        log_event(_log, ctx.name, "psi", f"psi_{direction}", f"PSI with {peer}: {stage} ({size} bytes {direction})",
                  peer=peer, bytes=size)
    else:
        log_event(_log, ctx.name, "psi", f"psi_{direction}", f"PSI with {peer}: {direction} {size} bytes",
                  level=logging.DEBUG, peer=peer, bytes=size)


def _psi_pair(ctx: PartyContext, peer: str, common: int, own: int, peer_size: int | None) -> None:
    """A pairwise PSI's result: how many of this party's IDs the peer holds too."""
    log_event(_log, ctx.name, "psi", "psi_pair", f"PSI with {peer}: {common} of {own} IDs in common"
              + (f" ({peer} holds {peer_size})" if peer_size is not None else ""), peer=peer, rows=common,
              peer_rows=peer_size)


def _bytes(message: Any, sender: str) -> bytes:
    if not isinstance(message, bytes):
        raise ProtocolError(f"malformed PSI message from {sender}: expected bytes")
    return message


def _unaligned(n_rows: int, aligned: np.ndarray) -> np.ndarray:
    mask = np.ones(n_rows, dtype=bool)
    mask[aligned] = False
    return np.flatnonzero(mask)


def align_over_network(transport: Any, federation: Federation, name: str, table: PartyTable) -> LocalAlignment:
    """Run the PSI phase alone (``securevfl psi --federation``); returns this party's alignment."""
    psi, meter = run_party(psi_role(table, federation), name=name, active=federation.active,
                           parties=data_party_order(federation), transport=transport)
    return LocalAlignment(psi.rows, _unaligned(table.n_rows, psi.rows), psi.size, meter.snapshot())


# ------------------------------------------------------------------ phase 1b: the plan


def plan_role(table: PartyTable, classes: tuple[str, ...], federation: Federation,
              psi: Callable[[PartyContext], PsiResult]) -> Callable[[PartyContext], dict]:
    """PSI, then shapes in and the plan out (see the module docstring)."""
    job = federation.job

    def encode(rows: np.ndarray, train: np.ndarray) -> tuple[PartyShape, EncodedColumns]:
        """The party's own preprocessing fitted on its own training rows, and the shape it gives."""
        encoded = encode_table(table, training_rows(rows, train, _unaligned(table.n_rows, rows)))
        return PartyShape(table.n_rows, len(rows), encoded.X.shape[1]), encoded

    def role(ctx: PartyContext) -> dict:
        psi_result = psi(ctx)
        rows, size = psi_result.rows, psi_result.size
        ctx.stage = "plan"
        if not ctx.is_active:
            split = _parse_split(ctx.recv(ctx.active, TAG_SPLIT), ctx.active, size)
            own, encoded = encode(rows, split["train"])
            ctx.send(ctx.active, TAG_SHAPE, own.to_wire())
            plan = _parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, (ctx.active, *ctx.passives), size)
            if not (np.array_equal(plan["train"], split["train"]) and np.array_equal(plan["test"], split["test"])):
                raise ProtocolError(f"the plan from {ctx.active} has another train/test split than it announced")
            if plan["shapes"][ctx.name] != own:
                raise ProtocolError(f"the plan from {ctx.active} gives {ctx.name} the table shape "
                                    f"{plan['shapes'][ctx.name].to_wire()}; {ctx.name} sent {own.to_wire()}")
            log_plan(ctx, plan)
            return {"rows": rows, "plan": plan, "encoded": encoded}
        if size < 10:
            raise DataError(f"only {size} rows are shared by all parties; at least 10 are needed to train and test")
        assert table.labels is not None
        check_shared_classes(table.labels[rows], classes, size, table.task)
        train, test = split_train_test(size, table.labels[rows], job.test_size, job.seed)
        split = {"train": np.sort(train).astype(np.int64), "test": np.sort(test).astype(np.int64)}
        ctx.broadcast(ctx.passives, TAG_SPLIT, split)
        own, encoded = encode(rows, split["train"])
        shapes = {ctx.name: own}
        for p in ctx.passives:  # checked against what PSI showed before anything is sized by it
            shapes[p] = PartyShape.from_wire(ctx.recv(p, TAG_SHAPE), p, aligned=size,
                                             rows=psi_result.peer_sizes.get(p))
        n_classes = 1 if table.task == REGRESSION else len(classes)  # the model's output width
        plan = {**split, "task": table.task, "n_classes": n_classes,
                "shapes": {n: s.to_wire() for n, s in shapes.items()},
                "model": secrets.token_hex(16)}  # names the model every party may save (--model-dir)
        ctx.broadcast((*ctx.passives, *helper_parties(federation)), TAG_PLAN, plan)
        log_plan(ctx, {**plan, "shapes": shapes})
        return {"rows": rows, "plan": {**plan, "shapes": shapes}, "encoded": encoded}

    return role


def helper_plan_role(federation: Federation) -> Callable[[PartyContext], dict]:
    """A party without data (an arbiter, a key generator, a server): it only receives the plan."""
    data_parties = data_party_order(federation)

    def role(ctx: PartyContext) -> dict:
        ctx.stage = "plan"
        plan = _parse_plan(ctx.recv(ctx.active, TAG_PLAN), ctx.active, ctx.name, data_parties, None)
        log_plan(ctx, plan)
        return {"rows": np.zeros(0, np.int64), "plan": plan}

    return role


def log_plan(ctx: PartyContext, plan: Mapping[str, Any]) -> None:
    """The plan as this party has it: rows to train and test, classes, each party's encoded width."""
    train, test = len(plan["train"]), len(plan["test"])
    widths = {p: int(s.features) for p, s in plan["shapes"].items()}
    source = "" if ctx.is_active else f" from {ctx.active}"
    what = f"{train} to train, {test} to test" if train else f"{test} to score"
    log_event(_log, ctx.name, "plan", "plan", f"plan{source}: {train + test} shared rows ({what}); encoded "
              "features " + ", ".join(f"{p} {w}" for p, w in widths.items()), rows=train + test, train=train,
              test=test, classes=plan["n_classes"], features=widths)


def helper_parties(federation: Federation) -> tuple[str, ...]:
    """Parties without data, in file order."""
    return tuple(n for n in federation.parties if not federation.parties[n].data)


def data_party_order(federation: Federation) -> tuple[str, ...]:
    """Parties with data in run order: the active party first, then the others as the file lists them."""
    return tuple(n for n in ordered_addresses(federation) if federation.parties[n].data)


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


def _parse_plan(message: Any, sender: str, me: str, parties: tuple[str, ...], size: int | None) -> dict:
    """Validate the active party's plan; ``size``: this party's aligned rows (``None`` for a helper)."""
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
    parsed = {n: PartyShape.from_wire(s, sender, n, aligned=size) for n, s in shapes.items()}
    return {"train": train, "test": test, "task": task, "n_classes": n_classes, "shapes": parsed,
            **({"model": model} if model is not None else {})}


def local_scenario(name: str, federation: Federation, table: PartyTable | None, classes: tuple[str, ...],
                   rows: np.ndarray, plan: Mapping[str, Any], cost: Mapping[str, Any],
                   encoded: EncodedColumns | None = None) -> Scenario:
    """The scenario one party runs: its own table, and a zero placeholder of the right shape per peer.

    Its own table is encoded by its own preprocessing, fitted on its training rows (``plan``'s split);
    ``encoded``: that encoding, when the plan already fitted it. A peer's placeholder has the peer's
    encoded width and the aligned rows only (the count this party's own PSI agreed; a peer's unaligned
    rows are its own business), and its zeros are one shared read-only value: it costs no memory per
    row or column, so no count a peer announces sizes an allocation here.
    """
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
            unaligned[party] = _unaligned(table.n_rows, rows)
            continue
        # The active party's placeholder carries placeholder labels (all class 0, or 0.0) so that methods
        # that check "the active party holds the labels" build every role; only this party's role ever runs.
        n = shape.aligned  # == this party's own PSI size (checked when the shape was received)
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
    size = len(plan["train"]) + len(plan["test"])
    alignment = Alignment(aligned=aligned, unaligned=unaligned,
                          method=f"ECDH PSI over the network (X25519, {size} shared IDs)", cost=dict(cost))
    scenario = Scenario(tables=tables, active=federation.active, classes=classes, alignment=alignment,
                        train=plan["train"], test=plan["test"], task=plan["task"],
                        dataset=f"federation {federation.source.name if federation.source else ''}".strip(),
                        notes=(f"alignment: ECDH PSI over the network; {size} shared rows",
                               f"deployment: one process per party ({', '.join(federation.parties)})"))
    if encoded is not None:
        scenario.remember_encoding(name, encoded)
    return scenario


# ------------------------------------------------------------------ the whole party


def _method_and_config(federation: Federation, device: str, checkpoint_dir: str | Path | None = None,
                       resume: bool = False, checkpoint_overwrite: bool = False, positive_class: str | None = None):
    from securevfl.api import RunConfig
    from securevfl.data import DatasetOptions, PartitionSpec
    from securevfl.methods import TrainConfig, create_method

    job = federation.job
    train = TrainConfig(epochs=job.epochs, batch_size=job.batch_size, lr=job.lr, seed=job.seed,
                        embedding_dim=job.embedding_dim, hidden=tuple(job.hidden), options=dict(job.options),
                        early_stopping=job.early_stopping, val_fraction=job.val_fraction, class_weight=job.class_weight,
                        checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, resume=resume,
                        checkpoint_overwrite=checkpoint_overwrite)
    config = RunConfig(method=job.method, dataset="federation",
                       dataset_options=DatasetOptions(id_column=job.id_column, label_column=job.label_column,
                                                      seed=job.seed),
                       partition=PartitionSpec(parties=len(federation.parties), test_size=job.test_size,
                                               seed=job.seed),
                       train=train, device=device, alignment="psi", positive_class=positive_class)
    return create_method(job.method, train), config


def run_deployed_party(federation: Federation, name: str, data: str | Path | None, *, device: str = "auto",
                       progress: Callable[..., None] | None = None, transport: Any = None,
                       checkpoint_dir: str | Path | None = None, resume: bool = False,
                       columns: ColumnSpec | None = None, checkpoint_overwrite: bool = False,
                       model_dir: str | Path | None = None, overwrite_model: bool = False,
                       threads: int | ThreadChoice | None = None,
                       positive_class: str | None = None) -> DeployedResult:
    """Run party ``name`` of ``federation`` on its own ``data`` file, in this process, to the end.

    A party with ``data = false`` in the federation file (an arbiter, a key generator, a server) takes
    no ``data`` and no part in PSI; it receives the plan and runs its role. ``checkpoint_dir``: this
    party saves its own state there at each epoch end (``DIR/<name>/``); ``resume`` continues from the
    last epoch every party completed (every party must be started with ``resume``);
    ``checkpoint_overwrite`` moves this party's old checkpoints aside for a new run. ``columns``: how
    this party reads and encodes its own file (default: its ``[parties.<name>.columns]`` section);
    the other parties never see it. ``model_dir``: this party saves its own part of the trained
    model under ``DIR/<name>/`` (:mod:`securevfl.model`; ``overwrite_model`` replaces one there;
    a standalone method's passive parties save nothing: the model is the active party's alone; nor
    does a helper: it holds no part of a model, hetero-lr's arbiter makes fresh keys when it scores);
    ``securevfl party --predict`` scores with it (:mod:`securevfl.deploy.scoring`). ``threads``: torch's
    threads in this process (0: torch's default; or a :class:`~securevfl.deploy.threads.ThreadChoice`
    already made), by default the party's ``threads`` in the file, else this process's setting as it
    is (``securevfl party`` shares the machine's cores among the parties the file lists on its host;
    :mod:`securevfl.deploy.threads`). The start event names the count and why.
    ``positive_class`` (the active party only): the class binary F1 and AUC score as positive (default:
    the second of the label's classes: a file's class names in sorted order).
    """
    from securevfl.api import assemble_report, resolve_device
    from securevfl.data.files import party_table_from_file
    from securevfl.deploy.threads import use_threads

    started = time.perf_counter()
    threads_used = use_threads(federation, name, threads)  # before any torch work
    job = federation.job
    helper = not federation.party(name).data
    is_active = name == federation.active
    # refuse a bad method or option before connecting
    method, config = _method_and_config(federation, device, checkpoint_dir, resume, checkpoint_overwrite,
                                        positive_class)
    if positive_class is not None and not is_active:
        raise ConfigError(f"--positive-class is for the active party ({federation.active}), which holds the labels")
    if model_dir is not None and (helper or method.standalone and not is_active):
        model_dir = None  # a helper holds no part of a model; a standalone model is the active party's alone
    if model_dir is not None:
        from securevfl.model.saving import check_model_dir, check_savable

        check_savable(method)
        check_model_dir(model_dir, overwrite_model, party=name)
    table: PartyTable | None = None
    classes: tuple[str, ...] = ()
    if helper:
        if data is not None:
            raise ConfigError(f"{name} has data = false in the federation file: it takes no --data")
    elif data is None:
        raise ConfigError(f"{name} is a party with data: give its table (--data FILE)")
    else:
        spec = columns if columns is not None else federation.party(name).columns
        table, classes = party_table_from_file(name, data, id_column=job.id_column, label_column=job.label_column,
                                               is_active=is_active, columns=spec, task=job.task)
        if is_active:
            positive_index(classes, positive_class, table.task)  # refused before connecting
    torch_device = resolve_device(device)
    data_parties = data_party_order(federation)
    passives = data_parties[1:]  # the passive data parties; helpers are peers, not passives
    log_start(federation, name, "train", table.n_rows if table is not None else None, threads_used)
    with PartyWatch(name) as watch, party_links(federation, name, transport, watch=watch) as transport:
        if table is None:
            setup_role, setup_parties = helper_plan_role(federation), (*data_parties, name)
        else:
            setup_role, setup_parties = plan_role(table, classes, federation, psi_role(table, federation)), data_parties
        setup, setup_meter = run_party(watch.role(setup_role, "plan"), name=name, active=federation.active,
                                       parties=setup_parties, passives=passives, transport=transport, finish=False,
                                       recv_timeout=federation.limits.recv_timeout_s)
        rows, plan, encoded = setup["rows"], setup["plan"], setup.get("encoded")
        size = len(plan["train"]) + len(plan["test"])
        n_rows = table.n_rows if table is not None else 0
        alignment = LocalAlignment(rows, _unaligned(n_rows, rows), size, setup_meter.snapshot())
        scenario = local_scenario(name, federation, table, classes, rows, plan, cost={}, encoded=encoded)
        roles = method.party_roles(scenario)
        check_roles(job.method, roles, tuple(federation.parties))
        role = roles[name]
        watch.event("train", "train_start", f"training {job.method}: {job.epochs} epochs", method=job.method,
                    epochs=job.epochs)
        outcome, meter = run_party(watch.role(_with_cost_exchange(role, alignment.snapshot, transport.link_stats)),
                                   name=name, active=federation.active, parties=tuple(roles), passives=passives,
                                   transport=transport,
                                   device=torch_device, seed=job.seed, progress=progress,
                                   recv_timeout=federation.limits.recv_timeout_s)
        result = DeployedResult(name, alignment, link_stats=transport.link_stats(), threads=threads_used.threads,
                                preprocessing=scenario.encoded(name).summary if table is not None else {})
        if is_active:
            value, train_snapshots, setup_snapshots, links, missing = outcome
            psi_total = MeterSnapshot()
            for snap in setup_snapshots.values():
                psi_total = psi_total.merged(snap)
            psi_cost = {"intersection_size": alignment.size, "total_bytes": sum(psi_total.bytes.values()),
                        "bytes_per_link": dict(sorted(psi_total.bytes.items())), "rounds": psi_total.rounds,
                        "crypto_s": psi_total.crypto_s}
            scenario = scenario.with_alignment_cost(psi_cost)
            result.snapshots = train_snapshots
            result.report = assemble_report(config, scenario, value, train_snapshots, method.describe(),
                                            wall_s=time.perf_counter() - started)
            result.report.cost["alignment"]["crypto_s"] = psi_total.crypto_s
            result.report.config["threads"] = threads_used.threads  # this party's torch threads
            for peer, shape in plan["shapes"].items():  # placeholders hold the aligned rows only
                if peer != name and peer in result.report.parties:  # the counts PSI showed this party
                    result.report.parties[peer].update(rows=shape.rows, unaligned=shape.rows - shape.aligned)
            if missing:
                result.report.cost["missing"] = missing
                result.report.notes.append("warning: the costs of " + ", ".join(sorted(missing)) + " are missing "
                                           "(lost after training; the metrics are complete): "
                                           + "; ".join(f"{p}: {r}" for p, r in sorted(missing.items())))
            result.report.cost["wire"] = {
                "what": "gRPC messages per directed link up to the cost summary (setup, PSI, training, ACKs, "
                        "heartbeats, resends); HTTP/2 and TLS framing add a few % (benchmarks/network.py)",
                "links": dict(sorted(links.items())),
                "frame_bytes": sum(v["frame_bytes"] for v in links.values()),
                "codec_bytes": sum(v["payload_bytes"] for v in links.values()),
                # star topology: messages between two parties other than the hub cross two links, sealed
                "relayed_bytes": sum(v.get("relayed_bytes", 0) for v in links.values()),
            }
        else:
            result.snapshots = {name: meter.snapshot()}
        if model_dir is not None:
            _save_own_part(model_dir, name, federation, method, config.train, role, scenario, table, classes,
                           plan, result.report, overwrite_model)
    result.wall_s = time.perf_counter() - started
    log_done(name, f"{alignment.size} shared rows; done in {result.wall_s:.1f} s", result.wall_s,
             alignment.size, result.link_stats)
    return result


def log_start(federation: Federation, name: str, mode: str, rows: int | None,
              threads: ThreadChoice | None = None) -> None:
    """The party's first event: who it is, what it runs, where it listens, whom it connects to, its torch threads."""
    import torch

    threads = threads or ThreadChoice(torch.get_num_threads(), "this process's torch setting", set_here=False)
    role = "active" if name == federation.active else "passive" if federation.party(name).data else "helper"
    peers = [p for p in federation.parties if p != name]
    security = "plaintext, loopback" if federation.insecure else "mutual TLS"
    held = f", {rows} rows" if rows is not None else ""
    if federation.topology == "star" and name != federation.active:  # it dials the active party alone
        others = [p for p in peers if p != federation.active]
        links = f"dialling out to {federation.active} (star hub" + (f"; it relays {', '.join(others)})" if others
                                                                     else ")")
    elif federation.topology == "star":
        links = f"listening for {', '.join(peers) or 'no other party'} (star hub)"
    else:
        links = f"connecting to {', '.join(peers) or 'no other party'}"
    log_event(_log, name, "start", "start", f"{federation.job.method} ({mode}), {role} party{held}; {links} "
              f"({security}); {threads.describe()}", role=role,
              method=federation.job.method, mode=mode, address=federation.addresses.get(name), peers=peers,
              tls=not federation.insecure, rows=rows, threads=threads.threads, threads_source=threads.source)


def log_done(name: str, message: str, wall_s: float, rows: int,
             links: Mapping[str, Mapping[str, int]] | None = None, **fields: Any) -> None:
    """The party's last event: wall time, rows and the bytes it put on the wire (its own links)."""
    sent = sum(v.get("frame_bytes", 0) for k, v in (links or {}).items() if k.startswith(f"{name}->"))
    log_event(_log, name, "end", "done", message, wall_s=round(wall_s, 3), rows=rows, bytes=sent, **fields)


def _save_own_part(model_dir: str | Path, name: str, federation: Federation, method: Any, train: Any, role: Any,
                   scenario: Scenario, table: PartyTable | None, classes: tuple[str, ...], plan: Mapping[str, Any],
                   report: Any, overwrite: bool) -> None:
    """Save the own part of the trained model, and nothing of any other party's (issue 27)."""
    from securevfl.methods.engine.kept import saved_of
    from securevfl.model.saving import (
        check_savable,
        model_fingerprint,
        model_parties,
        party_schema,
        save_part,
        train_settings,
    )

    check_savable(method, {name: role})
    if table is None:
        raise ConfigError(f"{name} holds no data: the methods that save models have no such party")
    job = federation.job
    settings = train_settings(train)
    parties = model_parties(method, {p: ("active" if p == federation.active else "passive")
                                     for p in data_party_order(federation)})
    fingerprint = model_fingerprint(method.name, settings, parties, plan["model"])
    encoder = scenario.encoded(name).encoder
    schema = party_schema(encoder, table.columns, id_column=job.id_column,
                          label_column=job.label_column if name == federation.active else None)
    save_part(model_dir, party=name, role=parties[name], side_saved=saved_of(role), encoder=encoder,
              schema=schema, method=method, settings=settings, parties=parties, fingerprint=fingerprint,
              task=scenario.task, classes=classes, report=report.to_dict() if report is not None else None,
              overwrite=overwrite)


def check_roles(method: str, roles: Mapping[str, Any], parties: tuple[str, ...]) -> None:
    """The method's roles must be exactly the federation's parties (helpers such as an arbiter included)."""
    extra = sorted(set(roles) - set(parties))
    if extra:
        raise ConfigError(f"{method} needs parties that run beside the data parties: add "
                          + ", ".join(f"[parties.{n}] with an address and data = false" for n in extra)
                          + " to the federation file")
    idle = sorted(set(parties) - set(roles))
    if idle:
        raise ConfigError(f"{method} has no role for {', '.join(idle)}: remove it from the federation file")


_WIRE_KEYS = ("frames", "frame_bytes", "payload_bytes", "resent_frames", "reconnects", "relayed_bytes")


def _with_cost_exchange(role: Callable[[PartyContext], Any], setup: MeterSnapshot,
                        wire: Callable[[], dict[str, dict[str, int]]]) -> Callable[[PartyContext], Any]:
    """Run ``role``, then gather costs at the active party.

    Every other party (passive parties and helpers) sends its meter snapshot and link counters:
    costs, never data. The training is over by then: a peer lost or misbehaving at this step costs
    the report that peer's costs (named under ``missing``), never the finished run's metrics.
    """

    def wrapped(ctx: PartyContext) -> Any:
        value = role(ctx)
        ctx.stage = "cost summary"
        if not ctx.is_active:
            ctx.send(ctx.active, TAG_COST, {"train": ctx.meter.snapshot().to_wire(), "setup": setup.to_wire(),
                                            "wire": wire()})
            log_event(_log, ctx.name, "cost", "cost", f"cost summary sent to {ctx.active}", peer=ctx.active,
                      bytes=sent_bytes(ctx))
            return value
        train = {ctx.name: ctx.meter.snapshot()}
        setups = {ctx.name: setup}
        links = dict(wire())
        missing: dict[str, str] = {}
        for p in ctx.peers:
            try:
                message = ctx.recv(p, TAG_COST)
                if not isinstance(message, dict) or set(message) != {"train", "setup", "wire"}:
                    raise ProtocolError(f"malformed cost summary from {p}")
                costs = (MeterSnapshot.from_wire(message["train"], p), MeterSnapshot.from_wire(message["setup"], p),
                         _parse_wire(message["wire"], p))
            except SecureVFLError as exc:  # a lost or aborting peer, a malformed summary
                missing[p] = f"{type(exc).__name__}: {exc}"
                continue
            train[p], setups[p] = costs[0], costs[1]
            links.update(costs[2])
        got = [p for p in ctx.peers if p not in missing]
        log_event(_log, ctx.name, "cost", "cost", "cost summary: " + (f"from {', '.join(got)}" if got else "none")
                  + (f"; missing from {', '.join(sorted(missing))}" if missing else ""),
                  level=logging.WARNING if missing else logging.INFO, peers=got, missing=sorted(missing))
        return value, train, setups, links, missing

    return wrapped


def _parse_wire(message: Any, sender: str) -> dict[str, dict[str, int]]:
    ok = isinstance(message, dict) and all(
        isinstance(link, str) and link.startswith(f"{sender}->") and isinstance(stats, dict)
        and set(stats) == set(_WIRE_KEYS)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in stats.values())
        for link, stats in message.items())
    if not ok:
        raise ProtocolError(f"malformed link counters from {sender}")
    return message
