"""The exploring protocol: WOE / IV of every party's columns and cross-party Pearson, the label kept at the active one.

Rows: the rows every party shares (PSI), in the order every party agreed, the training rows only
(what is selected on never sees the test rows). Per passive party, in one round:

1. **key** (active → passive): a fresh Paillier public key (the ``fast`` backend), the row count, and
   what is asked (WOE needs a label of two classes: the event is the positive class).
2. **labels** (active → passive): ``Enc(y_i)`` for every row, y_i = 1 for an event, else 0.
3. **woe sums** (passive → active): the passive party bins its own columns (:mod:`.bins`), multiplies
   the ciphertexts of each bin's rows (:class:`~securevfl.privacy.paillier.histograms.EncryptedHistogrammer`:
   ``Enc(Σ_{i in bin} y_i)``, the events of the bin), re-randomises each product, and sends the
   products with the bins' row counts. With ``epsilon`` it first adds two-sided geometric noise to
   each bin's events (under encryption) and non-events (through the count): ε-differential privacy
   of the per-bin counts of each column, replace-one-row adjacency (a row changes two bins' counts).
4. **pearson** (active → passive, passive → active), for numeric columns: the active party standardises
   its own numeric columns (z-scores on these rows, a missing value at the mean), encodes them in
   fixed point and packs many columns per plaintext (:func:`pack_slots`), and sends ``Enc(P_i)`` per
   row; the passive party computes ``Π_i Enc(P_i)^{b_ij}`` for each of its own standardised columns j
   (Straus interleaving, :meth:`~securevfl.privacy.paillier.fast_backend.FastBackend.linear_combine_raw`):
   every slot then holds ``Σ_i a_ik b_ij``, re-randomised and sent back; the active party decrypts
   and divides by the rows: the Pearson correlation of every pair of numeric columns.

**What each party learns.** The active party: each passive party's per-bin row and event counts (so
each bin's WOE), and the correlation of each of its numeric columns with each of the passive party's
— never a passive party's values, its bins' edges, its statistics or its column names unless that
party shares them (``share_stats = summary``). A passive party: the row count and ciphertexts only —
nothing of the label. Both are honest-but-curious guarantees: an active party that encrypted
something other than its labels (a selector of one row) would learn that row's bin. Every size a
peer announces is checked against what was agreed before anything is allocated.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from securevfl.data.columns import NUMERIC
from securevfl.errors import ConfigError, ProtocolError
from securevfl.exploration.bins import MAX_BINS_LIMIT, BinnedTable, bin_table
from securevfl.exploration.options import ExploreOptions
from securevfl.exploration.select import keep_mask, parse_select
from securevfl.exploration.stats import table_stats
from securevfl.exploration.woe import WoeTable, woe_iv
from securevfl.federation.runtime import PartyContext
from securevfl.privacy.paillier import PaillierPublicKey, create_backend, generate_keypair
from securevfl.privacy.paillier.histograms import EncryptedHistogrammer
from securevfl.privacy.paillier.registry import check_backend_and_key
from securevfl.privacy.paillier.wire import ciphertext_bytes, from_wire, to_wire

KEY = "explore.setup.key"
LABELS = "explore.woe.labels"
WOE_SUMS = "explore.woe.sums"
PEARSON_COLUMNS = "explore.pearson.columns"
PEARSON_SUMS = "explore.pearson.sums"
SELECT = "explore.select.keep"

#: Fixed-point fraction bits of a standardised value in the Pearson products.
FRACTION_BITS = 16
#: A z-score is clipped to ±2^Z_BITS before encoding (a value 1024 deviations out: never, in practice).
Z_BITS = 10
#: The most columns a party may announce (sizes a peer sends are checked before allocating).
MAX_COLUMNS = 100_000
#: The largest public key a passive party reads (a 3072-bit key is about 800 bytes).
MAX_KEY_BYTES = 4096
#: Two-sided geometric noise is drawn with numpy from a seed of the OS's randomness (never ``random``).


@dataclass
class ExploreInput:
    """One party's explored rows (in the agreed order) as raw columns, and the events at the active party."""

    name: str
    frame: pd.DataFrame
    kinds: dict[str, str]
    events: np.ndarray | None = None  # active, two-class label: 1 for the positive class, else 0
    rows_total: int = 0  # the rows of the party's whole table


