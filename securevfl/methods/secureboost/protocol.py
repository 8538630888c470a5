"""SecureBoost's training protocol, and the active party's role (the passive party's: :mod:`.passive`).

Per tree (one per class per round for multi-class), with n walked rows = the training rows (those
that fit, and early stopping's validation rows) followed by the test rows:

1. **gradients** (active → passive): the active party computes g and h on the rows the tree fits,
   turns them into fixed-point integers, packs (g, h) into one plaintext per row
   (:mod:`.codec`), encrypts, and sends the ciphertexts with the rows they belong to;
2. per level, **assign** (active → passive): every walked row's node (the instance space of each
   node: SecureBoost's known leakage) and the nodes whose histograms are wanted — with subtraction
   only the smaller child of each split, its sibling being the parent minus it;
3. **histograms** (passive → active): each passive party bins its own columns (:mod:`.binning`),
   multiplies the ciphertexts of each node's rows into bins (:mod:`.histogram`), forms the left-side
   sum of every split candidate (prefix sums over bins; with missing values left and right), permutes
   the candidates with a fresh secret permutation per tree, packs many candidate sums per ciphertext
   and re-randomises them;
4. the active party decrypts, subtracts for siblings, and finds each node's best split over every
   party's candidates (XGBoost's gain); **split** (active → passive): "node j: your candidate k";
5. **left rows** (passive → active): the owner alone maps k to its feature and threshold, keeps them in
   its lookup table under a record id, and returns the record id and which of the node's rows go left.

The active party keeps the trees (children, owner and record per node, leaf weights) and its own
lookup table; each passive party its lookup table (:mod:`.tree`). ``encrypt=false`` runs exactly
this protocol on the fixed-point integers in the clear, so both modes build identical trees.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from psi.executors import ExecutorConfig
from securevfl.data.scenario import PartyData
from securevfl.errors import DataError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import ActiveOutcome, TrainConfig
from securevfl.methods.engine.kept import Keep, KeptRole, kept_side
from securevfl.methods.engine.loop import split_rows_by_id
from securevfl.methods.engine.stopping import PhaseStopper
from securevfl.methods.secureboost.binning import fit_bins
from securevfl.methods.secureboost.codec import (
    DigitLayout,
    digit_bound,
    frac_bits_for,
    node_slot_bits,
    pack_pairs,
    slots_per_ciphertext,
    to_fixed,
    unpack_pairs,
)
from securevfl.methods.secureboost.histogram import (
    Candidate,
    candidates_of,
    plain_candidate_sums,
    plain_histograms,
)
from securevfl.methods.secureboost.objective import GRADIENT_BOUND, BoostObjective
from securevfl.methods.secureboost.options import SecureBoostOptions
from securevfl.methods.secureboost.tree import SPLITS, TREES, SplitRecorder, TreeBuilder
from securevfl.privacy.paillier import (
    PaillierBackend,
    PaillierPrivateKey,
    PaillierPublicKey,
    create_backend,
    generate_keypair,
)
from securevfl.privacy.paillier.fast_backend import FastBackend
from securevfl.privacy.paillier.wire import ciphertext_bytes, from_wire, to_wire
from securevfl.seeding import simulation_rng

KeyPair = tuple[PaillierPublicKey, PaillierPrivateKey]

PUBLIC_KEY = "secureboost.setup.public_key"
TREE = "secureboost.tree.gradients"
ASSIGN = "secureboost.level.assign"
HISTOGRAMS = "secureboost.level.histograms"
SPLIT = "secureboost.level.split"
LEFT_ROWS = "secureboost.level.left_rows"
STATS = "secureboost.end.stats"


# -- shared helpers -------------------------------------------------------------------------------------------------

def rows_by_node(node_of: np.ndarray, nodes: Sequence[int]) -> list[np.ndarray]:
    """The positions holding each of ``nodes`` in ``node_of`` (ascending)."""
    order = np.argsort(node_of, kind="stable")
    ordered = node_of[order]
    out = []
    for k in nodes:
        lo, hi = np.searchsorted(ordered, k, "left"), np.searchsorted(ordered, k, "right")
        out.append(np.sort(order[lo:hi]))
    return out


def goes_left(bins: np.ndarray, feature: int, bin_index: int, missing_left: bool, missing_bin: int) -> np.ndarray:
    """Whether rows with these bins go left at "bin <= bin_index" (missing values to ``missing_left``)."""
    column = bins[:, feature].astype(np.int64)
    missing = column == missing_bin
    return np.where(missing, missing_left, column <= bin_index)


def executor_config(options: SecureBoostOptions) -> ExecutorConfig | None:
    """The executor the options ask for: None for work in the party's own process."""
    if options.executor == "ray":
        return ExecutorConfig("ray", workers=options.workers if options.workers > 1 else None,
                              ray_address=options.ray_address or None)
    return ExecutorConfig("process", workers=options.workers) if options.workers > 1 else None


