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
    runs: dict[str, dict[str, Any]] = {}
    plan = value_plan(scenario.active, scenario.passives, options.encrypt)
    for k, (label, members, encrypt) in enumerate(plan):
        if progress is not None:
            progress(f"partner value: {label} ({k + 1}/{len(plan)})")
        runs[label] = _train(_subset(scenario, members, fit, score), options, encrypt)
    return value_summary(scenario.passives, runs, options, fit, score)


def value_plan(active: str, passives: tuple[str, ...], encrypt: bool = True) -> list[tuple[str, tuple[str, ...], bool]]:
    """The trainings of the estimate, in order: every party, every party but each passive one, the active one alone."""
    every = (active, *passives)
    plan: list[tuple[str, tuple[str, ...], bool]] = [("all parties", every, encrypt), ("active only", (active,), False)]
    if len(passives) > 1:
        plan[1:1] = [(f"without {p}", tuple(q for q in every if q != p), encrypt) for p in passives]
    return plan


def value_summary(passives: tuple[str, ...], runs: dict[str, dict[str, Any]], options: ValueOptions,
                  fit: np.ndarray, score: np.ndarray) -> dict[str, Any]:
    """The report's ``value`` section from the trainings' AUCs and costs."""
    every_auc = runs["all parties"]["auc"]
    alone = runs["active only"]["auc"]
    parties: dict[str, dict[str, Any]] = {}
    for p in passives:
        without = runs[f"without {p}"] if len(passives) > 1 else runs["active only"]
        parties[p] = {"without": without["auc"], "gain": every_auc - without["auc"],
                      "crypto_s": without["crypto_s"], "bytes": without["bytes"], "wall_s": without["wall_s"]}
    total = {k: sum(r[k] for r in runs.values()) for k in ("wall_s", "crypto_s", "bytes")}
    return {"method": f"secureboost, {options.trees} trees of depth {options.depth}, {options.key_bits}-bit keys",
            "baseline": "the active party alone", "metric": "auc", "rows_fit": int(len(fit)),
            "rows_scored": int(len(score)), "active_only": alone, "all_parties": every_auc,
            "gain_all": every_auc - alone, "parties": parties, "runs": runs, "cost": total,
            "reading": "a passive party's gain is the AUC every party reaches minus the AUC without it, on the "
                       "same held-out sample of the explored rows"}


# ----------------------------------------------------------------------------------------------- deployed

SAMPLE = "explore.value.sample"


def _check_positions(value: Any, size: int, limit: int, sender: str) -> np.ndarray:
    from securevfl.errors import ProtocolError

    if (not isinstance(value, np.ndarray) or value.dtype != np.int64 or value.ndim != 1 or len(value) > limit
            or (len(value) and (value.min() < 0 or value.max() >= size)) or len(np.unique(value)) != len(value)):
        raise ProtocolError(f"{sender} sent value-estimate rows that are not distinct positions of the {size} "
                            "agreed ones")
    return value


