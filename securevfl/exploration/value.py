"""The partner's value, estimated before the real training: a few secure trees with and without each party.

On a seeded sample of the explored rows (the training rows every party holds; a rare class given a
quarter of the sample at least), split into rows to fit and rows to score (stratified), the estimate
trains SecureBoost — the real protocol, Paillier included — with a small budget (``trees`` trees of
depth ``depth``) over every party, over every party but one (for each passive party), and over the
active party alone (in the clear: it holds every column of that model), and scores each on the same
held-out rows. A passive party's value is the AUC it adds to the
rest (every party's AUC minus the AUC without it); the active party alone is the floor. Each
estimate carries what it cost (wall time, crypto time, bytes), so a business owner reads "this
partner adds 0.05 AUC; finding it out cost 30 s and 40 MB".

What each party learns is what SecureBoost's training teaches (docs/secureboost.md): the active
party the split gains, the passive parties the instance space of each node. The rows scored are the
active party's own; no test row is used.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.data import Scenario
from securevfl.errors import ConfigError
from securevfl.seeding import simulation_rng

#: The default budget: trees, depth, and the rows sampled (80 % to fit, 20 % to score).
VALUE_TREES = 20
VALUE_DEPTH = 5
VALUE_ROWS = 8000


@dataclass(frozen=True)
class ValueOptions:
    """The budget of the estimate; ``key_bits`` / ``insecure_allow_small_key`` as SecureBoost's."""

    trees: int = VALUE_TREES
    depth: int = VALUE_DEPTH
    rows: int = VALUE_ROWS
    score_fraction: float = 0.2
    key_bits: int = 2048
    insecure_allow_small_key: bool = False
    workers: int = 1
    seed: int = 0
    #: False: the same trees in the clear (SecureBoost's encrypt=false builds identical ones): for studies only
    encrypt: bool = True

    def __post_init__(self) -> None:
        for name in ("trees", "depth", "rows", "workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"value {name} must be an integer >= 1, got {value!r}")
        if not 0 < self.score_fraction < 1:
            raise ConfigError(f"value score_fraction must be in (0, 1), got {self.score_fraction}")


def _subset(scenario: Scenario, parties: tuple[str, ...], fit: np.ndarray, score: np.ndarray) -> Scenario:
    """``scenario`` restricted to ``parties``, fitting on positions ``fit`` and scoring ``score``."""
    alignment = scenario.alignment
    empty = np.zeros(0, dtype=np.int64)
    sub_alignment = dataclasses.replace(alignment, aligned={p: alignment.aligned[p] for p in parties},
                                        unaligned={p: empty for p in parties}, present={}, cost={})
    return dataclasses.replace(scenario, tables={p: scenario.tables[p] for p in parties}, alignment=sub_alignment,
                               train=np.sort(fit), test=np.sort(score),
                               notes=(*scenario.notes, "partner value estimate"))


def _train(scenario: Scenario, options: ValueOptions, encrypt: bool) -> dict[str, Any]:
    from securevfl.pipeline.train import run_training
    from securevfl.run_config import run_config

    sb = {"trees": options.trees, "max_depth": options.depth, "encrypt": encrypt, "workers": options.workers,
          "key_bits": options.key_bits, "insecure_allow_small_key": options.insecure_allow_small_key}
    config = run_config(method="secureboost", alignment="plaintext", options=sb, seed=options.seed)
    started = time.perf_counter()
    report = run_training(config, scenario=scenario)
    metrics = report.metrics
    auc = metrics.get("auc")
    if auc is None:
        raise ConfigError("the partner-value estimate needs a label of two classes (it compares AUCs)")
    return {"auc": float(auc), "wall_s": time.perf_counter() - started,
            "crypto_s": float(sum(report.cost["crypto_s"].values())), "bytes": int(report.cost["total_bytes"]),
            "parties": list(scenario.tables)}


def sample_rows(scenario: Scenario, options: ValueOptions) -> tuple[np.ndarray, np.ndarray]:
    """The explored positions the estimate fits on and scores, each stratified by class.

    Above ``options.rows`` the rarer class fills at least a quarter of the sample (all its rows where
    it has fewer), as many as a uniform sample would give where that is more; the other class fills
    the rest. An AUC does not depend on the classes' shares, and a rare class (1 % of the rows) would
    otherwise leave a score set of a dozen events, whose AUC varies by more than the gains it is meant
    to tell apart.
    """
    rng = simulation_rng(options.seed, "partner value")
    positions = np.asarray(scenario.train)
    table = scenario.tables[scenario.active]
    assert table.labels is not None
    labels = np.asarray(table.labels)[scenario.alignment.rows(scenario.active, positions)]
    classes = [positions[labels == c] for c in np.unique(labels)]
    if len(positions) > options.rows:
        rare, common = sorted(classes, key=len)[:2] if len(classes) > 1 else (classes[0][:0], classes[0])
        natural = int(round(options.rows * len(rare) / len(positions)))
        take = min(len(rare), max(natural, options.rows // 4))
        classes = [rng.choice(rare, take, replace=False), rng.choice(common, options.rows - take, replace=False)]
    fit, score = [], []
    for members in classes:  # the same share of each class scored
        members = rng.permutation(members)
        n_score = max(1, int(round(options.score_fraction * len(members))))
        score.append(members[:n_score])
        fit.append(members[n_score:])
    return np.concatenate(fit), np.concatenate(score)


def estimate_value(scenario: Scenario, options: ValueOptions | None = None, progress: Any = None) -> dict[str, Any]:
    """Each passive party's AUC gain on a sample of the explored rows; the report's ``value`` section."""
    options = options or ValueOptions()
    if scenario.task != "classification" or len(scenario.classes) != 2:
        raise ConfigError("the partner-value estimate needs a label of two classes (it compares AUCs)")
    fit, score = sample_rows(scenario, options)
    every = scenario.parties
    runs: dict[str, dict[str, Any]] = {}
    plan: list[tuple[str, tuple[str, ...], bool]] = [("all parties", every, options.encrypt),
                                                     ("active only", (scenario.active,), False)]
    if len(scenario.passives) > 1:
        plan[1:1] = [(f"without {p}", tuple(q for q in every if q != p), options.encrypt) for p in scenario.passives]
    for k, (label, members, encrypt) in enumerate(plan):
        if progress is not None:
            progress(f"partner value: {label} ({k + 1}/{len(plan)})")
        runs[label] = _train(_subset(scenario, members, fit, score), options, encrypt)
    every_auc = runs["all parties"]["auc"]
    alone = runs["active only"]["auc"]
    parties: dict[str, dict[str, Any]] = {}
    for p in scenario.passives:
        without = runs[f"without {p}"] if len(scenario.passives) > 1 else runs["active only"]
        parties[p] = {"without": without["auc"], "gain": every_auc - without["auc"],
                      "crypto_s": without["crypto_s"], "bytes": without["bytes"], "wall_s": without["wall_s"]}
    total = {k: sum(r[k] for r in runs.values()) for k in ("wall_s", "crypto_s", "bytes")}
    return {"method": f"secureboost, {options.trees} trees of depth {options.depth}, {options.key_bits}-bit keys",
            "baseline": "the active party alone", "metric": "auc", "rows_fit": int(len(fit)),
            "rows_scored": int(len(score)), "active_only": alone, "all_parties": every_auc,
            "gain_all": every_auc - alone, "parties": parties, "runs": runs, "cost": total,
            "reading": "a passive party's gain is the AUC every party reaches minus the AUC without it, on the "
                       "same held-out sample of the explored rows"}


__all__ = ["VALUE_DEPTH", "VALUE_ROWS", "VALUE_TREES", "ValueOptions", "estimate_value"]