@dataclass
class PartyFindings:
    """What the active party knows of one party's columns after exploring."""

    name: str
    columns: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    bins: list[dict[str, Any]] = field(default_factory=list)  # per column: labels (where shared) and edges
    counts: np.ndarray | None = None  # (columns, width): rows per bin
    woe: list[WoeTable] = field(default_factory=list)
    stats: dict[str, dict[str, Any]] | None = None
    shared: bool = True
    epsilon: float | None = None

    def ivs(self) -> dict[str, float]:
        return {c: t.iv for c, t in zip(self.columns, self.woe, strict=False)}


@dataclass
class Findings:
    """The active party's result: every party's findings and the cross-party correlations."""

    active: str
    rows: int
    events: int | None
    parties: dict[str, PartyFindings]
    #: per passive party: (active numeric columns, its numeric columns, the correlation matrix)
    correlation: dict[str, tuple[tuple[str, ...], tuple[str, ...], np.ndarray]] = field(default_factory=dict)
    key_bits: int = 0
    timing: dict[str, float] = field(default_factory=dict)
    #: with a selection rule: per party, which of its columns (by position) training keeps
    kept: dict[str, list[bool]] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- fixed point


def standardized(frame: pd.DataFrame, kinds: Mapping[str, str]) -> tuple[tuple[str, ...], np.ndarray]:
    """The numeric columns' z-scores on these rows (population std; a missing value at the mean; constants dropped)."""
    names, columns = [], []
    for c in frame.columns:
        if kinds[c] != NUMERIC:
            continue
        x = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        present = ~np.isnan(x)
        if present.sum() < 2:
            continue
        mean = x[present].mean()
        x = np.where(present, x, mean)
        std = x.std()
        if not std > 0:
            continue
        names.append(str(c))
        columns.append((x - mean) / std)
    z = np.stack(columns, axis=1) if columns else np.zeros((len(frame), 0))
    return tuple(names), z


def fixed_point(z: np.ndarray) -> np.ndarray:
    """z-scores as signed integers of :data:`FRACTION_BITS` fraction bits, clipped to ±2^:data:`Z_BITS`."""
    limit = float(1 << Z_BITS)
    encoded: np.ndarray = np.rint(np.clip(z, -limit, limit) * (1 << FRACTION_BITS)).astype(np.int64)
    return encoded


def slot_bits(rows: int) -> int:
    """Bits of one packed slot: a sum of ``rows`` products of two encoded values, with its sign."""
    value = FRACTION_BITS + Z_BITS + 1
    return 2 * value + max(1, rows).bit_length() + 1


def pack_slots(values: np.ndarray, bits: int, n: int) -> list[int]:
    """Each row's signed values as one plaintext ``Σ_k v_k 2^(k·bits) mod n`` (the first in the lowest bits)."""
    out = []
    for row in values.tolist():
        acc = 0
        for v in reversed(row):
            acc = (acc << bits) + int(v)
        out.append(acc % n)
    return out


def unpack_slots(value: int, count: int, bits: int, n: int) -> list[int]:
    """The ``count`` signed slots of a decrypted packed sum (a residue above n/2 is negative)."""
    acc = value - n if value > n // 2 else value
    out = []
    half, full = 1 << (bits - 1), 1 << bits
    for _ in range(count):
        digit = acc & (full - 1)
        if digit >= half:
            digit -= full
        out.append(digit)
        acc = (acc - digit) >> bits
    return out