def deployed_value_role(scenario: Scenario, options: ValueOptions | None, allow_small_key: bool = False) -> Any:
    """The active party tells every passive party whether an estimate follows, and on which rows with which budget.

    ``options``: the active party's (None: no estimate); a passive party's role ignores it and reads
    the active party's choice, checked: positions distinct and among the explored ones, the budget
    within the options' bounds, a key size its own rules accept.
    """
    from securevfl.errors import ProtocolError

    def role(ctx: Any) -> Any:
        if ctx.is_active:
            if options is None:
                ctx.broadcast(ctx.passives, SAMPLE, None)
                return None
            fit, score = sample_rows(scenario, options)
            ctx.broadcast(ctx.passives, SAMPLE, {"fit": fit.astype(np.int64), "score": score.astype(np.int64),
                                                 "trees": options.trees, "depth": options.depth,
                                                 "key_bits": options.key_bits, "seed": options.seed})
            return fit, score, options
        received = ctx.recv(ctx.active, SAMPLE)
        if received is None:
            return None
        if not isinstance(received, dict) or set(received) != {"fit", "score", "trees", "depth", "key_bits", "seed"} \
                or not all(type(received[k]) is int for k in ("trees", "depth", "key_bits", "seed")):
            raise ProtocolError(f"{ctx.active} sent a malformed {SAMPLE}")
        message: dict[str, Any] = received
        size = len(scenario.train) + len(scenario.test)  # the agreed positions
        fit = _check_positions(message["fit"], size, VALUE_ROWS_LIMIT, ctx.active)
        score = _check_positions(message["score"], size, VALUE_ROWS_LIMIT, ctx.active)
        if np.intersect1d(fit, score).size or not np.isin(np.concatenate([fit, score]), scenario.train).all():
            raise ProtocolError(f"{ctx.active} sent value-estimate rows to fit that it also scores, or test rows")
        try:
            from securevfl.privacy.paillier.registry import check_backend_and_key

            check_backend_and_key("fast", message["key_bits"], allow_small_key)  # this party's own rule
            chosen = ValueOptions(trees=message["trees"], depth=message["depth"], rows=max(100, len(fit) + len(score)),
                                  key_bits=message["key_bits"], seed=message["seed"],
                                  insecure_allow_small_key=allow_small_key)
        except ConfigError as exc:
            raise ProtocolError(f"{ctx.active} asked for a value estimate this party refuses: {exc}") from None
        if not (chosen.trees <= 1000 and chosen.depth <= 16):
            raise ProtocolError(f"{ctx.active} asked for {chosen.trees} trees of depth {chosen.depth}")
        return fit, score, chosen

    return role


#: The most rows a passive party accepts to fit and score in a value estimate.
VALUE_ROWS_LIMIT = 10_000_000


def deployed_estimate(session: Any, scenario: Scenario, sample: tuple[np.ndarray, np.ndarray, ValueOptions],
                      seed: int, progress: Any = None) -> dict[str, Any] | None:
    """Run the estimate's trainings over the links; the active party returns the ``value`` section.

    Each training runs the parties it names (the others wait for the next); the active party alone
    trains in its own process, in the clear.
    """
    from securevfl.eval import task_metrics
    from securevfl.methods import create_method
    from securevfl.run_config import run_config

    fit, score, options = sample
    active, passives = scenario.active, scenario.passives
    plan = value_plan(active, passives)
    runs: dict[str, dict[str, Any]] = {}
    for k, (label, members, encrypt) in enumerate(plan):
        if session.name not in members:
            continue
        if progress is not None:
            progress(f"partner value: {label} ({k + 1}/{len(plan)})")
        if members == (active,):
            runs[label] = _train(_subset(scenario, members, fit, score), options, encrypt)
            continue
        sb = {"trees": options.trees, "max_depth": options.depth, "key_bits": options.key_bits,
              "insecure_allow_small_key": options.insecure_allow_small_key, "workers": options.workers}
        config = run_config(method="secureboost", options=sb, seed=options.seed)
        method = create_method("secureboost", config.train)
        roles = method.party_roles(_subset(scenario, members, fit, score))
        started = time.perf_counter()
        outcome = session.execute(roles, seed=seed, check=False, costs=False, parties=members,
                                  passives=tuple(p for p in members if p != active), finish=False)
        if session.kind == "active":
            snap = outcome.snapshots[session.name]
            auc = task_metrics("classification", outcome.value.y_true, outcome.value.scores).get("auc")
            runs[label] = {"auc": float(auc or 0.0), "wall_s": time.perf_counter() - started,
                           "crypto_s": float(sum(snap.crypto_s.values())), "bytes": int(sum(snap.bytes.values())),
                           "parties": list(members), "costs": "the active party's own (crypto, bytes it sent)"}
    if session.kind != "active":
        return None
    return value_summary(passives, runs, options, fit, score)


__all__ = ["VALUE_DEPTH", "VALUE_ROWS", "VALUE_TREES", "ValueOptions", "deployed_estimate", "deployed_value_role",
           "estimate_value", "sample_rows", "value_plan", "value_summary"]
