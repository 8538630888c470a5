"""The options of ``secureboost`` (``--option key=value``)."""

from __future__ import annotations

from dataclasses import dataclass

from securevfl.errors import ConfigError
from securevfl.methods.secureboost.binning import MAX_BINS_LIMIT
from securevfl.privacy.paillier.registry import check_backend_and_key
from securevfl.settings import setting

EXECUTORS = ("process", "ray")


@dataclass(frozen=True)
class SecureBoostOptions:
    """Options of ``secureboost``.

    Trees: ``trees`` boosting rounds (one tree per class per round for multi-class), ``max_depth``,
    ``learning_rate`` (XGBoost's eta), ``max_bins`` per feature (missing values get one more),
    ``min_child_weight`` (least hessian sum of a child), ``l2`` (XGBoost's lambda),
    ``min_split_gain`` (gamma), ``subsample`` (rows per tree), ``colsample`` (each party's features
    per tree), ``first_tree_active_only`` (the paper's reduced-leakage variant: the first round uses the
    active party's features only, and the passive parties see nothing of it). Early stopping:
    the run's ``--early-stopping N`` on a ``--val-fraction`` split. The defaults (100 trees at learning rate 0.2)
    were measured on adult and kdd04 against XGBoost and scikit-learn (``tools/defaults_study.py``).

    Cryptography: ``encrypt`` (``false`` runs the same protocol on plaintext gradients: tests, and
    the cost of the cryptography), ``backend`` (``fast`` or ``phe``), ``key_bits`` (2048 or 3072; smaller
    with ``insecure_allow_small_key``, tests only), ``frac_bits`` (fixed-point bits of g and h),
    ``packing`` (g and h in one plaintext, and many split sums in one ciphertext: SecureBoost+),
    ``subtraction`` (compute the smaller child's histogram, subtract for its sibling), ``shuffle`` (each
    passive party permutes its split candidates per tree, so the active party sees "split id k" only),
    ``precompute`` (the active party computes the next tree's Paillier random factors on a background
    thread while it waits for the passive parties' histograms, so encrypting a tree's gradients is one
    multiplication per row; ``fast`` backend), ``workers`` (processes for encryption, histograms and
    decryption; 1 = in the party's process),
    ``executor`` (``process`` or ``ray``, with ``ray_address``).
    """

    trees: int = setting(100, help="Boosting rounds (multi-class: one tree per class per round), >= 1.")
    max_depth: int = setting(5, help="Tree depth (levels of splits below the root), >= 1.")
    learning_rate: float = setting(0.2, help="Shrinkage of each tree (XGBoost's eta), in (0, 1].")
    max_bins: int = setting(32, help="Bins per feature, 2..255 (missing values get one more).")
    min_child_weight: float = setting(1.0, help="Least hessian sum of a child, >= 0.")
    l2: float = setting(1.0, help="L2 regularisation of the leaf weights (XGBoost's lambda), >= 0.")
    min_split_gain: float = setting(0.0, help="Gain a split must exceed (XGBoost's gamma), >= 0.")
    subsample: float = setting(1.0, help="Share of the fitted rows each tree uses (seeded), in (0, 1].")
    colsample: float = setting(1.0, help="Share of each party's own features each tree uses (seeded), in (0, 1].")
    first_tree_active_only: bool = setting(
        False, help="RL-SecureBoost: the first round uses the active party's features only.")
    encrypt: bool = setting(True, help="Paillier-encrypt g and h; false: the same protocol in the clear (tests, cost).")
    backend: str = setting("fast", help="Paillier implementation: fast (gmpy2) | phe (python-paillier).")
    key_bits: int = setting(2048, help="Paillier key size: 2048 | 3072 (smaller only with insecure_allow_small_key).")
    insecure_allow_small_key: bool = setting(False, help="Allow test-sized keys (even, >= 512 bits); tests only.")
    frac_bits: int = setting(24, help="Fixed-point fraction bits of g and h, 8..40.")
    packing: bool = setting(
        True, help="SecureBoost+ packing: g and h in one plaintext, many split sums per ciphertext.")
    subtraction: bool = setting(
        True, help="Compute the smaller child's histograms; its sibling's are parent minus child.")
    shuffle: bool = setting(
        True, help="Each passive party permutes its split candidates with a fresh secret permutation per tree.")
    precompute: bool = setting(
        True, help="The active party precomputes the next tree's Paillier randomness in the background (fast backend).")
    workers: int = setting(
        1, help="Processes per party for encryption, histograms and decryption (1: in the party's process).")
    executor: str = setting("process", help="Where the workers run: process (a local pool) | ray.")
    ray_address: str = setting("", help="Ray cluster to join (needs executor=ray); empty: a local Ray.")

    def __post_init__(self) -> None:
        if self.trees < 1:
            raise ConfigError(f"trees must be >= 1, got {self.trees}")
        if self.max_depth < 1:
            raise ConfigError(f"max_depth must be >= 1 (a tree of depth 0 is a constant), got {self.max_depth}")
        if not 0 < self.learning_rate <= 1:
            raise ConfigError(f"learning_rate must be in (0, 1], got {self.learning_rate}")
        if not 2 <= self.max_bins <= MAX_BINS_LIMIT:
            raise ConfigError(f"max_bins must be in [2, {MAX_BINS_LIMIT}], got {self.max_bins}")
        if not self.min_child_weight >= 0 or not self.l2 >= 0 or not self.min_split_gain >= 0:
            raise ConfigError("min_child_weight, l2 and min_split_gain must be >= 0")
        if not 0 < self.subsample <= 1 or not 0 < self.colsample <= 1:
            raise ConfigError(f"subsample and colsample must be in (0, 1], got {self.subsample}, {self.colsample}")
        check_backend_and_key(self.backend, self.key_bits, self.insecure_allow_small_key)
        if not 8 <= self.frac_bits <= 40:
            raise ConfigError(f"frac_bits must be in [8, 40], got {self.frac_bits}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        if self.executor not in EXECUTORS:
            raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.ray_address and self.executor != "ray":
            raise ConfigError("ray_address needs executor=ray")
