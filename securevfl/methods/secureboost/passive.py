"""SecureBoost's passive party: its side of the training protocol (:mod:`.protocol` describes the whole).

Per tree it receives the encrypted gradients of the rows it holds, per level the node of each of its
rows, returns the encrypted left-side sums of its split candidates, and, as the owner of a chosen
split, keeps the feature and threshold in its lookup table and returns which of the node's rows go
left.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.data.scenario import PartyData
from securevfl.errors import DataError, ProtocolError
from securevfl.federation.runtime import PartyContext
from securevfl.methods.base import TrainConfig
from securevfl.methods.engine.kept import Keep, KeptRole, kept_side
from securevfl.methods.secureboost.binning import FeatureBins, fit_bins
from securevfl.methods.secureboost.codec import node_slot_bits, slots_per_ciphertext
from securevfl.methods.secureboost.histogram import (
    Candidate,
    EncryptedHistogrammer,
    candidates_of,
    dominant_bins,
    lowest_equivalent,
    plain_candidate_sums,
    plain_histograms,
)
from securevfl.methods.secureboost.options import SecureBoostOptions
from securevfl.methods.secureboost.protocol import (
    ASSIGN,
    HISTOGRAMS,
    LEFT_ROWS,
    PUBLIC_KEY,
    SPLIT,
    STATS,
    TREE,
    _feature_subset,
    _has_missing,
    _walk_rows,
    backend_options,
    ciphertext_bytes,
    executor_config,
    from_wire,
    goes_left,
    rows_by_node,
    to_wire,
)
from securevfl.methods.secureboost.tree import SPLITS, SplitRecorder
from securevfl.privacy.paillier import (
    PaillierBackend,
    PaillierPublicKey,
    create_backend,
)


@dataclass
class _PassiveTree:
    tree: int
    rows: np.ndarray
    gradients: list[list[int]] | np.ndarray  # per component list of ciphertexts, or int64 (rows, 2)
    candidates: list[Candidate]
    digit_bits: int
    skip: np.ndarray | None = None  # per feature the bin derived from the node total (histogram.dominant_bins)


class PassiveTrainer:
    """A passive party's side of training: histograms of its own bins, and the rows of its own splits."""

    def __init__(self, ctx: PartyContext, data: PartyData, config: TrainConfig, options: SecureBoostOptions,
                 shuffle_seed: int | None) -> None:
        if data.y_train is not None or data.y_test is not None:
            raise DataError(f"{data.name}: a passive party must not hold the labels (in secureboost the active "
                            "party alone computes gradients from them)")
        self.ctx, self.data, self.config, self.options = ctx, data, config, options
        X_walk = _walk_rows(data)
        self.bins: FeatureBins = fit_bins(np.asarray(data.X_train, dtype=np.float64), options.max_bins)
        self.walk_bins = self.bins.transform(X_walk)
        self.n_walk = len(X_walk)
        self.has_missing = _has_missing(np.asarray(data.X_train, dtype=np.float64))
        coverage = data.coverage
        #: whether it does not hold some training rows (partial coverage): a candidate per feature more
        self.partial = bool(coverage is not None and data.name in coverage.train
                            and not coverage.train[data.name].all())
        self.recorder = SplitRecorder()
        self.shuffle = np.random.default_rng(shuffle_seed if shuffle_seed is not None else secrets.randbits(128))
        self.n: int | None = None
        self.backend: PaillierBackend | None = None
        self.hist: EncryptedHistogrammer | None = None

    def setup(self) -> None:
        ctx, options = self.ctx, self.options
        ctx.stage = "key exchange"
        raw = ctx.recv(ctx.active, PUBLIC_KEY)
        if options.encrypt:
            if not isinstance(raw, bytes):
                raise ProtocolError(f"{ctx.active} sent no public key, but encrypt=true was agreed")
            public_key = PaillierPublicKey.from_bytes(raw)
            if public_key.bits != options.key_bits:
                raise ProtocolError(f"{ctx.active} sent a {public_key.bits}-bit key; "
                                    f"{options.key_bits} bits were agreed")
            self.n = public_key.n
            self.backend = create_backend(options.backend, public_key, **backend_options(options))
            self.hist = EncryptedHistogrammer(public_key.n, workers=options.workers, executor=executor_config(options))
        elif raw is not None:
            raise ProtocolError(f"{ctx.active} sent a public key, but encrypt=false was agreed")

    def run(self) -> int:
        """Serve every tree until the active party ends training; the number of trees it keeps."""
        tree = 0
        while True:
            message = self.ctx.recv(self.ctx.active, TREE)
            if not isinstance(message, dict):
                raise ProtocolError(f"{self.ctx.active} sent a malformed {TREE}")
            if message.get("done"):
                kept = message.get("trees")
                if not isinstance(kept, int) or not 0 <= kept <= tree:
                    raise ProtocolError(f"{self.ctx.active} ended training keeping {kept!r} of {tree} trees")
                return kept
            self.ctx.stage = f"tree {tree + 1}"
            if not message.get("skip"):
                self._tree(self._receive_tree(message, tree))
            tree += 1
            self.ctx.progress(tree=tree)

    def _receive_tree(self, message: dict[str, Any], tree: int) -> _PassiveTree:
        ctx, options = self.ctx, self.options
        rows = message.get("rows")
        if (not isinstance(rows, np.ndarray) or rows.ndim != 1 or rows.dtype.kind not in "iu"
                or (len(rows) and (rows.min() < 0 or rows.max() >= self.n_walk))):
            raise ProtocolError(f"{ctx.active} sent the rows of tree {tree + 1} malformed or out of range")
        rows = rows.astype(np.int64)
        digit_bits = message.get("digit_bits")
        if not isinstance(digit_bits, int) or not 8 <= digit_bits <= 512:
            raise ProtocolError(f"{ctx.active} sent a malformed packing layout for tree {tree + 1}")
        features = _feature_subset(self.bins.n_features, options.colsample, self.config.seed, ctx.name, tree)
        n_bins = [len(self.bins.cuts[f]) + 1 for f in range(self.bins.n_features)]
        every = candidates_of(n_bins, self.has_missing, absent=self.partial)
        chosen = set(features.tolist())
        candidates = [c for c in every if c[0] in chosen]
        if options.shuffle:
            candidates = [candidates[i] for i in self.shuffle.permutation(len(candidates))]
        gh = message.get("gradients")
        gradients: list[list[int]] | np.ndarray
        if self.n is None:
            if not isinstance(gh, np.ndarray) or gh.shape != (len(rows), 2) or gh.dtype != np.int64:
                raise ProtocolError(f"{ctx.active} sent plaintext gradients of another shape than {len(rows)} x 2")
            gradients = gh
        else:
            components = 1 if options.packing else 2
            if not isinstance(gh, list) or len(gh) != components:
                raise ProtocolError(f"{ctx.active} sent {TREE} with a malformed gradient list")
            width = ciphertext_bytes(self.n)
            with ctx.meter.serialize():
                gradients = [from_wire(part, width, len(rows), ctx.active, "gradients") for part in gh]
        return _PassiveTree(tree, rows, gradients, candidates, digit_bits)

    def _tree(self, tree: _PassiveTree) -> None:
        ctx = self.ctx
        sample_bins = self.walk_bins[tree.rows]
        level = 0
        while True:
            ctx.stage = f"tree {tree.tree + 1}, level {level}"  # where a failure or a timeout says it was
            level += 1
            message = ctx.recv(ctx.active, ASSIGN)
            if not isinstance(message, dict):
                raise ProtocolError(f"{ctx.active} sent a malformed {ASSIGN}")
            if message.get("end"):
                return
            node_of, compute = message.get("node_of"), message.get("compute")
            if (not isinstance(node_of, np.ndarray) or node_of.shape != (self.n_walk,) or node_of.dtype.kind not in "iu"
                    or not isinstance(compute, np.ndarray) or compute.ndim != 1 or compute.dtype.kind not in "iu"):
                raise ProtocolError(f"{ctx.active} sent a node assignment of another shape than {self.n_walk} rows")
            node_of = node_of.astype(np.int64)
            if len(compute):
                sample_nodes = node_of[tree.rows]
                node_rows = rows_by_node(sample_nodes, compute.tolist())
                ctx.send(ctx.active, HISTOGRAMS, self._histograms(tree, sample_bins, node_rows))
            self._split(tree, node_of)

    def _histograms(self, tree: _PassiveTree, sample_bins: np.ndarray, node_rows: list[np.ndarray]) -> dict[str, Any]:
        ctx, options = self.ctx, self.options
        width = self.options.max_bins + 1
        missing = self.bins.missing_bin
        count = len(tree.candidates)
        if isinstance(tree.gradients, np.ndarray):
            with ctx.meter.compute():
                hist = plain_histograms(tree.gradients, sample_bins, width, node_rows)
                plain = plain_candidate_sums(hist, tree.candidates, missing) if count else np.zeros(
                    (len(node_rows), 0, 2), dtype=np.int64)
            return {"count": count, "sums": plain}
        assert self.hist is not None and self.backend is not None and self.n is not None
        blobs: list[list[bytes]] = [[] for _ in node_rows]
        if tree.skip is None:
            tree.skip = dominant_bins(sample_bins, width, len(tree.rows))
        for component in tree.gradients:
            with ctx.meter.crypto("secureboost.histogram"):
                flat = self.hist.histograms(component, sample_bins, node_rows, width, tree.skip)
                per_node = self.hist.candidate_sums(flat, len(node_rows), sample_bins.shape[1], width, missing,
                                                    tree.candidates)
            if options.packing:
                slots = [node_slot_bits(tree.digit_bits, len(tree.rows), len(rows)) for rows in node_rows]
                with ctx.meter.crypto("secureboost.compress"):
                    packed_nodes = self.hist.compress_many(
                        per_node, [slots_per_ciphertext(self.n.bit_length(), slot) for slot in slots], slots)
            else:
                packed_nodes = [[1 if c is None else c for c in sums] for sums in per_node]
            with ctx.meter.crypto("paillier.rerandomize"):
                flat_packed = self.backend.rerandomize_raw([c for node in packed_nodes for c in node])
            with ctx.meter.serialize():
                start = 0
                for k, node in enumerate(packed_nodes):
                    blobs[k].append(to_wire(flat_packed[start : start + len(node)], ciphertext_bytes(self.n)))
                    start += len(node)
        return {"count": count, "sums": blobs}

    def _split(self, tree: _PassiveTree, node_of: np.ndarray) -> None:
        ctx = self.ctx
        message = ctx.recv(ctx.active, SPLIT)
        nodes, chosen = (message.get("nodes"), message.get("candidates")) if isinstance(message, dict) else (None, None)
        if (not isinstance(nodes, np.ndarray) or not isinstance(chosen, np.ndarray) or nodes.shape != chosen.shape
                or nodes.ndim != 1 or (len(chosen) and (chosen.min() < 0 or chosen.max() >= len(tree.candidates)))):
            raise ProtocolError(f"{ctx.active} sent a malformed {SPLIT} (split ids must name this party's candidates)")
        records, masks = [], []
        node_rows = rows_by_node(node_of, nodes.tolist())
        fitted_nodes = node_of[tree.rows]
        for node, rows, candidate in zip(nodes.tolist(), node_rows, chosen.tolist(), strict=True):
            feature, bin_index, missing_left = tree.candidates[candidate]
            node_bins = self.walk_bins[tree.rows[fitted_nodes == node]]
            bin_index, missing_left = lowest_equivalent(node_bins[:, feature], bin_index, missing_left,
                                                        self.bins.missing_bin)
            if self.partial and not missing_left:
                feature, bin_index = self._first_of_equal(tree, node_bins, feature, bin_index)
            records.append(self.recorder.add(feature, self.bins.threshold(feature, bin_index), missing_left, tree.tree))
            left = goes_left(self.walk_bins[rows], feature, bin_index, missing_left, self.bins.missing_bin)
            masks.append(np.packbits(left).tobytes())
        ctx.send(ctx.active, LEFT_ROWS, {"records": np.array(records, dtype=np.int64), "left": masks})

    def _first_of_equal(self, tree: _PassiveTree, node_bins: np.ndarray, feature: int,
                        bin_index: int) -> tuple[int, int]:
        """A split sending every row of the node it holds left (those it does not hold right), on its first feature.

        Every feature without missing values in the node parts its rows so (equal gains): XGBoost keeps the
        lowest feature, each at its lowest equivalent bin; so does the owner, whatever the secret permutation.
        """
        missing = self.bins.missing_bin
        column = node_bins[:, feature].astype(np.int64)
        if len(column) == 0 or (column == missing).any() or int(column.max()) > bin_index:
            return feature, bin_index  # not such a split
        for f in sorted({c[0] for c in tree.candidates}):
            values = node_bins[:, f].astype(np.int64)
            if f < feature and not (values == missing).any():
                return f, int(values.max())
        return feature, bin_index

    def close(self) -> None:
        if self.hist is not None:
            self.hist.close()
        if self.backend is not None:
            self.backend.close()

    def stats(self) -> dict[str, int]:
        return {"homomorphic_additions": self.hist.multiplications if self.hist is not None else 0,
                "compress_squarings": self.hist.squarings if self.hist is not None else 0,
                "records": len(self.recorder.feature)}


def passive_role(data: PartyData, config: TrainConfig, options: SecureBoostOptions,
                 shuffle_seed: int | None = None) -> KeptRole:
    """A passive party: it keeps its own lookup table (feature, threshold, missing side per record)."""

    def role(ctx: PartyContext, keep: Keep) -> dict[str, int]:
        trainer = PassiveTrainer(ctx, data, config, options, shuffle_seed)
        try:
            trainer.setup()
            kept = trainer.run()
        finally:
            trainer.close()
        keep(kept_side({SPLITS: trainer.recorder.module(kept)}))
        stats = trainer.stats()
        ctx.send(ctx.active, STATS, stats)
        return stats

    return KeptRole(role)