def backend_options(options: SecureBoostOptions) -> dict[str, Any]:
    """The ``fast`` backend's worker settings (``phe`` has none): the same executor as the histograms."""
    if options.backend != "fast":
        return {}
    config = executor_config(options)
    return {"workers": options.workers} if config is None else {"workers": options.workers, "executor": config}


def _walk_rows(data: PartyData) -> np.ndarray:
    return np.concatenate([np.asarray(data.X_train, dtype=np.float64), np.asarray(data.X_test, dtype=np.float64)])


def _has_missing(X: np.ndarray) -> list[bool]:
    return [bool(v) for v in np.isnan(X).any(axis=0)] if len(X) else [False] * X.shape[1]


def _feature_subset(n_features: int, fraction: float, seed: int, party: str, tree: int) -> np.ndarray:
    """The features a party uses for ``tree`` (its own choice, seeded: all of them at ``colsample`` 1)."""
    if fraction >= 1 or n_features == 0:
        return np.arange(n_features)
    keep = max(1, int(round(fraction * n_features)))
    return np.sort(simulation_rng(seed, "secureboost.colsample", party, tree).choice(n_features, keep, replace=False))


# -- the active party -----------------------------------------------------------------------------------------------

@dataclass
class _Node:
    """A node the active party is growing: its row sets, exact sums and candidate sums per party."""

    node: int  # index in the forest
    depth: int
    sample: np.ndarray  # positions (into the tree's fitted rows) of its rows
    total: np.ndarray  # exact (G, H) in fixed point
    candidates: dict[int, np.ndarray] = field(default_factory=dict)  # party index -> (count, 2) left sums
    absent: dict[int, np.ndarray] = field(default_factory=dict)  # party index -> (G, H) of its rows it does not hold


@dataclass
class _Timing:
    encrypt: float = 0.0
    decrypt: float = 0.0
    split_finding: float = 0.0
    waiting: float = 0.0  # for the passive parties' histograms and left rows (their compute and the network)
    precompute: float = 0.0  # random factors computed in the background while waiting (not on the path)

    def as_dict(self) -> dict[str, float]:
        return {"encrypt": self.encrypt, "decrypt": self.decrypt, "split_finding": self.split_finding,
                "histogram_and_network": self.waiting, "precompute_in_background": self.precompute}


