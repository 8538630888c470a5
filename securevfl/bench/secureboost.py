"""SecureBoost training: time per tree against the straightforward protocol, the crypto floor and XGBoost.

Shared by ``benchmarks/secureboost.py`` (the full benchmark) and the ``secureboost`` section of
``securevfl bench``. Everything runs on **generated data**: the ``synthetic`` dataset
(scikit-learn ``make_classification``, binary label) cut into 2 parties (``active`` holds the label
and half the columns, ``passive1`` the other half), 80 % training rows, 20 % test rows, aligned in
plaintext (``alignment="plaintext"``: no PSI time in any figure). Every encrypted run uses the same
key size (2048 bits unless a test asks for less); the parties run in this process, so there is no
real network: bytes per link are counted, and the "network" column is serialisation plus the time
the active party waited that the passive party's metered work does not explain.

Configurations, all in the same run:

* **fast** — ``secureboost`` as shipped: ``backend=fast`` (DJN + CRT), ``packing`` (SecureBoost+: (g, h)
  in one plaintext, many split sums per ciphertext), ``subtraction`` (sibling histograms by
  subtraction), ``workers`` processes per party;
* **plain secureboost** — the straightforward protocol of the paper: ``backend=phe`` (python-paillier,
  one process), ``packing=false``, ``subtraction=false``, everything else equal. It is run on fewer
  rows (``plain_rows``) and so is **fast** again at those rows: ``speedup_vs_plain_secureboost`` =
  plain time per tree / fast time per tree at equal rows;
* **plaintext** — the same protocol with ``encrypt=false`` (what the protocol costs without crypto);
* **XGBoost** — ``tree_method="hist"``, the same trees, depth, learning rate, ``max_bin``, lambda and
  ``n_jobs = workers``, trained on the joined table of the same rows: ``ratio_to_xgboost`` =
  SecureBoost's training seconds (key generation and worker start-up included) / XGBoost's ``fit``
  seconds (its binning included); ``auc_gap_vs_xgboost`` = XGBoost's test AUC − SecureBoost's
  (the same test rows).

**Time per tree** is the mean over the trees after the first (``seconds`` of each round in the run's
history); the first tree also starts each party's worker processes, so it is reported on its own
(``first_tree_s``). A run of one tree has only its first tree (flagged ``includes_startup``).
The split of a run (encrypt, histogram, decrypt, split finding, network, other) sums the whole
training and is shown per tree (÷ trees): encrypt, decrypt and split finding are the active
party's own timers; histogram is the passive party's ``secureboost.histogram`` +
``secureboost.compress`` + ``paillier.rerandomize`` crypto seconds; network is every party's
serialisation plus the active party's waiting minus the passive party's metered work; other is
the rest (key generation, gradients, the active party's own plaintext histograms, bookkeeping).

**Crypto floor.** Measured in the same run with the same key size, one core each: the rate of
fast-backend encryption with the private key (CRT; a ``workers``-process rate is recorded beside
it), of a ciphertext multiplication mod n² (a tight gmpy2 loop ``acc = acc * c % nsq``) and of CRT
decryption. Then::

    floor_s = (encryptions / encrypt_per_s
               + (homomorphic_additions + compress_squarings) / multiply_per_s
               + decryptions / decrypt_per_s) / cores,    cores = min(workers, CPUs)

over the run's operation counts, and ``fraction_of_crypto_floor`` = the run's whole training time
(every tree, worker start-up and key set-up included) / floor_s: with ``precompute`` a tree's
encryption randomness is made during the tree before, so only whole-run totals compare fairly
(``steady_fraction_of_floor``, the trees after the first against the floor per tree, is beside it).
The floor leaves out re-randomisation (one per histogram ciphertext sent), so it
is a strict lower bound. ``compress_squarings`` comes from the run's report (the passive parties
count ``shift_bits`` squarings per Horner step after the first non-empty sum).
"""

from __future__ import annotations

import math
import os
import secrets
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Tick = Callable[[str], None]

