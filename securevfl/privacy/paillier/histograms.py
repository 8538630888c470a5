"""Encrypted histograms: products of Paillier ciphertexts per (node, feature, bin), and their packing.

A bin's encrypted sum is the product mod n^2 of the ciphertexts of the rows that fall in it
(Paillier's addition): rows × features modular multiplications per computed node, spread over a
:class:`psi.executors.TaskExecutor` (local processes, or a Ray cluster) in row chunks, each worker
returning partial histograms the caller multiplies together. A feature's dominant bin can be derived
from the node's total instead (:func:`dominant_bins`), and many sums can be packed into one
ciphertext by Horner's rule (:meth:`EncryptedHistogrammer.compress`), also spread over the workers.
Every row over many columns at once (:meth:`EncryptedHistogrammer.column_histograms`) takes fewer
products through the joint cells of groups of columns (:func:`plan_groups`). This module imports
only numpy, gmpy2 and the executors, so worker processes start quickly. Used by
:mod:`securevfl.methods.secureboost` and :mod:`securevfl.explore`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz

from psi.executors import ExecutorConfig, TaskExecutor, create_executor

Candidate = tuple[int, int, bool]  # (feature, bin b: "bin <= b" goes left, missing values go left)
#: The most columns :meth:`EncryptedHistogrammer.column_histograms` sums through one joint cell (bins < 256).
MAX_GROUP = 14


def _accumulate(task: tuple[int, list[Any], np.ndarray, np.ndarray, int]) -> list[Any]:
    """Worker: products of ciphertexts per key, one (row, key) pair at a time; ``None`` where no row fell."""
    nsq_int, cts, rows, keys, size = task
    nsq = mpz(nsq_int)
    acc: list[Any] = [None] * size
    for r, k in zip(rows.tolist(), keys.tolist(), strict=True):
        a = acc[k]
        acc[k] = cts[r] if a is None else a * cts[r] % nsq
    return acc


def _products(values: Sequence[Any], keys: np.ndarray, size: int, nsq: mpz) -> list[Any]:
    """Products of ``values`` per key (``None`` values skipped; ``None`` where nothing fell)."""
    acc: list[Any] = [None] * size
    for v, k in zip(values, keys.tolist(), strict=True):
        if v is not None:
            a = acc[k]
            acc[k] = v if a is None else a * v % nsq
    return acc


#: One group of columns summed together: each row's joint cell, the cells, the marginalising steps
#: ``(source table, each source cell's target cell, target cells)`` (table 0: the joint cells) and the
#: outputs ``(table of one column, column, each cell's bin)``.
Group = tuple[np.ndarray, int, list[tuple[int, np.ndarray, int]], list[tuple[int, int, np.ndarray]]]


def _grouped(task: tuple[int, Sequence[Any], int, list[Group]]) -> list[tuple[int, list[Any]]]:
    """Worker: per group of columns, the products per joint cell, then each column's per-bin products."""
    nsq_int, cts, width, groups = task
    nsq = mpz(nsq_int)
    values = [mpz(c) for c in cts]
    out = []
    for codes, cells, steps, outputs in groups:
        tables = [_products(values, codes, cells, nsq)]
        for source, mapping, size in steps:
            tables.append(_products(tables[source], mapping, size, nsq))
        for table, feature, bin_of in outputs:
            hist: list[Any] = [None] * width
            for value, b in zip(tables[table], bin_of.tolist(), strict=True):
                hist[b] = value
            out.append((feature, hist))
    return out