class RandomnessAhead:
    """Paillier random factors for the next tree, computed on a background thread while the party waits.

    The thread only hands work to the backend's worker processes and waits for them (the interpreter
    lock is free meanwhile), so the party goes on; :meth:`take` joins it. Each factor is used once.
    """

    def __init__(self, backend: Any, timing: _Timing) -> None:
        self.backend = backend
        self.timing = timing
        self._thread: threading.Thread | None = None
        self._ready: list[Any] = []
        self._error: BaseException | None = None

    def start(self, count: int) -> None:
        """Begin computing ``count`` factors (after any still under way)."""
        self.join()

        def work() -> None:
            started = time.perf_counter()
            try:
                self._ready.extend(self.backend.precompute_randomness(count))
            except BaseException as exc:  # re-raised by join() in the party's own thread
                self._error = exc
            self.timing.precompute += time.perf_counter() - started

        self._thread = threading.Thread(target=work, name="secureboost-precompute", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def take(self, count: int) -> list[Any]:
        """``count`` factors: those precomputed, and the rest computed now."""
        self.join()
        if len(self._ready) < count:
            self._ready.extend(self.backend.precompute_randomness(count - len(self._ready)))
        taken, self._ready = self._ready[:count], self._ready[count:]
        return taken


class ActiveTrainer:
    """The active party's side of training: gradients, split finding over every party, the trees."""

    def __init__(self, ctx: PartyContext, data: PartyData, config: TrainConfig, options: SecureBoostOptions,
                 passives: tuple[str, ...], candidate_limits: dict[str, int], keypair: KeyPair | None) -> None:
        if data.y_train is None or data.y_test is None:
            raise DataError("the active party of secureboost must hold the labels")
        self.ctx, self.data, self.config, self.options = ctx, data, config, options
        self.passives = passives
        self.limits = candidate_limits
        self.keypair = keypair
        self.objective = BoostObjective.for_task(data.task, data.n_classes)
        self.y = np.asarray(data.y_train)
        self.n_train = len(data.X_train)
        X_walk = _walk_rows(data)
        self.n_walk = len(X_walk)
        self.fit_rows, self.val_rows = split_rows_by_id(data.ids_train, config)  # PSI's order changes nothing
        #: per passive party that does not hold every row (partial coverage): which walked rows it holds
        self.held: dict[str, np.ndarray] = {}
        train_masks = data.peer_masks("train", np.arange(self.n_train))
        test_masks = data.peer_masks("test", np.arange(self.n_walk - self.n_train))
        if train_masks is not None and test_masks is not None:
            for party in passives:
                if party in train_masks:
                    mask = np.concatenate([train_masks[party], test_masks[party]]).astype(bool)
                    if not mask.all():
                        self.held[party] = mask
        #: a held walked row's index among the party's own walked rows (its training rows, then its test rows)
        self.walk_of = {p: np.cumsum(mask) - 1 for p, mask in self.held.items()}
        self.bins = fit_bins(np.asarray(data.X_train, dtype=np.float64), options.max_bins)
        self.walk_bins = self.bins.transform(X_walk)
        n_bins = [len(c) + 1 for c in self.bins.cuts]
        self.all_candidates = candidates_of(n_bins, _has_missing(np.asarray(data.X_train, dtype=np.float64)))
        self.forest = TreeBuilder()
        self.recorder = SplitRecorder()
        self.backend: PaillierBackend | None = None
        self.n_bits = 0
        self.timing = _Timing()
        self.counts = {"encryptions": 0, "decryptions": 0, "trees": 0}
        self.owners = {name: 0 for name in (ctx.name, *passives)}
        self._scale = 1.0  # 2^frac_bits of the tree being grown
        self.ahead: RandomnessAhead | None = None

    # -- set-up --------------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        ctx, options = self.ctx, self.options
        if not options.encrypt:
            ctx.broadcast(self.passives, PUBLIC_KEY, None)
            return
        ctx.stage = "key generation"
        with ctx.meter.crypto("paillier.keygen"):
            public_key, private_key = self.keypair or generate_keypair(
                options.key_bits, insecure_allow_small_key=options.insecure_allow_small_key)
        self.backend = create_backend(options.backend, public_key, private_key, **backend_options(options))
        self.n_bits = public_key.bits
        if options.precompute and isinstance(self.backend, FastBackend):
            self.ahead = RandomnessAhead(self.backend, self.timing)
        ctx.broadcast(self.passives, PUBLIC_KEY, public_key.to_bytes())

    # -- training ------------------------------------------------------------------------------------------------------
    def train(self) -> tuple[np.ndarray, list[dict[str, float]], int]:
        """Every round; the walked rows' margins, the history, and the number of trees kept."""
        objective, options, config = self.objective, self.options, self.config
        base = objective.base_margin(self.y[self.fit_rows])
        margin = np.tile(base, (self.n_walk, 1))
        history: list[dict[str, float]] = []
        # the engine's early stopping of one phase (a round is an epoch); an improvement is more than 1e-12 at least
        stopper = PhaseStopper(config.early_stopping, max(config.min_improvement, 1e-12)) if len(self.val_rows) \
            else None
        best_margin = margin.copy()
        stop = False
        per_round = objective.trees_per_round
        rounds = 0
        for rnd in range(options.trees):
            started = time.perf_counter()
            g_all, h_all = objective.gradients(self.y[self.fit_rows], margin[self.fit_rows])
            for k in range(per_round):
                tree = rnd * per_round + k
                self.ctx.stage = f"round {rnd + 1}, tree {tree + 1}"
                leaf_of_row, values = self._grow(tree, k, g_all[:, k], h_all[:, k],
                                                 involve=not (options.first_tree_active_only and rnd == 0))
                margin[:, k] += values[leaf_of_row]
            rounds = rnd + 1
            record: dict[str, float] = {"epoch": float(rounds), "seconds": time.perf_counter() - started,
                                        "train_loss": objective.loss(self.y[self.fit_rows], margin[self.fit_rows])}
            if stopper is not None:
                loss = objective.loss(self.y[self.val_rows], margin[self.val_rows])
                record["val_loss"] = loss
                improved, stop = stopper.update(loss, rounds)
                if improved:
                    best_margin = margin.copy()
            history.append(record)
            self.ctx.progress(epoch=rounds, epochs=options.trees, loss=record["train_loss"], unit="trees")
            if stop:
                break
        kept_rounds = rounds if stopper is None else stopper.best_epoch or 0
        if stopper is not None:
            margin = best_margin
        kept_trees = kept_rounds * per_round
        self.forest.truncate(kept_trees)
        self.ctx.broadcast(self.passives, TREE, {"done": True, "trees": kept_trees})
        return margin, history, kept_trees

    def _sample(self, tree: int) -> np.ndarray:
        """Positions (into the fitted rows) this tree fits: all of them, or a seeded ``subsample``."""
        n = len(self.fit_rows)
        if self.options.subsample >= 1:
            return np.arange(n)
        keep = max(2, int(round(self.options.subsample * n)))
        return np.sort(simulation_rng(self.config.seed, "secureboost.subsample", tree).choice(n, keep, replace=False))

    def _layout(self, g: np.ndarray, rows: int) -> tuple[int, DigitLayout]:
        """Fixed-point bits and the digit layout of one tree (from public bounds; regression: max |g|)."""
        bound = GRADIENT_BOUND if not self.objective.regression else 2.0 ** math.ceil(
            math.log2(max(float(np.max(np.abs(g))) if len(g) else 1.0, 1e-6)))
        bound = max(bound, 1.0)  # h <= 1 for every objective here
        frac = frac_bits_for(rows, bound, self.options.frac_bits)
        n_bits = self.n_bits or 2048
        return frac, DigitLayout.fitting(digit_bound(rows, bound, frac), n_bits)

    def _grow(self, tree: int, output: int, g_fit: np.ndarray, h_fit: np.ndarray,
              involve: bool) -> tuple[np.ndarray, np.ndarray]:
        """Grow one tree; each walked row's leaf (forest index) and the forest's leaf values."""
        ctx, options = self.ctx, self.options
        sample = self._sample(tree)
        rows = self.fit_rows[sample]  # walked-row positions of the fitted rows
        g, h = g_fit[sample], h_fit[sample]
        frac, layout = self._layout(g, len(rows))
        self._scale = float(2**frac)
        gh = np.column_stack([to_fixed(g, frac), to_fixed(h, frac)])
        passives = self.passives if involve else ()
        if involve and passives:
            self._send_gradients(tree, rows, gh, layout, frac)
        elif self.passives:  # the first tree of first_tree_active_only: the passive parties only count it
            ctx.broadcast(self.passives, TREE, {"tree": tree, "skip": True})
        own_features = set(_feature_subset(self.bins.n_features, options.colsample, self.config.seed, ctx.name,
                                           tree).tolist())
        own_candidates = [c for c in self.all_candidates if c[0] in own_features]
        sample_bins = self.walk_bins[rows]
        root = self.forest.start_tree(output)
        node_of = np.full(self.n_walk, root, dtype=np.int64)
        sample_node = np.full(len(rows), root, dtype=np.int64)
        # per passive party index that does not hold every fitted row: which of them it holds
        held_fit = {i: self.held[p][rows] for i, p in enumerate(self.passives, start=1)
                    if p in passives and p in self.held}
        nodes = {root: self._node(root, 0, np.arange(len(rows)), gh, held_fit)}
        frontier = [root] if self._splittable(nodes[root]) else []
        compute = list(frontier)
        derive: dict[int, tuple[int, int]] = {}  # node -> (parent, computed sibling)
        tree_stage, level = ctx.stage, 0
        while frontier:
            ctx.stage = f"{tree_stage}, level {level}"  # where a failure or a timeout says it was
            level += 1
            for peer in passives:
                # node ids relative to the tree's root: nothing on the wire counts the nodes of earlier trees;
                # a party that does not hold every row is told the nodes of its own rows only
                own = node_of if peer not in self.held else node_of[self.held[peer]]
                ctx.send(peer, ASSIGN, {"node_of": (own - root).astype(np.int32),
                                         "compute": np.array(compute, dtype=np.int32) - root})
            self._candidate_sums(nodes, compute, gh, sample_bins, own_candidates, passives, layout, held_fit)
            for node, (parent, sibling) in derive.items():
                for party, sums in nodes[sibling].candidates.items():
                    nodes[node].candidates[party] = nodes[parent].candidates[party] - sums
            decisions = self._best_splits([nodes[k] for k in frontier], frac)
            split_rows = dict(zip(decisions, rows_by_node(node_of, list(decisions)), strict=True))  # one sort a level
            lefts = self._apply_splits(decisions, passives, split_rows, own_candidates, root)
            next_frontier, compute, derive = [], [], {}
            for node, (party, _, record, absent_left) in decisions.items():
                left_child, right_child = self.forest.split(node, party, record, absent_left)
                self.owners[(ctx.name, *self.passives)[party]] += 1
                mask_rows = split_rows[node]
                left_rows = mask_rows[lefts[node]]
                right_rows = mask_rows[~lefts[node]]
                node_of[left_rows], node_of[right_rows] = left_child, right_child
                parent_sample = nodes[node].sample
                in_left = lefts[node][np.searchsorted(mask_rows, rows[parent_sample])]
                children = []
                for child, members in ((left_child, parent_sample[in_left]), (right_child, parent_sample[~in_left])):
                    sample_node[members] = child
                    nodes[child] = self._node(child, nodes[node].depth + 1, members, gh, held_fit)
                    children.append(child)
                splittable = [c for c in children if self._splittable(nodes[c])]
                if not splittable:
                    continue
                next_frontier += splittable
                if options.subtraction:
                    small, large = sorted(children, key=lambda c: (len(nodes[c].sample), c))
                    compute.append(small)
                    if large in splittable:
                        derive[large] = (node, small)
                else:
                    compute += splittable
            needed = set(next_frontier) | {parent for parent, _ in derive.values()}
            for node in nodes:
                if node not in needed:
                    nodes[node].candidates.clear()  # histograms no longer needed
            frontier = next_frontier
        if passives:
            ctx.broadcast(passives, ASSIGN, {"end": True})
        # leaf weights from the exact float sums (the active party holds g and h)
        leaves = np.unique(node_of).tolist()
        for node, members in zip(leaves, rows_by_node(sample_node, leaves), strict=True):
            weight = -float(np.sum(g[members])) / (float(np.sum(h[members])) + options.l2) if len(members) else 0.0
            self.forest.value[node] = options.learning_rate * weight
        self.counts["trees"] += 1
        return node_of, np.asarray(self.forest.value)

    @staticmethod
    def _node(node: int, depth: int, sample: np.ndarray, gh: np.ndarray, held_fit: dict[int, np.ndarray]) -> _Node:
        """A node of ``sample``'s rows: its exact sums, and per party of ``held_fit`` those of its rows it lacks."""
        absent = {i: gh[sample[~mask[sample]]].sum(axis=0) for i, mask in held_fit.items()}
        return _Node(node, depth, sample, gh[sample].sum(axis=0), absent=absent)

    def _splittable(self, node: _Node) -> bool:
        """Whether a node may still split: above the depth limit, two rows, room for two children's hessian."""
        hessian = float(node.total[1]) / self._scale
        return (node.depth < self.options.max_depth and len(node.sample) >= 2
                and hessian >= 2 * self.options.min_child_weight)

    def _send_gradients(self, tree: int, rows: np.ndarray, gh: np.ndarray, layout: DigitLayout, frac: int) -> None:
        """Each passive party gets the gradients of the fitted rows it holds (every one, where it holds every row)."""
        ctx, options = self.ctx, self.options
        layout_info = {"tree": tree, "digit_bits": layout.digit_bits}
        # the rows some passive party holds (a row none holds is never encrypted), as positions into ``rows``
        wanted = np.ones(len(rows), dtype=bool)
        if self.held and all(p in self.held for p in self.passives):
            wanted = np.logical_or.reduce([self.held[p][rows] for p in self.passives])
        index = np.flatnonzero(wanted)
        parts: list[list[Any]] = []
        if self.backend is not None:
            n = self.backend.public_key.n
            started = time.perf_counter()
            with ctx.meter.crypto("paillier.encrypt"):
                chosen = gh[index]
                plaintexts = ([pack_pairs(chosen[:, 0], chosen[:, 1], layout.digit_bits, n)] if options.packing
                              else [[int(v) % n for v in chosen[:, c].tolist()] for c in (0, 1)])
                if self.ahead is not None and isinstance(self.backend, FastBackend):
                    parts = [self.backend.encrypt_with(p, self.ahead.take(len(p))) for p in plaintexts]
                else:
                    parts = [self.backend.encrypt_raw(p) for p in plaintexts]
            self.timing.encrypt += time.perf_counter() - started
            self.counts["encryptions"] += sum(len(p) for p in parts)
        slot = np.full(len(rows), -1, dtype=np.int64)
        slot[index] = np.arange(len(index))
        wire: bytes | list[bytes] | None = None  # the whole message, serialised once for parties holding every row
        for party in self.passives:
            mine = np.arange(len(rows)) if party not in self.held else np.flatnonzero(self.held[party][rows])
            own_rows = rows[mine] if party not in self.held else self.walk_of[party][rows[mine]]
            message: dict[str, Any] = {**layout_info, "rows": own_rows.astype(np.int32)}
            if self.backend is None:
                message["gradients"] = gh[mine]
            elif party not in self.held and wire is not None:
                message["gradients"] = wire
            else:
                width = ciphertext_bytes(self.backend.public_key.n)
                with ctx.meter.serialize():
                    picked = slot[mine].tolist()
                    message["gradients"] = [to_wire([p[i] for i in picked], width) for p in parts]
                if party not in self.held:
                    wire = message["gradients"]
            ctx.send(party, TREE, message)
        if self.ahead is not None and tree + 1 < self.options.trees * self.objective.trees_per_round:
            self.ahead.start(len(rows) * (1 if options.packing else 2))  # the next tree's factors, while waiting

    def _candidate_sums(self, nodes: dict[int, _Node], compute: list[int], gh: np.ndarray, sample_bins: np.ndarray,
                        own_candidates: list[Candidate], passives: Sequence[str], layout: DigitLayout,
                        held_fit: dict[int, np.ndarray]) -> None:
        """Fill ``candidates`` of the computed nodes: the active party's own in the clear, the passives' decrypted.

        ``held_fit``: per passive party index that does not hold every fitted row, which of them it holds.
        """
        if not compute:
            return
        ctx = self.ctx
        node_rows = [nodes[k].sample for k in compute]
        with ctx.meter.compute():
            width = self.options.max_bins + 1
            hist = plain_histograms(gh, sample_bins, width, node_rows)
            own = (plain_candidate_sums(hist, own_candidates, self.bins.missing_bin) if own_candidates
                   else np.zeros((len(compute), 0, 2), dtype=np.int64))
        for k, node in enumerate(compute):
            nodes[node].candidates[0] = own[k]
        for index, party in enumerate(self.passives, start=1):
            if party not in passives:
                continue
            started = time.perf_counter()
            message = ctx.recv(party, HISTOGRAMS)
            self.timing.waiting += time.perf_counter() - started
            held = held_fit.get(index)
            rows_of = ([len(nodes[k].sample) for k in compute] if held is None
                       else [int(held[nodes[k].sample].sum()) for k in compute])
            sums = self._decode_histograms(party, message, rows_of, len(gh) if held is None else int(held.sum()),
                                           layout)
            for k, node in enumerate(compute):
                nodes[node].candidates[index] = sums[k]

    def _decode_histograms(self, party: str, message: Any, node_rows: list[int], tree_rows: int,
                           layout: DigitLayout) -> list[np.ndarray]:
        """The passive party's candidate sums per node, (count, 2) int64 each; a wrong shape is a ProtocolError.

        ``node_rows``: per computed node, the rows of it the party summed; ``tree_rows``: its rows of the tree
        (they size each node's compressed slots, :func:`node_slot_bits`).
        """
        options = self.options
        n_nodes = len(node_rows)
        if not isinstance(message, dict) or not isinstance(message.get("count"), int):
            raise ProtocolError(f"{party} sent a malformed {HISTOGRAMS} message")
        count = message["count"]
        if not 0 <= count <= self.limits[party]:
            raise ProtocolError(f"{party} sent {count} split candidates; its {self.limits[party]} at most were agreed")
        sums = message.get("sums")
        if self.backend is None:
            if not isinstance(sums, np.ndarray) or sums.shape != (n_nodes, count, 2) or sums.dtype != np.int64:
                got = sums.shape if isinstance(sums, np.ndarray) else type(sums).__name__
                raise ProtocolError(f"{party} sent histograms of shape {got}; {(n_nodes, count, 2)} were expected")
            return list(sums)
        if not isinstance(sums, list) or len(sums) != n_nodes:
            raise ProtocolError(f"{party} sent histograms for {len(sums) if isinstance(sums, list) else '?'} "
                                f"nodes; {n_nodes} were asked for")
        n = self.backend.public_key.n
        width = ciphertext_bytes(n)
        slots = [node_slot_bits(layout.digit_bits, tree_rows, rows) for rows in node_rows]
        per_ct = [slots_per_ciphertext(n.bit_length(), slot) if options.packing else 1 for slot in slots]
        per_node = [-(-count // per) if options.packing else count for per in per_ct]
        components = 1 if options.packing else 2
        received: list[list[list[int]]] = []  # per node, per component
        for blobs, expected in zip(sums, per_node, strict=True):
            if not isinstance(blobs, list) or len(blobs) != components:
                raise ProtocolError(f"{party} sent a histogram with {len(blobs) if isinstance(blobs, list) else '?'} "
                                    f"parts; {components} were expected")
            received.append([from_wire(b, width, expected, party, "a histogram") for b in blobs])
        started = time.perf_counter()
        with self.ctx.meter.crypto("paillier.decrypt"):
            everything = [c for node in received for part in node for c in part]
            residues = self.backend.decrypt_raw(everything)  # one call: large enough for the worker pool
            self.counts["decryptions"] += len(everything)
            out = []
            start = 0
            for k in range(len(received)):
                node_residues = residues[start : start + components * per_node[k]]
                start += components * per_node[k]
                if options.packing:
                    values = unpack_pairs(node_residues, per_ct[k], layout.digit_bits, slots[k], n)[:count]
                else:
                    half = n // 2
                    signed = [r - n if r > half else r for r in node_residues]
                    values = np.array(signed, dtype=np.int64).reshape(2, count).T
                out.append(np.ascontiguousarray(values, dtype=np.int64))
        self.timing.decrypt += time.perf_counter() - started
        return out

    def _best_splits(self, frontier: list[_Node], frac: int) -> dict[int, tuple[int, int, int, bool]]:
        """Per node with a split of positive gain: (party, candidate, -1 record until applied, absent rows left).

        The last: whether the rows the owner does not hold go left.
        For a passive party that does not hold some of the node's rows, each of its candidates is tried with
        those rows on either side (their sums ``node.absent``: XGBoost's sparsity-aware split finding, the
        missing side being the rows it does not hold); right first, so a node without such rows sends them
        right (XGBoost's default).
        """
        options = self.options
        scale = float(2**frac)
        lam, mcw = options.l2, options.min_child_weight
        out: dict[int, tuple[int, int, int, bool]] = {}
        started = time.perf_counter()
        with self.ctx.meter.compute():
            for node in frontier:
                G, H = node.total[0] / scale, node.total[1] / scale
                parent = G * G / (H + lam)
                best = (-math.inf, -1, -1)
                for party in sorted(node.candidates):
                    sums = node.candidates[party]
                    if not len(sums):
                        continue
                    if party in node.absent:  # the rows it does not hold right, then left
                        sums = np.concatenate([sums, sums + node.absent[party]])
                    gl, hl = sums[:, 0] / scale, sums[:, 1] / scale
                    gr, hr = G - gl, H - hl
                    gain = gl * gl / (hl + lam) + gr * gr / (hr + lam) - parent
                    gain = np.where((hl >= mcw) & (hr >= mcw), gain, -math.inf)
                    i = int(np.argmax(gain))
                    if gain[i] > best[0]:
                        best = (float(gain[i]), party, i)
                if best[1] >= 0 and best[0] > options.min_split_gain and best[0] > 1e-12 * max(1.0, abs(parent)):
                    count = len(node.candidates[best[1]])
                    out[node.node] = (best[1], best[2] % count, -1, best[2] >= count)
        self.timing.split_finding += time.perf_counter() - started
        return out

    def _apply_splits(self, decisions: dict[int, tuple[int, int, int, bool]], passives: Sequence[str],
                      split_rows: dict[int, np.ndarray], own_candidates: list[Candidate],
                      root: int) -> dict[int, np.ndarray]:
        """Tell each owner its splits; the rows going left of each split node (of ``split_rows[node]``, ascending).

        An owner answers for the rows it holds; the rows it does not hold go the way the active party decided.
        """
        ctx = self.ctx
        lefts: dict[int, np.ndarray] = {}
        for index, party in enumerate(self.passives, start=1):
            if party not in passives:
                continue
            mine = sorted(node for node, (p, _, _, _) in decisions.items() if p == index)
            ctx.send(party, SPLIT, {"nodes": np.array(mine, dtype=np.int64) - root,
                                    "candidates": np.array([decisions[k][1] for k in mine], dtype=np.int64)})
        for node, (owner, candidate, _, _) in decisions.items():
            if owner != 0:
                continue
            feature, bin_index, missing_left = own_candidates[candidate]
            record = self.recorder.add(feature, self.bins.threshold(feature, bin_index), missing_left,
                                       len(self.forest.roots) - 1)
            decisions[node] = (0, candidate, record, False)
            rows = split_rows[node]
            lefts[node] = goes_left(self.walk_bins[rows], feature, bin_index, missing_left, self.bins.missing_bin)
        for index, party in enumerate(self.passives, start=1):
            if party not in passives:
                continue
            mine = sorted(node for node, (p, _, _, _) in decisions.items() if p == index)
            started = time.perf_counter()
            reply = ctx.recv(party, LEFT_ROWS)
            self.timing.waiting += time.perf_counter() - started
            records, masks = (reply.get("records"), reply.get("left")) if isinstance(reply, dict) else (None, None)
            if (not isinstance(records, np.ndarray) or records.shape != (len(mine),) or not isinstance(masks, list)
                    or len(masks) != len(mine)):
                raise ProtocolError(f"{party} answered {len(mine)} splits with a malformed {LEFT_ROWS}")
            for node, record, mask in zip(mine, records.tolist(), masks, strict=True):
                rows = split_rows[node]
                absent_left = decisions[node][3]
                held = self.held[party][rows] if party in self.held else np.ones(len(rows), dtype=bool)
                count = int(held.sum())
                if not isinstance(mask, bytes) or len(mask) != -(-count // 8):
                    raise ProtocolError(f"{party} sent the left rows of a node of {count} rows malformed")
                left = np.full(len(rows), absent_left, dtype=bool)
                left[held] = np.unpackbits(np.frombuffer(mask, dtype=np.uint8), count=count).astype(bool)
                lefts[node] = left
                decisions[node] = (index, decisions[node][1], int(record), absent_left)
        return lefts

    def close(self) -> None:
        if self.ahead is not None:
            try:
                self.ahead.join()
            finally:
                self.ahead = None
        if self.backend is not None:
            self.backend.close()


def active_role(data: PartyData, config: TrainConfig, options: SecureBoostOptions, passives: tuple[str, ...],
                candidate_limits: dict[str, int], keypair: KeyPair | None = None) -> KeptRole:
    """The active party: labels, gradients, split finding, the trees and its own lookup table."""

    def role(ctx: PartyContext, keep: Keep) -> ActiveOutcome:
        trainer = ActiveTrainer(ctx, data, config, options, passives, candidate_limits, keypair)
        started = time.perf_counter()
        try:
            trainer.setup()
            margin, history, kept = trainer.train()
        finally:
            trainer.close()
        seconds = time.perf_counter() - started
        base = trainer.objective.base_margin(trainer.y[trainer.fit_rows])
        keep(kept_side({TREES: trainer.forest.module(base), SPLITS: trainer.recorder.module(kept)},
                       state={"objective": trainer.objective.kind, "parties": [ctx.name, *passives]}))
        peer_stats = {p: ctx.recv(p, STATS) for p in passives}
        test = margin[trainer.n_train:]
        built = trainer.counts["trees"]
        extra = {"secureboost": {
            "encrypt": options.encrypt, "backend": options.backend if options.encrypt else None,
            "key_bits": options.key_bits if options.encrypt else None, "packing": options.packing,
            "subtraction": options.subtraction, "trees_built": built, "trees_kept": kept,
            "split_owners": trainer.owners, "seconds": seconds,
            "seconds_per_tree": seconds / max(built, 1),
            "active_seconds": trainer.timing.as_dict(),
            "operations": {"encryptions": trainer.counts["encryptions"],
                           "decryptions": trainer.counts["decryptions"],
                           "homomorphic_additions": {p: int(s.get("homomorphic_additions", 0))
                                                     for p, s in peer_stats.items() if isinstance(s, dict)},
                           "compress_squarings": {p: int(s.get("compress_squarings", 0))
                                                  for p, s in peer_stats.items() if isinstance(s, dict)}},
        }}
        return ActiveOutcome(y_true=np.asarray(data.y_test), scores=trainer.objective.scores(test), history=history,
                             extra=extra)

    return KeptRole(role)