#: The straightforward SecureBoost: python-paillier, one value per ciphertext, every histogram computed.
PLAIN_SECUREBOOST = {"backend": "phe", "packing": False, "subtraction": False}
FAST = {"backend": "fast", "packing": True, "subtraction": True}
#: One optimisation off at a time, at the straightforward run's rows (``ablation``): label -> options.
ABLATIONS: dict[str, dict[str, Any]] = {
    "no GH packing / cipher compression": {"packing": False},
    "no histogram subtraction": {"subtraction": False},
    "no precomputed randomness": {"precompute": False},
    "one process per party (workers=1)": {"workers": 1},
    "phe backend (packing kept)": {"backend": "phe", "precompute": False},
}


@dataclass(frozen=True)
class SecureBoostBench:
    """What one measurement trains: sizes, trees, key and workers (the same for every configuration)."""

    rows: int = 10_000  # generated rows (80 % train, 20 % test) of the main runs
    trees: int = 2
    depth: int = 3
    workers: int = 2
    key_bits: int = 2048
    plain_rows: int = 1_000  # rows of the straightforward SecureBoost and the fast run beside it
    plain_trees: int = 1
    big_rows: int = 0  # an extra one-tree fast run on this many rows (0: none)
    small_rows: int = 0  # the small-table run: fast on these rows (80 % train), small_trees of small_depth (0: none)
    small_trees: int = 6
    small_depth: int = 5
    features: int = 20
    max_bins: int = 32
    learning_rate: float = 0.3
    seed: int = 0
    plaintext: bool = True  # also the same protocol with encrypt=false
    ablation: bool = True  # each optimisation turned off alone, at plain_rows (ABLATIONS)
    rate_scale: float = 1.0  # work of the per-operation rate measurements (1: about 5 s at 2048 bits)
    insecure_allow_small_key: bool = False  # tests only: key_bits below 2048

    def __post_init__(self) -> None:
        from securevfl.errors import ConfigError

        if min(self.rows, self.plain_rows) < 50 or self.big_rows < 0 or 0 < self.small_rows < 50:
            raise ConfigError("secureboost bench: rows and plain_rows must be >= 50, big_rows >= 0, "
                              "small_rows 0 or >= 50")
        if min(self.small_trees, self.small_depth) < 1:
            raise ConfigError("secureboost bench: small_trees and small_depth must be >= 1")
        if min(self.trees, self.plain_trees, self.depth, self.workers) < 1 or self.features < 2:
            raise ConfigError("secureboost bench: trees, plain_trees, depth and workers >= 1; features >= 2")

    def options(self, **changes: Any) -> dict[str, Any]:
        """The ``secureboost`` options of a run: these sizes, then ``changes``."""
        out: dict[str, Any] = {"trees": self.trees, "max_depth": self.depth, "learning_rate": self.learning_rate,
                               "max_bins": self.max_bins, "workers": self.workers, "key_bits": self.key_bits}
        if self.insecure_allow_small_key:
            out["insecure_allow_small_key"] = True
        out.update(changes)
        return out


def from_sizes(sizes: Any, *, seed: int = 0) -> SecureBoostBench:
    """The ``secureboost`` section's measurement at a ``securevfl bench`` size (:class:`~securevfl.bench.config.Sizes`).

    2048-bit keys at every size; ``tiny`` keeps to a few hundred rows, 4 features, 8 bins and no worker processes.
    """
    return SecureBoostBench(rows=sizes.secureboost_rows, trees=sizes.secureboost_trees, depth=sizes.secureboost_depth,
                            workers=sizes.secureboost_workers, plain_rows=sizes.secureboost_plain_rows,
                            features=sizes.secureboost_features, max_bins=sizes.secureboost_max_bins, seed=seed,
                            rate_scale=sizes.secureboost_rate_scale, ablation=False)


def cores_used(workers: int) -> int:
    """Cores the work can spread over: the workers, at most this machine's CPUs."""
    return max(1, min(workers, os.cpu_count() or 1))