def _dense(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes 0..C−1 of non-negative ``key`` (in key order) and one position holding each code."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), first


def _joint(codes: np.ndarray, cells: int, column: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """The joint cells of a group's cells and one more column (dense codes), and how many there are."""
    key = codes * width + column
    if cells * width > 1 << 24:  # a large table of flags: sort instead
        dense, first = _dense(key)
        return dense, len(first)
    present = np.zeros(cells * width, dtype=bool)
    present[key] = True
    remap = np.cumsum(present) - 1
    return remap[key], int(present.sum())


def plan_groups(bins: np.ndarray, width: int, max_group: int = 8) -> list[list[int]]:
    """Columns to sum together (their joint cells), greedily: a group grows while it lowers the products per column.

    A group of k columns costs about one product per row (each row into its joint cell) plus about
    two per occupied cell (the marginals, halving the group at each step), against one per row for
    each column alone: columns of few bins or few rows per cell join many, deciles of 100,000 rows
    about four (11^4 cells), a column of 100 rows none.
    """
    rows, n_features = bins.shape
    occupied = [int(np.count_nonzero(np.bincount(bins[:, f], minlength=width))) for f in range(n_features)]
    order = sorted(range(n_features), key=lambda f: (occupied[f], f))
    groups: list[list[int]] = []
    current: list[int] = []
    codes, cells, per_column = np.zeros(rows, dtype=np.int64), 1, float("inf")
    for f in order:
        if current and len(current) < max_group:
            joined, joined_cells = _joint(codes, cells, bins[:, f].astype(np.int64), width)
            cost = (rows + joined_cells) / (len(current) + 1)
            if cost < per_column:
                current.append(f)
                codes, cells, per_column = joined, joined_cells, cost
                continue
        if current:
            groups.append(current)
        current = [f]
        codes, cells = _dense(bins[:, f].astype(np.int64))[0], occupied[f]
        per_column = float(rows - occupied[f])
    if current:
        groups.append(current)
    if len(groups) > 1 and len(groups[-1]) < len(groups[-2]) < max_group:  # the leftover: one group more?
        merged = groups[-2] + groups[-1]
        if _cost(bins, merged, width) < _cost(bins, groups[-2], width) + _cost(bins, groups[-1], width):
            groups[-2:] = [merged]
    return groups


def _cost(bins: np.ndarray, columns: list[int], width: int) -> int:
    """The products of a group by the planning model: a row each, plus a cell each for the marginals."""
    rows = int(bins.shape[0])
    codes, cells = np.zeros(rows, dtype=np.int64), 1
    for f in columns:
        codes, cells = _joint(codes, cells, bins[:, f].astype(np.int64), width)
    return rows - cells if len(columns) == 1 else rows + cells


def _group_plan(bins: np.ndarray, columns: list[int], width: int) -> tuple[Group, int]:
    """A group's joint cells and marginalising steps, and the products they take."""
    rows = bins.shape[0]
    if len(columns) == 1:
        f = columns[0]
        codes = bins[:, f].astype(np.int64)
        return (codes, width, [], [(0, f, np.arange(width, dtype=np.int64))]), rows - int(
            np.count_nonzero(np.bincount(codes, minlength=width)))
    codes, cells = np.zeros(rows, dtype=np.int64), 1
    for f in columns:
        codes, cells = _joint(codes, cells, bins[:, f].astype(np.int64), width)
    where = np.empty(cells, dtype=np.int64)
    where[codes] = np.arange(rows, dtype=np.int64)  # a row of each cell
    steps: list[tuple[int, np.ndarray, int]] = []
    outputs: list[tuple[int, int, np.ndarray]] = []
    products = rows - cells

    def split(table: int, cell_bins: np.ndarray, cols: list[int]) -> None:
        nonlocal products
        if len(cols) == 1:
            outputs.append((table, cols[0], cell_bins[:, 0].copy()))
            return
        half = len(cols) // 2
        for part in (slice(0, half), slice(half, len(cols))):
            sub = cell_bins[:, part]
            key = np.zeros(len(sub), dtype=np.int64)
            for i in range(sub.shape[1]):
                key = key * width + sub[:, i]
            mapping, first = _dense(key)
            steps.append((table, mapping, len(first)))
            products += len(mapping) - len(first)
            split(len(steps), sub[first], cols[part])

    split(0, bins[where][:, columns].astype(np.int64), list(columns))
    return (codes, cells, steps, outputs), products


def _shifts(group: Sequence[Any]) -> int:
    """Horner steps that square: one before each sum once the accumulator holds one."""
    holding, count = False, 0
    for c in reversed(group):
        count += holding
        holding = holding or c is not None
    return count


def _compress(task: tuple[int, list[tuple[int, list[Any]]]]) -> list[Any]:
    """Worker: each (shift, group) of sums as one ciphertext, Σ_j sum_j 2^(j · shift) (empty sums are zero)."""
    nsq_int, groups = task
    nsq = mpz(nsq_int)
    out = []
    for shift_bits, group in groups:
        power = mpz(1) << shift_bits
        acc = mpz(1)
        for c in reversed(group):
            if acc != 1:
                acc = gmpy2.powmod(acc, power, nsq)
            if c is not None:
                acc = acc * c % nsq
        out.append(acc)
    return out


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
            tasks = []
            for i in range(0, len(cts), step):  # each worker gets a chunk of rows and every pair of those rows
                mask = (pair_rows >= i) & (pair_rows < i + step)
                tasks.append((nsq, cts[i : i + step], pair_rows[mask] - i, keys[mask], total_size))
            flat = _merge(pool.map(_accumulate, tasks), total_size, self.nsq)
        if derive:
            assert skip is not None
            self._derive(flat, n_nodes, n_features, width, skip)
        return flat[:size]

    def column_histograms(self, ciphertexts: Sequence[Any], bins: np.ndarray, width: int,
                          max_group: int = 8) -> list[Any]:
        """Products of every row's ciphertext per (feature, bin), flat at ``feature · width + bin`` (``None``: empty).

        The same products as :meth:`histograms` of one node holding every row, with fewer
        multiplications: columns are summed in groups (:func:`plan_groups`), each row's ciphertext
        multiplied into its joint cell of the group's columns, each column's bins then derived by
        multiplying cells together (a product mod n^2 does not depend on the order of its factors, so
        every result is the same integer). Groups are spread over the workers, each task carrying
        every ciphertext.
        """
        rows, n_features = bins.shape
        if len(ciphertexts) != rows:
            raise ValueError(f"{len(ciphertexts)} ciphertexts for {rows} rows of bins")
        if not 1 <= max_group <= MAX_GROUP:  # a half-group's cell key, width^7 at most, fits in int64
            raise ValueError(f"max_group must be in [1, {MAX_GROUP}], got {max_group}")
        plans = [_group_plan(bins, g, width) for g in plan_groups(bins, width, max_group)]
        self.multiplications += sum(products for _, products in plans)
        nsq = int(self.nsq)
        cts = list(ciphertexts)
        work = sum(rows + plan[1] for plan, _ in plans)
        pool = self._pool() if work >= self.parallel_min_items and len(plans) > 1 else None
        if pool is None:
            parts = [_grouped((nsq, cts, width, [plan for plan, _ in plans]))]
        else:
            loads = [0] * min(pool.workers, len(plans))
            shares: list[list[Group]] = [[] for _ in loads]
            for plan, products in sorted(plans, key=lambda p: -(rows + p[1])):  # the largest first, to the lightest
                k = loads.index(min(loads))
                shares[k].append(plan)
                loads[k] += rows + products
            parts = list(pool.map(_grouped, ((nsq, cts, width, share) for share in shares)))
        flat: list[Any] = [None] * (n_features * width)
        for part in parts:
            for feature, hist in part:
                flat[feature * width : (feature + 1) * width] = hist
        return flat

    def start(self) -> None:
        """Start the workers in the background (where the executor can), before the ciphertexts arrive."""
        pool = self._pool()
        start = getattr(pool, "start", None)
        if start is not None:
            start()

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
        return self.compress_many([sums], per_ciphertext, shift_bits)[0]

    def compress_many(self, lists: Sequence[Sequence[Any]], per_ciphertext: int | Sequence[int],
                      shift_bits: int | Sequence[int]) -> list[list[Any]]:
        """:meth:`compress` of each list (a node's candidate sums), on the workers when there is enough work.

        Enough: ``parallel_min_items / 4`` squarings (about 15 ms; each sum costs its shift's squarings).
        ``per_ciphertext`` and ``shift_bits``: one for every list, or one per list (a node's own slot width).
        """
        pers = [per_ciphertext] * len(lists) if isinstance(per_ciphertext, int) else list(per_ciphertext)
        shifts = [shift_bits] * len(lists) if isinstance(shift_bits, int) else list(shift_bits)
        if len(pers) != len(lists) or len(shifts) != len(lists):
            raise ValueError("one per_ciphertext and one shift_bits per list")
        groups = [(k, (shift, list(sums[start : start + per])))
                  for k, (sums, per, shift) in enumerate(zip(lists, pers, shifts, strict=True))
                  for start in range(0, len(sums), per)]
        self.squarings += sum(shift * _shifts(group) for _, (shift, group) in groups)
        nsq = int(self.nsq)
        work = sum(shift * len(group) for _, (shift, group) in groups)
        pool = self._pool() if work >= self.parallel_min_items // 4 else None
        if pool is None:
            packed = _compress((nsq, [g for _, g in groups]))
        else:
            step = max(1, -(-len(groups) // (pool.workers * 2)))
            tasks = ((nsq, [g for _, g in groups[i : i + step]]) for i in range(0, len(groups), step))
            packed = [c for part in pool.map(_compress, tasks) for c in part]
        out: list[list[Any]] = [[] for _ in lists]
        for (k, _), c in zip(groups, packed, strict=True):
            out[k].append(c)
        return out

    def close(self) -> None:
        """Release the workers (started again on demand)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