def slots_per_plaintext(n_bits: int, rows: int) -> int:
    """Packed slots per plaintext: their signed sum must stay below n/2."""
    return max(1, (n_bits - 2) // slot_bits(rows))


def count_layout(n_bits: int, rows: int) -> tuple[int, int]:
    """Exact per-bin event counts packed per plaintext: (counts per ciphertext, bits per count).

    A count is at most ``rows`` (< 2^bits), so ``per`` counts, the first in the lowest bits, stay below
    2^(n_bits − 1) <= n: the active party reads each back exactly, and nothing else.
    """
    bits = max(1, rows).bit_length()
    return max(1, (n_bits - 1) // bits), bits


def geometric_noise(shape: tuple[int, ...], epsilon: float, sensitivity: float = 2.0) -> np.ndarray:
    """Two-sided geometric noise (the discrete Laplace) of scale ``sensitivity / epsilon``, seeded from the OS."""
    rng = np.random.default_rng(secrets.randbits(128))
    p = 1.0 - math.exp(-epsilon / sensitivity)
    return (rng.geometric(p, size=shape) - rng.geometric(p, size=shape)).astype(np.int64)


# ----------------------------------------------------------------------------------------------- wire


def _message(value: Any, sender: str, tag: str, keys: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or any(k not in value for k in keys):
        raise ProtocolError(f"{sender} sent a malformed {tag} message")
    return value


def _names(value: Any, sender: str, limit: int = MAX_COLUMNS) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or len(value) > limit or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"{sender} sent column names that are not a list of at most {limit} strings")
    return tuple(value)


# ----------------------------------------------------------------------------------------------- roles


def _backend(options: ExploreOptions, public_key: PaillierPublicKey, private_key: Any = None) -> Any:
    extra = {"workers": options.workers} if options.backend == "fast" else {}
    return create_backend(options.backend, public_key, private_key, **extra)


def local_findings(inp: ExploreInput, options: ExploreOptions, binned: BinnedTable | None = None) -> PartyFindings:
    """A party's own columns explored in the clear (the active party's; the reference of every statistic)."""
    binned = binned or bin_table(inp.frame, inp.kinds, options.max_bins)
    found = PartyFindings(inp.name, binned.names, tuple(c.kind for c in binned.columns),
                          bins=[{**c.as_dict(), "labels": c.labels()} for c in binned.columns],
                          counts=binned.counts(), stats=table_stats(inp.frame, inp.kinds))
    if inp.events is not None:
        from securevfl.exploration.woe import plain_woe_counts

        events, non_events = plain_woe_counts(binned.bins, inp.events, binned.columns[0].width if binned.columns else 1)
        found.woe = [woe_iv(events[j], non_events[j], options.adjustment) for j in range(len(binned.columns))]
    return found


def active_role(inp: ExploreInput, options: ExploreOptions, held: Mapping[str, np.ndarray] | None = None) -> Any:
    """The active party: its own columns in the clear, each passive party's under its key; returns :class:`Findings`.

    ``held`` (rows some passive party does not hold: a covering alignment): per passive party, which of
    the active party's explored rows it holds; that party explores those rows only (no Pearson then).
    """
    if held and options.correlation:
        raise ConfigError("exploring rows that some passive party does not hold computes no Pearson correlation: "
                          "pass correlation=False")

    def role(ctx: PartyContext) -> Findings:
        passives = ctx.passives
        timing: dict[str, float] = {}
        rows = len(inp.frame)
        mine: dict[str, list[int] | None] = {p: (np.flatnonzero(held[p]).tolist() if held and p in held else None)
                                             for p in passives}
        count = {p: rows if (m := mine[p]) is None else len(m) for p in passives}
        ctx.stage = "own columns"
        with ctx.meter.compute():
            own = local_findings(inp, options)
        findings = Findings(ctx.name, rows, None if inp.events is None else int(inp.events.sum()), {ctx.name: own},
                            key_bits=options.key_bits)
        if not passives:
            return findings
        ctx.stage = "key generation"
        started = time.perf_counter()
        with ctx.meter.crypto("paillier.keygen"):
            public_key, private_key = generate_keypair(options.key_bits,
                                                       insecure_allow_small_key=options.insecure_allow_small_key)
        timing["keygen_s"] = time.perf_counter() - started
        backend = _backend(options, public_key, private_key)
        n = public_key.n
        width = ciphertext_bytes(n)
        names, z = standardized(inp.frame, inp.kinds) if options.correlation else ((), np.zeros((rows, 0)))
        slots = slots_per_plaintext(public_key.bits, rows)
        chunks = -(-len(names) // slots) if names else 0
        for party in passives:
            ctx.send(party, KEY, {"public_key": public_key.to_bytes(), "rows": count[party],
                                  "woe": inp.events is not None, "max_bins": options.max_bins, "pearson": chunks > 0,
                                  "select": options.select is not None})
        try:
            if inp.events is not None:
                ctx.stage = "encrypting labels"
                started = time.perf_counter()
                with ctx.meter.crypto("paillier.encrypt"):
                    cts = backend.encrypt_raw([int(v) for v in inp.events.tolist()])
                timing["encrypt_labels_s"] = time.perf_counter() - started
                with ctx.meter.serialize():
                    wire = to_wire(cts, width)
                    wires = {p: wire if (m := mine[p]) is None else to_wire([cts[i] for i in m], width)
                             for p in passives}  # each passive party the labels of the rows it holds
                for party in passives:
                    ctx.send(party, LABELS, wires[party])
            packed_wire: list[bytes] = []
            if chunks:
                ctx.stage = "encrypting columns"
                started = time.perf_counter()
                bits = slot_bits(rows)
                encoded = fixed_point(z)
                with ctx.meter.crypto("paillier.encrypt"):
                    for c in range(chunks):
                        plain = pack_slots(encoded[:, c * slots : (c + 1) * slots], bits, n)
                        packed_wire.append(to_wire(backend.encrypt_raw(plain), width))
                timing["encrypt_columns_s"] = time.perf_counter() - started
                ctx.broadcast(passives, PEARSON_COLUMNS, {"columns": len(names), "slots": slots, "slot_bits": bits,
                                                          "fraction_bits": FRACTION_BITS, "ciphertexts": packed_wire})
            timing["decrypt_s"] = 0.0
            for party in passives:
                ctx.stage = f"{party}'s sums"
                found = _receive_woe(ctx, party, backend, inp.events is not None, count[party], options, timing)
                findings.parties[party] = found
                if chunks:
                    findings.correlation[party] = _receive_pearson(ctx, party, backend, names, z, chunks, slots,
                                                                   rows, timing)
        finally:
            backend.close()
        findings.timing = timing
        if options.select is not None:  # each party is told which of its columns pass, by position only
            rules = parse_select(options.select)
            for party, found in findings.parties.items():
                findings.kept[party] = keep_mask(rules, [t.iv for t in found.woe] if found.woe
                                                 else [None] * len(found.columns))
                if party != ctx.name:
                    ctx.send(party, SELECT, np.array(findings.kept[party], dtype=bool))
        return findings

    return role


def _receive_woe(ctx: PartyContext, party: str, backend: Any, woe: bool, rows: int, options: ExploreOptions,
                 timing: dict[str, float]) -> PartyFindings:
    message = _message(ctx.recv(party, WOE_SUMS), party, WOE_SUMS, ("columns", "counts", "shared"))
    columns = _names(message["columns"], party)
    width = options.max_bins + 1
    counts = message["counts"]
    if not isinstance(counts, np.ndarray) or counts.dtype != np.int64 or counts.shape != (len(columns), width):
        got = counts.shape if isinstance(counts, np.ndarray) else type(counts).__name__
        raise ProtocolError(f"{party} sent bin counts of shape {got}; {(len(columns), width)} int64 were expected")
    epsilon = message.get("epsilon")
    if epsilon is None and ((counts < 0).any() or (counts.sum(axis=1) != rows).any()):
        raise ProtocolError(f"{party} sent bin counts that do not add up to the {rows} rows explored")
    shared = bool(message["shared"])
    found = PartyFindings(party, columns, shared=shared, epsilon=epsilon, counts=counts)
    if shared:
        kinds = _names(message.get("kinds", []), party)
        bins = message.get("bins", [])
        if len(kinds) != len(columns) or not isinstance(bins, list) or len(bins) != len(columns):
            raise ProtocolError(f"{party} sent {len(kinds)} kinds and bins for {len(columns)} columns")
        found.kinds, found.bins = kinds, bins
        found.stats = message.get("stats") if isinstance(message.get("stats"), dict) else None
    if not woe:
        return found
    slots = message.get("mask")
    if not isinstance(slots, np.ndarray) or slots.dtype != np.bool_ or slots.shape != counts.shape:
        raise ProtocolError(f"{party} sent no mask of its bins of shape {counts.shape}")
    if epsilon is None and (slots != (counts != 0)).any():
        raise ProtocolError(f"{party} sent sums for bins without rows, or none for bins with rows")
    n = backend.public_key.n
    filled = int(slots.sum())
    packed = message.get("packed")
    layout = count_layout(backend.public_key.bits, rows)
    if packed is not None and (epsilon is not None or packed != {"per": layout[0], "bits": layout[1]}):
        raise ProtocolError(f"{party} packed its per-bin sums as {packed!r}; {layout} was agreed for exact counts")
    expected = -(-filled // layout[0]) if packed is not None else filled
    received = from_wire(message.get("sums"), ciphertext_bytes(n), expected, party, "per-bin sums")
    started = time.perf_counter()
    with ctx.meter.crypto("paillier.decrypt"):
        plain = backend.decrypt_raw(received)
    timing["decrypt_s"] += time.perf_counter() - started
    events = np.zeros(counts.shape, dtype=np.float64)
    if packed is not None:
        per, bits = layout
        digits: list[int] = []
        for value in plain:
            for _ in range(min(per, filled - len(digits))):
                digits.append(value & ((1 << bits) - 1))
                value >>= bits
            if value:
                raise ProtocolError(f"{party} sent packed per-bin sums with more than {per} counts per ciphertext")
        events[slots] = digits
        if (events > counts).any():
            raise ProtocolError(f"{party} sent per-bin sums above its bins' row counts")
    else:
        events[slots] = [v - n if v > n // 2 else v for v in plain]
    with ctx.meter.compute():
        if epsilon is not None:  # post-processing of noised counts: no negative count
            counts = np.clip(counts, 0, None)
            found.counts = counts
            events = np.clip(events, 0, None)
            non_events = np.clip(counts - events, 0, None)
        else:
            non_events = counts - events
        found.woe = [woe_iv(events[j], non_events[j], options.adjustment) for j in range(len(columns))]
    return found


def _receive_pearson(ctx: PartyContext, party: str, backend: Any, names: tuple[str, ...], z: np.ndarray,
                     chunks: int, slots: int, rows: int, timing: dict[str, float]
                     ) -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    message = _message(ctx.recv(party, PEARSON_SUMS), party, PEARSON_SUMS, ("columns", "sums"))
    theirs = _names(message["columns"], party)
    blobs = message["sums"]
    if not isinstance(blobs, list) or len(blobs) != chunks:
        raise ProtocolError(f"{party} sent {len(blobs) if isinstance(blobs, list) else '?'} Pearson parts; "
                            f"{chunks} were expected")
    n = backend.public_key.n
    width = ciphertext_bytes(n)
    cts = [c for blob in blobs for c in from_wire(blob, width, len(theirs), party, "Pearson sums")]
    started = time.perf_counter()
    with ctx.meter.crypto("paillier.decrypt"):
        plain = backend.decrypt_raw(cts) if cts else []
    timing["decrypt_s"] += time.perf_counter() - started
    bits = slot_bits(rows)
    scale = float(1 << (2 * FRACTION_BITS)) * rows
    matrix = np.zeros((len(names), len(theirs)))
    for c in range(chunks):
        count = min(slots, len(names) - c * slots)
        for j in range(len(theirs)):
            sums = unpack_slots(plain[c * len(theirs) + j], count, bits, n)
            matrix[c * slots : c * slots + count, j] = np.array(sums, dtype=np.float64) / scale
    return names, theirs, np.clip(matrix, -1.0, 1.0)


@dataclass
class PassiveSummary:
    """What a passive party keeps of exploring: its own columns' statistics and bins (never sent unless shared)."""

    name: str
    stats: dict[str, dict[str, Any]]
    bins: list[dict[str, Any]]
    shared: bool
    #: with a selection rule: the names of its own columns that training keeps (what the active party told it)
    kept: tuple[str, ...] | None = None


def anonymous_names(party: str, count: int) -> tuple[str, ...]:
    """The names a party that shares nothing gives its columns: ``<party>#1``, ``<party>#2`` and so on."""
    return tuple(f"{party}#{k + 1}" for k in range(count))


def passive_role(inp: ExploreInput, options: ExploreOptions) -> Any:
    """A passive party: bins its columns, sums the encrypted labels per bin, the Pearson products; its summary."""

    def role(ctx: PartyContext) -> PassiveSummary:
        active = ctx.active
        rows = len(inp.frame)
        key = _message(ctx.recv(active, KEY), active, KEY, ("public_key", "rows", "woe", "max_bins", "pearson",
                                                            "select"))
        if key["rows"] != rows:
            raise ProtocolError(f"{active} announced {key['rows']!r} rows; {ctx.name} explores {rows}")
        max_bins = key["max_bins"]  # the active party's choice, within the binning's range
        if not isinstance(max_bins, int) or isinstance(max_bins, bool) or not 2 <= max_bins <= MAX_BINS_LIMIT:
            raise ProtocolError(f"{active} asked for {max_bins!r} bins per column; 2 to {MAX_BINS_LIMIT} are allowed")
        raw = key["public_key"]
        if not isinstance(raw, bytes) or len(raw) > MAX_KEY_BYTES:
            raise ProtocolError(f"{active} sent no public key (or one of more than {MAX_KEY_BYTES} bytes)")
        public_key = PaillierPublicKey.from_bytes(raw)
        try:
            check_backend_and_key(options.backend, public_key.bits, options.insecure_allow_small_key)
        except ConfigError as exc:
            raise ProtocolError(f"{active} sent a {public_key.bits}-bit key: {exc}") from None
        ctx.stage = "own columns"
        with ctx.meter.compute():
            binned = bin_table(inp.frame, inp.kinds, max_bins)
            stats = table_stats(inp.frame, inp.kinds)
        shared = options.share_stats == "summary"
        summary = PassiveSummary(ctx.name, stats, [{**c.as_dict(), "labels": c.labels()} for c in binned.columns],
                                 shared)
        backend = _backend(options, public_key)
        n = public_key.n
        width = ciphertext_bytes(n)
        names = binned.names if shared else anonymous_names(ctx.name, len(binned.columns))
        counts = binned.counts()
        message: dict[str, Any] = {"columns": list(names), "shared": shared, "epsilon": options.epsilon}
        if shared:
            message.update(kinds=[c.kind for c in binned.columns], stats=stats, bins=summary.bins)
        hist = EncryptedHistogrammer(n, workers=options.workers)
        try:
            if key["woe"]:
                ctx.stage = "per-bin sums"
                hist.start()  # the workers boot while the active party encrypts the labels
                labels = from_wire(ctx.recv(active, LABELS), width, rows, active, "encrypted labels")
                bins = binned.bins
                bin_width = max_bins + 1
                with ctx.meter.crypto("paillier.histogram"):
                    flat = hist.column_histograms(labels, bins, bin_width) if bins.shape[1] else []
                if options.epsilon is not None:  # every bin the column can have, empty or not
                    mask = binned.possible()
                    noise_events = geometric_noise(counts.shape, options.epsilon) * mask
                    noise_rest = geometric_noise(counts.shape, options.epsilon) * mask
                    picked = np.flatnonzero(mask.ravel()).tolist()
                    with ctx.meter.crypto("paillier.encrypt"):
                        noise = backend.encrypt_raw([int(noise_events.flat[k]) % n for k in picked])
                    nsq = n * n
                    chosen = [e if flat[k] is None else flat[k] * e % nsq for k, e in zip(picked, noise, strict=True)]
                    counts = counts + noise_events + noise_rest
                else:
                    mask = counts != 0
                    chosen = [flat[k] for k in np.flatnonzero(mask.ravel()).tolist()]
                    per, bits = count_layout(public_key.bits, rows)  # exact counts: many per ciphertext
                    with ctx.meter.crypto("paillier.pack"):
                        chosen = hist.compress(chosen, per, bits) if chosen else []
                    message["packed"] = {"per": per, "bits": bits}
                hist.close()
                message["mask"] = np.ascontiguousarray(mask, dtype=bool)
                with ctx.meter.crypto("paillier.rerandomize"):
                    chosen = backend.rerandomize_raw(chosen) if chosen else []
                with ctx.meter.serialize():
                    message["sums"] = to_wire(chosen, width)
            message["counts"] = np.ascontiguousarray(counts, dtype=np.int64)
            ctx.send(active, WOE_SUMS, message)
            if key["pearson"]:
                ctx.stage = "Pearson products"
                _pearson_products(ctx, inp, backend, rows, width, shared)
        finally:
            hist.close()
            backend.close()
        if key["select"]:
            mask = ctx.recv(active, SELECT)
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (len(binned.columns),):
                raise ProtocolError(f"{active} sent a selection that is not one flag per column of {ctx.name}")
            summary.kept = tuple(c for c, keep in zip(binned.names, mask.tolist(), strict=True) if keep)
        return summary

    return role


def _pearson_products(ctx: PartyContext, inp: ExploreInput, backend: Any, rows: int, width: int,
                      shared: bool) -> None:
    active = ctx.active
    message = _message(ctx.recv(active, PEARSON_COLUMNS), active, PEARSON_COLUMNS,
                       ("columns", "slots", "slot_bits", "fraction_bits", "ciphertexts"))
    n_bits = backend.public_key.bits
    count, slots, bits = message["columns"], message["slots"], message["slot_bits"]
    if not (isinstance(count, int) and isinstance(slots, int) and 1 <= count <= MAX_COLUMNS and 1 <= slots
            and slots == slots_per_plaintext(n_bits, rows) and bits == slot_bits(rows)
            and message["fraction_bits"] == FRACTION_BITS):
        raise ProtocolError(f"{active} sent a Pearson layout that was not agreed ({count!r} columns, {slots!r} slots "
                            f"of {bits!r} bits)")
    chunks = -(-count // slots)
    blobs = message["ciphertexts"]
    if not isinstance(blobs, list) or len(blobs) != chunks:
        raise ProtocolError(f"{active} sent {len(blobs) if isinstance(blobs, list) else '?'} Pearson parts; "
                            f"{chunks} were expected")
    names, z = standardized(inp.frame, inp.kinds)
    coeffs = fixed_point(z).T.tolist()  # one row of row-coefficients per own column
    sums: list[bytes] = []
    for blob in blobs:
        cts = from_wire(blob, width, rows, active, "encrypted columns")
        with ctx.meter.crypto("paillier.linear_combine"):
            out = backend.linear_combine_raw(cts, coeffs) if coeffs else []
        with ctx.meter.crypto("paillier.rerandomize"):
            out = backend.rerandomize_raw(out) if out else []
        sums.append(to_wire(out, width))
    anonymous = anonymous_names(ctx.name, len(inp.frame.columns))
    shown = names if shared else tuple(anonymous[k] for k in _positions(inp, names))
    ctx.send(active, PEARSON_SUMS, {"columns": list(shown), "sums": sums})


def _positions(inp: ExploreInput, names: tuple[str, ...]) -> list[int]:
    """Each numeric column's place among the party's columns (its anonymous name's number)."""
    order = [str(c) for c in inp.frame.columns]
    return [order.index(name) for name in names]


__all__ = ["KEY", "LABELS", "PEARSON_COLUMNS", "PEARSON_SUMS", "WOE_SUMS", "ExploreInput", "ExploreOptions",
           "Findings", "PartyFindings", "PassiveSummary", "active_role", "anonymous_names", "fixed_point",
           "local_findings", "pack_slots", "passive_role", "slot_bits", "slots_per_plaintext", "standardized",
           "unpack_slots"]