# -------------------------------------------------------------------------------------------- per-operation rates
def crypto_rates(key_bits: int, workers: int, *, scale: float = 1.0, insecure_allow_small_key: bool = False,
                 repeats: int = 3) -> dict[str, Any]:
    """Per-core rates (operations per second, best of ``repeats``) of the operations the floor counts.

    ``encrypt_per_s``: fast backend with the private key (CRT, fixed-base table built beforehand), in
    this process; ``multiply_per_s``: ``acc = acc * c % nsq`` over fresh ciphertexts; ``square_per_s``:
    ``acc = acc * acc % nsq`` (for reference: compression's squarings are counted at the multiply rate);
    ``decrypt_per_s``: CRT decryption. ``encrypt_per_s_with_workers``: the backend as the runs use it
    (``workers`` processes, pool warm), for reference.
    """
    from gmpy2 import mpz

    from securevfl.privacy.paillier import create_backend, generate_keypair

    started = time.perf_counter()
    public_key, private_key = generate_keypair(key_bits, insecure_allow_small_key=insecure_allow_small_key)
    keygen_s = time.perf_counter() - started
    n_enc = max(50, int(2_000 * scale))
    n_mul = max(1_000, int(50_000 * scale))
    n_dec = max(10, int(200 * scale))
    single: Any = create_backend("fast", public_key, private_key, workers=1)
    try:
        _ = single.engine.table  # the fixed-base table: built once per key, not per encryption
        plaintexts = [secrets.randbelow(public_key.n) for _ in range(n_enc)]
        held: dict[str, list[Any]] = {}

        def encrypt() -> None:
            held["cts"] = single.encrypt_raw(plaintexts)

        enc_s = _best(encrypt, repeats)
        cts = [mpz(c) for c in held["cts"]]
        nsq = mpz(public_key.n) * mpz(public_key.n)
        stream = (cts * (n_mul // len(cts) + 1))[:n_mul]

        def multiply() -> None:
            acc = mpz(cts[0])
            for c in stream:
                acc = acc * c % nsq

        def square() -> None:
            acc = mpz(cts[0])
            for _ in range(n_mul):
                acc = acc * acc % nsq

        mul_s = _best(multiply, repeats)
        sq_s = _best(square, repeats)
        dec_s = _best(lambda: single.decrypt_raw(cts[:n_dec]), repeats)
    finally:
        single.close()
    out: dict[str, Any] = {
        "key_bits": key_bits, "keygen_s": keygen_s, "r_bits": single.r_bits,
        "encrypt_per_s": n_enc / enc_s, "multiply_per_s": n_mul / mul_s, "square_per_s": n_mul / sq_s,
        "decrypt_per_s": n_dec / dec_s,
        "counts": {"encrypt": n_enc, "multiply": n_mul, "decrypt": n_dec, "repeats": repeats},
        "note": "one core each, best of the repetitions; encryption with the private key (CRT), as the active "
                "party encrypts",
    }
    if workers > 1:
        pooled: Any = create_backend("fast", public_key, private_key, workers=workers)
        try:
            batch = [secrets.randbelow(public_key.n) for _ in range(max(2_048, n_enc * workers))]
            pooled.encrypt_raw(batch[:2_048])  # starts the pool and builds the workers' tables
            out["encrypt_per_s_with_workers"] = len(batch) / _best(lambda: pooled.encrypt_raw(batch), 1)
            out["workers"] = workers
        finally:
            pooled.close()
    return out


def _best(fn: Callable[[], object], repeats: int) -> float:
    """The fastest of ``repeats`` calls, seconds."""
    samples = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return min(samples)


def crypto_floor(operations: Mapping[str, int], rates: Mapping[str, float], cores: int) -> dict[str, Any]:
    """Seconds the counted operations take at the measured per-core rates, spread over ``cores``."""
    terms = {
        "encrypt": operations["encryptions"] / rates["encrypt_per_s"],
        "multiply": (operations["homomorphic_additions"] + operations["compress_squarings"]) / rates["multiply_per_s"],
        "decrypt": operations["decryptions"] / rates["decrypt_per_s"],
    }
    one_core = sum(terms.values())
    return {"one_core_s": one_core, "terms_one_core_s": terms, "cores": cores, "floor_s": one_core / cores,
            "formula": "(encryptions / encrypt_per_s + (homomorphic_additions + compress_squarings) / multiply_per_s "
                       "+ decryptions / decrypt_per_s) / cores"}


# --------------------------------------------------------------------------------------------------------- runs
def run_config(rows: int, bench: SecureBoostBench, options: Mapping[str, Any]) -> Any:
    """The RunConfig of one run: generated ``synthetic`` rows, 2 parties, plaintext alignment."""
    from securevfl.data import PartitionSpec
    from securevfl.data.datasets import DatasetOptions
    from securevfl.methods import TrainConfig
    from securevfl.run_config import RunConfig

    return RunConfig(method="secureboost", dataset="synthetic",
                     dataset_options=DatasetOptions(n_samples=rows, n_features=bench.features, seed=bench.seed),
                     partition=PartitionSpec(parties=2, seed=bench.seed),
                     train=TrainConfig(seed=bench.seed, options=dict(options)), alignment="plaintext", device="cpu")


def scenario(rows: int, bench: SecureBoostBench) -> Any:
    """The aligned 2-party scenario of ``rows`` generated rows (the same for every run at that size)."""
    from securevfl.api import build_scenario

    return build_scenario(run_config(rows, bench, bench.options()))


def _sum_ops(value: Any) -> int:
    """A count that is an int, or a per-party mapping of ints (summed)."""
    if isinstance(value, Mapping):
        return int(sum(int(v) for v in value.values()))
    return int(value or 0)


def run_secureboost(label: str, rows: int, bench: SecureBoostBench, options: Mapping[str, Any],
                    sc: Any = None) -> dict[str, Any]:
    """Train once; the figures of the run (time per tree, the split, operations, bytes, AUC)."""
    from securevfl.api import run

    config = run_config(rows, bench, options)
    sc = sc if sc is not None else scenario(rows, bench)
    started = time.perf_counter()
    report = run(config, scenario=sc)
    wall = time.perf_counter() - started
    extra = report.extra["secureboost"]
    cost = report.cost
    trees = int(extra["trees_built"])
    tree_s = [float(h["seconds"]) for h in report.history]
    steady = tree_s[1:] if len(tree_s) > 1 else tree_s
    active, passives = sc.active, tuple(sc.passives)
    per_party = cost["per_party"]
    active_s = extra["active_seconds"]
    histogram = sum(float(per_party[p]["crypto_s"].get(k, 0.0)) for p in passives
                    for k in ("secureboost.histogram", "secureboost.compress", "paillier.rerandomize"))
    passive_compute = sum(float(per_party[p]["compute_s"]) for p in passives)
    serialize = float(cost["serialize_s"])
    waiting = float(active_s["histogram_and_network"])
    network = float(per_party[active]["serialize_s"]) + waiting - histogram - passive_compute
    training = float(extra["seconds"])
    split = {"encrypt": float(active_s["encrypt"]), "histogram": histogram, "decrypt": float(active_s["decrypt"]),
             "split_finding": float(active_s["split_finding"]), "network": network}
    split["other"] = training - sum(split.values())
    ops_in = extra.get("operations", {})
    operations = {"encryptions": int(ops_in.get("encryptions", 0)), "decryptions": int(ops_in.get("decryptions", 0)),
                  "homomorphic_additions": _sum_ops(ops_in.get("homomorphic_additions")),
                  "compress_squarings": _sum_ops(ops_in.get("compress_squarings")),
                  "per_party": {k: v for k, v in ops_in.items() if isinstance(v, Mapping)}}
    train_rows = len(sc.party_data(active).X_train)
    return {
        "label": label, "rows": rows, "train_rows": train_rows, "test_rows": len(sc.party_data(active).X_test),
        "features": {p: int(sc.party_data(p).n_features) for p in (active, *passives)},
        "options": {k: v for k, v in config.train.options.items()}, "encrypt": bool(extra["encrypt"]),
        "trees": trees, "tree_s": tree_s, "first_tree_s": tree_s[0] if tree_s else float("nan"),
        "seconds_per_tree": statistics.fmean(steady) if steady else float("nan"),
        "steady_trees": len(steady), "includes_startup": len(tree_s) < 2,
        "training_s": training, "setup_s": training - sum(tree_s), "wall_s": wall,
        "split_s": split, "split_per_tree_s": {k: v / max(trees, 1) for k, v in split.items()},
        "serialize_s": serialize, "active_seconds": dict(active_s), "crypto_s": dict(cost["crypto_s"]),
        "operations": operations, "split_owners": dict(extra.get("split_owners", {})),
        "bytes": dict(cost["comm"]["bytes"]), "messages": dict(cost["comm"]["messages"]),
        "total_bytes": int(cost["total_bytes"]), "rounds": int(cost["rounds"]),
        "auc": float(report.metrics["auc"]), "accuracy": float(report.metrics["accuracy"]),
        "load_1m_after": round(_load(), 2),
    }


def _load() -> float:
    from securevfl.bench.environment import load_average

    return load_average()


def run_xgboost(sc: Any, bench: SecureBoostBench) -> dict[str, Any]:
    """XGBoost ``hist`` on the joined table of the same rows: fit seconds and test AUC."""
    try:
        import xgboost as xgb
    except ImportError:
        return {"status": "not run: xgboost is not installed (pip install xgboost-cpu)"}
    from sklearn.metrics import roc_auc_score

    parties = [sc.active, *sc.passives]
    X_train = np.hstack([np.asarray(sc.party_data(p).X_train, dtype=np.float64) for p in parties])
    X_test = np.hstack([np.asarray(sc.party_data(p).X_test, dtype=np.float64) for p in parties])
    labels = sc.party_data(sc.active)
    model = xgb.XGBClassifier(n_estimators=bench.trees, max_depth=bench.depth, learning_rate=bench.learning_rate,
                              max_bin=bench.max_bins, tree_method="hist", reg_lambda=1.0, min_child_weight=1.0,
                              gamma=0.0, n_jobs=bench.workers)
    started = time.perf_counter()
    model.fit(X_train, np.asarray(labels.y_train))
    fit_s = time.perf_counter() - started
    scores = model.predict_proba(X_test)[:, 1]
    return {"status": "ok", "version": xgb.__version__, "rows": int(len(X_train) + len(X_test)),
            "train_rows": int(len(X_train)), "trees": bench.trees, "n_jobs": bench.workers, "fit_s": fit_s,
            "seconds_per_tree": fit_s / bench.trees, "auc": float(roc_auc_score(np.asarray(labels.y_test), scores)),
            "note": "fit() on the joined table: DMatrix, binning and every tree"}


def _with_floor(run: dict[str, Any], rates: Mapping[str, Any], cores: int) -> None:
    floor = crypto_floor(run["operations"], rates, cores)
    floor["per_tree_s"] = floor["floor_s"] / max(run["trees"], 1)
    run["floor"] = floor
    run["fraction_of_crypto_floor"] = run["training_s"] / floor["floor_s"]
    run["steady_fraction_of_floor"] = run["seconds_per_tree"] / floor["per_tree_s"]


def measure(bench: SecureBoostBench, tick: Tick | None = None) -> dict[str, Any]:
    """Every configuration of the module docstring, the rates, the floor and the four headline ratios."""
    from securevfl.bench import environment

    tick = tick or (lambda _: None)
    started = time.perf_counter()
    load_start = environment.load_average()
    cores = cores_used(bench.workers)
    tick(f"SecureBoost: per-operation rates, {bench.key_bits}-bit key")
    rates = crypto_rates(bench.key_bits, bench.workers, scale=bench.rate_scale,
                         insecure_allow_small_key=bench.insecure_allow_small_key)
    runs: dict[str, dict[str, Any]] = {}
    main_sc = scenario(bench.rows, bench)
    tick(f"SecureBoost fast: {bench.rows:,} rows, {bench.trees} tree(s), depth {bench.depth}")
    runs["fast"] = run_secureboost("fast", bench.rows, bench, bench.options(**FAST), main_sc)
    if bench.plaintext:
        tick(f"SecureBoost without encryption: {bench.rows:,} rows")
        runs["plaintext"] = run_secureboost("no encryption", bench.rows, bench,
                                            bench.options(**FAST, encrypt=False), main_sc)
    small_sc = scenario(bench.plain_rows, bench)
    tick(f"SecureBoost fast at {bench.plain_rows:,} rows (beside the straightforward protocol)")
    runs["fast_at_plain_rows"] = run_secureboost("fast @ plain rows", bench.plain_rows, bench,
                                                 bench.options(**FAST), small_sc)
    tick(f"straightforward SecureBoost (phe, no packing, no subtraction): {bench.plain_rows:,} rows, "
         f"{bench.plain_trees} tree(s)")
    runs["plain_secureboost"] = run_secureboost("plain SecureBoost", bench.plain_rows, bench,
                                                bench.options(**PLAIN_SECUREBOOST, trees=bench.plain_trees), small_sc)
    ablation: dict[str, dict[str, Any]] = {}
    if bench.ablation:
        base = runs["fast_at_plain_rows"]["seconds_per_tree"]
        for label, change in ABLATIONS.items():
            trees = bench.plain_trees if change.get("backend") == "phe" else bench.trees
            tick(f"ablation at {bench.plain_rows:,} rows: {label}")
            run = run_secureboost(label, bench.plain_rows, bench, bench.options(**{**FAST, "trees": trees, **change}),
                                  small_sc)
            ablation[label] = {"options": change, "trees": run["trees"], "seconds_per_tree": run["seconds_per_tree"],
                               "training_s": run["training_s"], "operations": run["operations"],
                               "bytes": run["bytes"], "slowdown_vs_fast": run["seconds_per_tree"] / base}
    if bench.small_rows:
        tick(f"SecureBoost fast on a small table: {bench.small_rows:,} rows, {bench.small_trees} trees, "
             f"depth {bench.small_depth}")
        runs["fast_small_table"] = run_secureboost(
            f"fast, small table (depth {bench.small_depth})", bench.small_rows, bench,
            bench.options(**FAST, trees=bench.small_trees, max_depth=bench.small_depth))
    if bench.big_rows:
        tick(f"SecureBoost fast: {bench.big_rows:,} rows, 1 tree")
        runs["fast_big"] = run_secureboost(f"fast, {bench.big_rows:,} rows, 1 tree", bench.big_rows, bench,
                                           bench.options(**FAST, trees=1))
    for run in runs.values():
        if run["encrypt"]:
            _with_floor(run, rates, cores)
    tick(f"XGBoost hist on the joined {bench.rows:,} rows")
    xgb = run_xgboost(main_sc, bench)
    fast, plain, fast_small = runs["fast"], runs["plain_secureboost"], runs["fast_at_plain_rows"]
    speedup = plain["seconds_per_tree"] / fast_small["seconds_per_tree"]
    ratio_xgb = fast["training_s"] / xgb["fit_s"] if xgb.get("status") == "ok" else None
    auc_gap = xgb["auc"] - fast["auc"] if xgb.get("status") == "ok" else None
    small_table = runs.get("fast_small_table")
    return {
        "speedup_vs_plain_secureboost": speedup,
        "small_table_seconds_per_tree": small_table["seconds_per_tree"] if small_table else None,
        "fraction_of_crypto_floor": fast["fraction_of_crypto_floor"],
        "ratio_to_xgboost": ratio_xgb,
        "auc_gap_vs_xgboost": auc_gap,
        "definitions": {
            "speedup_vs_plain_secureboost": f"plain secureboost time per tree / fast time per tree, both on "
                                            f"{bench.plain_rows:,} rows",
            "fraction_of_crypto_floor": f"fast training time (all trees) / its crypto floor, {bench.rows:,} rows",
            "crypto_floor": fast["floor"]["formula"] + f"; cores = min(workers, CPUs) = {cores}",
            "ratio_to_xgboost": "fast training seconds (all trees, key generation and worker start-up included) / "
                                "XGBoost fit seconds (binning included), same rows",
            "auc_gap_vs_xgboost": "XGBoost test AUC - fast SecureBoost test AUC, same test rows",
            "seconds_per_tree": "mean over the trees after the first (a one-tree run: its only tree)",
            "small_table_seconds_per_tree": f"fast time per tree on {bench.small_rows:,} rows "
                                            f"({bench.small_rows - bench.small_rows // 5:,} training rows), depth "
                                            f"{bench.small_depth}, {bench.workers} workers per party (goal <= 1 s)",
        },
        "config": asdict(bench),
        "data": f"generated: synthetic (sklearn make_classification, seed {bench.seed}), {bench.features} features "
                "split between 2 parties, 80 % train / 20 % test, plaintext alignment (no PSI in any figure)",
        "network_note": "in-process parties: no real network; bytes per link are counted, and network = "
                        "serialisation + the active party's waiting not explained by the passive party's metered work",
        "runs": runs, "xgboost": xgb, "rates": rates, "ablation": ablation,
        "machine": {"cores": os.cpu_count(), "cores_used": cores, "workers": bench.workers,
                    "key_bits": bench.key_bits, "cpu": environment.cpu_model(),
                    "load_1m_start": round(load_start, 2), "load_1m_end": round(environment.load_average(), 2)},
        "wall_s": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------------------- tables, figures, section
RUN_ORDER = ("fast", "plaintext", "fast_at_plain_rows", "plain_secureboost", "fast_small_table", "fast_big")
SPLIT_KEYS = ("encrypt", "histogram", "decrypt", "split_finding", "network", "other")
COLUMNS = ["configuration", "rows (train)", "trees", "s / tree", "first tree (s)", "training (s)",
           "encrypt", "histogram", "decrypt", "split finding", "network", "other", "floor s / tree", "x floor",
           "AUC", "MB sent"]


SPLIT_NOTE = ("split columns: seconds per tree averaged over every tree (worker start-up included); s / tree: the "
              "trees after the first (* a one-tree run: its first tree); AUC: after each run's own trees")


def _fmt(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """One row per configuration (the split per tree, averaged over all trees), then XGBoost."""
    rows = []
    for key in RUN_ORDER:
        r = data["runs"].get(key)
        if r is None:
            continue
        floor = r.get("floor", {})
        per = r["split_per_tree_s"]
        tree = f"{r['seconds_per_tree']:.3g}" + (" *" if r["includes_startup"] else "")
        rows.append([r["label"], f"{r['rows']:,} ({r['train_rows']:,})", str(r["trees"]), tree,
                     f"{r['first_tree_s']:.3g}", f"{r['training_s']:.3g}", *[f"{per[k]:.3g}" for k in SPLIT_KEYS],
                     _fmt(floor.get("per_tree_s")), _fmt(r.get("fraction_of_crypto_floor"), ".2f"),
                     f"{r['auc']:.4f}", f"{r['total_bytes'] / 1e6:.2f}"])
    x = data["xgboost"]
    if x.get("status") == "ok":
        rows.append([f"XGBoost {x['version']} hist (joined table)", f"{x['rows']:,} ({x['train_rows']:,})",
                     str(x["trees"]), f"{x['seconds_per_tree']:.3g}", "-", f"{x['fit_s']:.3g}", *["-"] * 8,
                     f"{x['auc']:.4f}", "-"])
    return rows


def summary_lines(data: Mapping[str, Any]) -> list[str]:
    """The four headline figures and the rates, one sentence each."""
    runs, rates, m = data["runs"], data["rates"], data["machine"]
    plain, small = runs["plain_secureboost"], runs["fast_at_plain_rows"]
    lines = [f"speedup_vs_plain_secureboost: {data['speedup_vs_plain_secureboost']:.1f}x "
             f"({plain['seconds_per_tree']:.3g} s vs {small['seconds_per_tree']:.3g} s per tree, "
             f"{small['rows']:,} rows" + ("; the plain run built one tree: its time per tree is its first tree's"
                                          if plain["includes_startup"] else "") + ")",
             f"fraction_of_crypto_floor: {data['fraction_of_crypto_floor']:.2f} (fast, {runs['fast']['rows']:,} rows: "
             f"{runs['fast']['training_s']:.3g} s of training vs a floor of {runs['fast']['floor']['floor_s']:.3g} s; "
             f"the trees after the first: {runs['fast']['steady_fraction_of_floor']:.2f}; goal <= 1.25)"]
    if data.get("small_table_seconds_per_tree") is not None:
        r = runs["fast_small_table"]
        lines.append(f"small_table_seconds_per_tree: {data['small_table_seconds_per_tree']:.3g} s ({r['train_rows']:,} "
                     f"training rows, {r['trees']} trees of depth {data['config']['small_depth']}; goal <= 1 s)")
    if data["ratio_to_xgboost"] is not None:
        x = data["xgboost"]
        lines.append(f"ratio_to_xgboost: {data['ratio_to_xgboost']:,.0f}x ({runs['fast']['training_s']:.3g} s vs "
                     f"XGBoost {x['fit_s']:.3g} s for {x['trees']} trees)")
        lines.append(f"auc_gap_vs_xgboost: {data['auc_gap_vs_xgboost']:+.4f} (XGBoost {x['auc']:.4f}, "
                     f"SecureBoost {runs['fast']['auc']:.4f})")
    else:
        lines.append(f"XGBoost: {data['xgboost']['status']}")
    lines.append(f"rates per core, {rates['key_bits']}-bit n: encrypt (CRT) {rates['encrypt_per_s']:,.0f}/s"
                 + (f" ({rates['encrypt_per_s_with_workers']:,.0f}/s with {rates['workers']} workers)"
                    if "encrypt_per_s_with_workers" in rates else "")
                 + f", multiply mod n^2 {rates['multiply_per_s']:,.0f}/s, square {rates['square_per_s']:,.0f}/s, "
                   f"decrypt (CRT) {rates['decrypt_per_s']:,.0f}/s; floor over {m['cores_used']} core(s)")
    return lines


def floor_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """The floor of each encrypted run: operation counts and their one-core seconds."""
    out = []
    for key in RUN_ORDER:
        r = data["runs"].get(key)
        if r is None or "floor" not in r:
            continue
        ops, terms = r["operations"], r["floor"]["terms_one_core_s"]
        out.append([r["label"], f"{ops['encryptions']:,}", f"{ops['homomorphic_additions']:,}",
                    f"{ops['compress_squarings']:,}", f"{ops['decryptions']:,}", f"{terms['encrypt']:.3g}",
                    f"{terms['multiply']:.3g}", f"{terms['decrypt']:.3g}", str(r["floor"]["cores"]),
                    f"{r['floor']['floor_s']:.3g}"])
    return out


FLOOR_COLUMNS = ["configuration", "encryptions", "homomorphic additions", "compress squarings", "decryptions",
                 "encrypt (s, 1 core)", "multiply (s, 1 core)", "decrypt (s, 1 core)", "cores", "floor (s)"]


def figures(data: Mapping[str, Any]) -> list[Any]:
    """``secureboost.*`` figures for ``securevfl bench`` (trees are the repetitions of a time per tree)."""
    from securevfl.bench.timing import HIGHER, Figure

    runs = data["runs"]
    out = []
    for key in ("fast", "fast_at_plain_rows", "plain_secureboost"):
        r = runs[key]
        samples = tuple(r["tree_s"][1:] if len(r["tree_s"]) > 1 else r["tree_s"])
        out.append(Figure(f"secureboost.{key}.tree_s", "s", samples, note=f"{r['rows']:,} rows, time per tree"))
    out += [Figure("secureboost.fast.floor_tree_s", "s", (runs["fast"]["floor"]["per_tree_s"],),
                   note="crypto floor per tree"),
            Figure("secureboost.speedup_vs_plain_secureboost", "x", (data["speedup_vs_plain_secureboost"],), HIGHER),
            Figure("secureboost.fraction_of_crypto_floor", "x", (data["fraction_of_crypto_floor"],),
                   note="time per tree / crypto floor per tree (goal <= 1.25)"),
            Figure("secureboost.fast.auc", "", (runs["fast"]["auc"],), HIGHER)]
    if data["ratio_to_xgboost"] is not None:
        out += [Figure("secureboost.ratio_to_xgboost", "x", (data["ratio_to_xgboost"],)),
                Figure("secureboost.xgboost.auc", "", (data["xgboost"]["auc"],), HIGHER)]
    return out


def section(data: Mapping[str, Any]) -> Any:
    """The report section: the configurations with their split, the floor, the four ratios."""
    from securevfl.bench.results import Section, Table

    fast = data["runs"]["fast"]
    s = Section("secureboost", f"4c. SecureBoost training ({fast['rows']:,} generated rows, 2 parties, "
                               f"{data['machine']['key_bits']}-bit Paillier)", text=__doc__ or "")
    t = Table("Configurations: time per tree, and the training's split per tree (s)", list(COLUMNS))
    for row in table_rows(data):
        t.add(*row)
    t.note = SPLIT_NOTE + "; " + data["network_note"]
    s.tables.append(t)
    f = Table("Crypto floor: operations counted in the run at the measured per-core rates", list(FLOOR_COLUMNS))
    for row in floor_rows(data):
        f.add(*row)
    f.note = data["definitions"]["crypto_floor"]
    s.tables.append(f)
    s.notes += summary_lines(data)
    s.data = dict(data)
    return s
