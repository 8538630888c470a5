"""Histograms of gradient sums per (node, feature, bin): exact int64 in the clear, products of ciphertexts encrypted.

A bin's encrypted sum is the product mod n^2 of the packed (g, h) ciphertexts of the node's rows that
fall in it (Paillier's addition). The work is rows × features modular multiplications per computed
node, the protocol's dominant homomorphic cost; :class:`EncryptedHistogrammer` spreads it over a
:class:`psi.executors.TaskExecutor` (local processes, or a Ray cluster) in row chunks, each worker
returning partial histograms that the party multiplies together (a few multiplications per bin).
An empty bin is ``None`` here and E(0) = 1 on the wire. Split candidates are prefix sums over a
feature's bins (:func:`candidate_sums`): the split "bin <= b" (missing values right), and where the
feature has missing values also "bin <= b or missing".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from psi.executors import ExecutorConfig, TaskExecutor, create_executor

Candidate = tuple[int, int, bool]  # (feature, bin b: "bin <= b" goes left, missing values go left)


def plain_histograms(values: np.ndarray, bins: np.ndarray, width: int, node_rows: Sequence[np.ndarray]) -> np.ndarray:
    """Exact sums ``(nodes, features, width, components)`` (int64) of ``values`` ``(rows, components)``."""
    n_features = bins.shape[1]
    out = np.zeros((len(node_rows), n_features, width, values.shape[1]), dtype=np.int64)
    offsets = np.arange(n_features, dtype=np.int64) * width
    for k, rows in enumerate(node_rows):
        if not len(rows):
            continue
        keys = (bins[rows].astype(np.int64) + offsets).ravel()
        flat = out[k].reshape(n_features * width, values.shape[1])
        for c in range(values.shape[1]):
            np.add.at(flat[:, c], keys, np.repeat(values[rows, c], n_features))
    return out


def candidates_of(n_bins: Sequence[int], has_missing: Sequence[bool]) -> list[Candidate]:
    """Every split candidate of a party: per feature, "bin <= b" for b < n_bins − 1, and its missing-left twin."""
    out: list[Candidate] = []
    for f, (nb, missing) in enumerate(zip(n_bins, has_missing, strict=True)):
        for b in range(nb - 1):
            out.append((f, b, False))
            if missing:
                out.append((f, b, True))
    return out


def lowest_equivalent(node_bins: np.ndarray, bin_index: int, missing_left: bool, missing_bin: int) -> tuple[int, bool]:
    """The split that parts a node's fitted rows as "bin <= ``bin_index``" does, with the lowest bin (XGBoost's pick).

    ``node_bins``: the bins of the split's feature over the node's fitted rows. Candidates whose bins in
    between hold none of those rows have equal sums, hence equal gains; the active party takes the
    first of them in the passive party's shuffled order, so without this the threshold (and the side
    of test rows in those bins) would change from run to run. Missing values go right where the node
    has none (XGBoost's default direction then).
    """
    present = np.zeros(missing_bin + 1, dtype=bool)
    present[np.asarray(node_bins, dtype=np.int64)] = True
    while bin_index > 0 and not present[bin_index]:
        bin_index -= 1
    return bin_index, bool(missing_left and present[missing_bin])


def plain_candidate_sums(hist: np.ndarray, candidates: Sequence[Candidate], missing_bin: int) -> np.ndarray:
    """Left-side sums ``(nodes, candidates, components)`` from plain histograms ``(nodes, F, width, C)``."""
    prefix = np.cumsum(hist, axis=2)
    f = np.array([c[0] for c in candidates], dtype=np.int64)
    b = np.array([c[1] for c in candidates], dtype=np.int64)
    miss = np.array([c[2] for c in candidates], dtype=bool)
    out = prefix[:, f, b, :]
    out[:, miss, :] += hist[:, f[miss], missing_bin, :]
    return np.asarray(out)


def _accumulate(task: tuple[int, list[Any], np.ndarray, np.ndarray, int]) -> list[Any]:
    """Worker: products of ciphertexts per key, one (row, key) pair at a time; ``None`` where no row fell."""
    nsq_int, cts, rows, keys, size = task
    nsq = mpz(nsq_int)
    acc: list[Any] = [None] * size
    for r, k in zip(rows.tolist(), keys.tolist(), strict=True):
        a = acc[k]
        acc[k] = cts[r] if a is None else a * cts[r] % nsq
    return acc


def _merge(parts: Iterable[list[Any]], size: int, nsq: mpz) -> list[Any]:
    out: list[Any] = [None] * size
    for part in parts:
        for k, v in enumerate(part):
            if v is not None:
                a = out[k]
                out[k] = v if a is None else a * v % nsq
    return out


def dominant_bins(bins: np.ndarray, width: int, rows: int) -> np.ndarray:
    """Per feature, the bin to derive rather than sum (its most populated one), or −1 where summing all is cheaper.

    A derived bin is the node's total over the feature's other bins (one inversion), so it saves the
    additions of its rows at the price of one total per node: worth it where the skipped rows of all
    features together outnumber the node's rows (one-hot and mostly-zero columns; not a feature of
    32 even bins).
    """
    counts = np.stack([np.bincount(bins[:, f].astype(np.int64), minlength=width) for f in range(bins.shape[1])]) \
        if bins.shape[1] else np.zeros((0, width), dtype=np.int64)
    top = counts.argmax(axis=1) if len(counts) else np.zeros(0, dtype=np.int64)
    saved = counts[np.arange(len(counts)), top] if len(counts) else np.zeros(0, dtype=np.int64)
    worth = saved > rows // 8  # a feature whose dominant bin holds over an eighth of the rows
    if int(saved[worth].sum()) <= rows:
        return np.full(bins.shape[1], -1, dtype=np.int64)
    return np.where(worth, top, -1).astype(np.int64)


class EncryptedHistogrammer:
    """Encrypted histograms of one tree's rows, computed in this process or on an executor's workers.

    ``workers`` > 1 (or an :class:`~psi.executors.ExecutorConfig`, Ray included) spreads the rows in
    chunks; below ``parallel_min_items`` (row × feature products) the work stays here.
    """

    def __init__(self, n: int, *, workers: int = 1, executor: ExecutorConfig | None = None,
                 parallel_min_items: int = 20_000) -> None:
        self.nsq = mpz(n) * mpz(n)
        self.workers = workers
        self._config = executor
        self._executor: TaskExecutor | None = None
        self.parallel_min_items = parallel_min_items
        self.multiplications = 0
        self.squarings = 0

    def _pool(self) -> TaskExecutor | None:
        if self._config is None and self.workers <= 1:
            return None
        if self._executor is None:
            config = self._config or ExecutorConfig("process", workers=self.workers)
            self._executor = create_executor(config, preload=[__name__])
        return self._executor

    def histograms(self, ciphertexts: Sequence[Any], bins: np.ndarray, node_rows: Sequence[np.ndarray],
                   width: int, skip: np.ndarray | None = None) -> list[Any]:
        """Products of each node's rows' ciphertexts per bin, flat at ``(node · F + feature) · width + bin``.

        ``skip`` (:func:`dominant_bins`): per feature a bin not summed but derived as the node's total
        over the feature's other bins (``None``: sum every bin).
        """
        n_features = bins.shape[1]
        n_nodes = len(node_rows)
        size = n_nodes * n_features * width
        rows = np.concatenate(node_rows).astype(np.int64) if node_rows else np.zeros(0, dtype=np.int64)
        node_of = np.repeat(np.arange(n_nodes, dtype=np.int64), [len(r) for r in node_rows])
        row_bins = bins[rows].astype(np.int64)
        keys = (node_of[:, None] * n_features + np.arange(n_features)) * width + row_bins
        pair_rows = np.broadcast_to(np.arange(len(rows))[:, None], keys.shape)
        derive = skip is not None and bool((skip >= 0).any())
        if derive:
            assert skip is not None
            keep = row_bins != skip[None, :]
            pair_rows, keys = pair_rows[keep], keys[keep]
            # the node totals, in slots after the bins
            pair_rows = np.concatenate([pair_rows, np.arange(len(rows))])
            keys = np.concatenate([keys, size + node_of])
        else:
            pair_rows, keys = pair_rows.ravel(), keys.ravel()
        total_size = size + (n_nodes if derive else 0)
        self.multiplications += max(0, len(keys) - total_size)
        cts = [ciphertexts[i] for i in rows.tolist()]
        pool = self._pool() if len(keys) >= self.parallel_min_items else None
        nsq = int(self.nsq)
        if pool is None:
            flat = _accumulate((nsq, cts, pair_rows, keys, total_size))
        else:
            chunks = max(1, pool.workers * 2)
            step = -(-len(cts) // chunks)
            starts = np.searchsorted(pair_rows, np.arange(0, len(cts), step)) if not derive else None
            tasks = []
            for i in range(0, len(cts), step):
                if derive:
                    mask = (pair_rows >= i) & (pair_rows < i + step)
                    part_rows, part_keys = pair_rows[mask] - i, keys[mask]
                else:
                    assert starts is not None
                    lo = int(starts[i // step])
                    hi = int(starts[i // step + 1]) if i // step + 1 < len(starts) else len(keys)
                    part_rows, part_keys = pair_rows[lo:hi] - i, keys[lo:hi]
                tasks.append((nsq, cts[i : i + step], part_rows, part_keys, total_size))
            flat = _merge(pool.map(_accumulate, tasks), total_size, self.nsq)
        if derive:
            assert skip is not None
            self._derive(flat, n_nodes, n_features, width, skip)
        return flat[:size]

    def _derive(self, flat: list[Any], n_nodes: int, n_features: int, width: int, skip: np.ndarray) -> None:
        """Fill each skipped bin with the node's total divided by the feature's other bins."""
        nsq = self.nsq
        size = n_nodes * n_features * width
        for node in range(n_nodes):
            total = flat[size + node]
            for f in np.flatnonzero(skip >= 0).tolist():
                base = (node * n_features + f) * width
                others = None
                for b in range(width):
                    v = flat[base + b]
                    if v is not None and b != skip[f]:
                        others = v if others is None else others * v % nsq
                        self.multiplications += 1
                if total is None:
                    flat[base + int(skip[f])] = None
                elif others is None:
                    flat[base + int(skip[f])] = total
                else:
                    flat[base + int(skip[f])] = total * gmpy2.invert(others, nsq) % nsq

    def candidate_sums(self, flat: list[Any], n_nodes: int, n_features: int, width: int, missing_bin: int,
                       candidates: Sequence[Candidate]) -> list[list[Any]]:
        """Per node, the encrypted left-side sum of each candidate (prefix products over bins)."""
        nsq = self.nsq
        last_bin: dict[int, int] = {}
        for f, b, _ in candidates:
            last_bin[f] = max(b, last_bin.get(f, -1))
        out = []
        for node in range(n_nodes):
            prefix: dict[tuple[int, int], Any] = {}
            for f, top in last_bin.items():  # prefix products in bin order, whatever order the candidates come in
                base = (node * n_features + f) * width
                value = None
                for b in range(top + 1):
                    here = flat[base + b]
                    if here is not None:
                        if value is None:
                            value = here
                        else:
                            value = value * here % nsq
                            self.multiplications += 1
                    prefix[(f, b)] = value
            sums: list[Any] = []
            for f, b, miss in candidates:
                value = prefix[(f, b)]
                if miss:
                    m = flat[(node * n_features + f) * width + missing_bin]
                    if m is not None:
                        value = m if value is None else value * m % nsq
                        self.multiplications += 1
                sums.append(value)
            out.append(sums)
        return out

    def compress(self, sums: Sequence[Any], per_ciphertext: int, shift_bits: int) -> list[Any]:
        """Horner packing: ``per_ciphertext`` sums per ciphertext, the first in the lowest digits."""
        nsq = self.nsq
        power = mpz(1) << shift_bits
        out = []
        for start in range(0, len(sums), per_ciphertext):
            acc = mpz(1)
            for c in reversed(sums[start : start + per_ciphertext]):
                if acc != 1:
                    acc = gmpy2.powmod(acc, power, nsq)
                    self.squarings += shift_bits
                if c is not None:
                    acc = acc * c % nsq
            out.append(acc)
        return out

    def close(self) -> None:
        """Release the workers (started again on demand)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
