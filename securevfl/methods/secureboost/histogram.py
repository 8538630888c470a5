"""Histograms of gradient sums per (node, feature, bin): exact int64 in the clear, products of ciphertexts encrypted.

A bin's encrypted sum is the product mod n^2 of the packed (g, h) ciphertexts of the node's rows that
fall in it (Paillier's addition), computed by
:class:`securevfl.privacy.paillier.histograms.EncryptedHistogrammer` (over worker processes or Ray;
a light module, so workers start without torch). An empty bin is ``None`` there and E(0) = 1 on the
wire. Split candidates are prefix sums over a
feature's bins (:func:`candidate_sums`): the split "bin <= b" (missing values right), and where the
feature has missing values also "bin <= b or missing".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from securevfl.privacy.paillier.histograms import Candidate, EncryptedHistogrammer, dominant_bins

__all__ = ["Candidate", "EncryptedHistogrammer", "candidates_of", "dominant_bins", "lowest_equivalent",
           "plain_candidate_sums", "plain_histograms"]


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


def candidates_of(n_bins: Sequence[int], has_missing: Sequence[bool], absent: bool = False) -> list[Candidate]:
    """Every split candidate of a party: per feature, "bin <= b" for b < n_bins − 1, and its missing-left twin.

    ``absent`` (a passive party that does not hold some training rows): per feature also "bin <=
    n_bins − 1", every row it holds left (XGBoost's last forward split, "present left, missing right",
    which parts the rows it holds from those it does not).
    """
    out: list[Candidate] = []
    for f, (nb, missing) in enumerate(zip(n_bins, has_missing, strict=True)):
        for b in range(nb - 1):
            out.append((f, b, False))
            if missing:
                out.append((f, b, True))
        if absent:
            out.append((f, nb - 1, False))
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
