"""Breast Cancer Wisconsin cut into organisations' own tables (the bank holds the label), for the tests.

Each organisation's table has the ``customer_id`` column and its own feature columns; the bank's
also ``churn`` ("yes" / "no"). Each misses about ``1 - keep`` of the customers (its own draw), so PSI
has something to find. ``categories`` adds a text column of three levels to the named party.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer

#: Three organisations and their columns of the 30 (by position).
THREE = {"bank": slice(0, 5), "shop": slice(5, 18), "clinic": slice(18, 30)}


def organisation_frames(seed: int, *, split: Mapping[str, slice] = THREE, keep: float = 0.9,
                        categories: Mapping[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """Every organisation's table (``categories``: party -> name of a text column to add)."""
    data = load_breast_cancer(as_frame=True)
    ids = [f"c{i:04d}" for i in range(len(data.frame))]
    columns = list(data.data.columns)
    rng = np.random.default_rng(seed)
    frames = {}
    for name, cols in split.items():
        frame = data.data[columns[cols]].copy()
        frame.insert(0, "customer_id", ids)
        if name in (categories or {}):
            frame[(categories or {})[name]] = rng.choice(["gold", "silver", "bronze"], len(frame))
        if name == "bank":
            frame["churn"] = np.where(data.target == 1, "yes", "no")
        frames[name] = frame[rng.random(len(frame)) < keep]
    return frames


def write_tables(frames: Mapping[str, pd.DataFrame], directory: Path, prefix: str = "") -> dict[str, Path]:
    """Each frame as ``directory/<prefix><party>.csv``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, frame in frames.items():
        paths[name] = directory / f"{prefix}{name}.csv"
        frame.to_csv(paths[name], index=False)
    return paths


def partial_tables(directory: Path, seed: int = 5, keep: float = 0.7) -> dict[str, Path]:
    """Partial coverage (issue 44): the bank holds every customer, the shop and the clinic each about ``keep``."""
    frames = organisation_frames(seed, keep=keep)
    frames["bank"] = organisation_frames(seed, keep=1.0)["bank"]
    return write_tables(frames, directory)


def who_holds(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """Per party (in ``files``' order), the customer IDs its file holds."""
    return {p: set(pd.read_csv(f).customer_id) for p, f in files.items()}


def pattern_of(holders: Mapping[str, set[str]], customer: str) -> str:
    """The parties that hold ``customer``, joined by ``+`` in ``holders``' order: what the ``parties`` column says."""
    return "+".join(p for p, ids in holders.items() if customer in ids)


def summed_pattern(holders, customer: str, active: str = "bank") -> str:
    """EASTER's ``parties`` of a row (the active party contributing): a passive part is summed only with another."""
    passives = [p for p, ids in holders.items() if p != active and customer in ids]
    return "+".join([active, *passives]) if len(passives) >= 2 else active


def scored_held_out(report, model: Path, files: Mapping[str, Path], directory: Path):
    """The saved model's predictions of the run's held-out rows (cut from the parties' files, scored 29 rows per
    exchange), checked to equal the run's test predictions to 1e-6: the oracle, on every coverage pattern."""
    import securevfl

    held = report.test_predictions
    frame = securevfl.predict(model, data=rows_of(files, directory, held["ids"]), device="cpu", exchange_rows=29)
    scores = dict(zip(held["ids"], held["scores"][:, 1], strict=True))
    got = frame.set_index("customer_id").proba_yes
    np.testing.assert_allclose(got.loc[list(scores)].to_numpy(), list(scores.values()), atol=1e-6, rtol=0)
    return frame


def training_and_new_tables(directory: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """(training files, new files) of three organisations: the new rows are a quarter of the customers, none
    trained on, each new file in a shuffled order of its own."""
    frames = organisation_frames(3, keep=0.92)
    new_ids = set(f"c{i:04d}" for i in np.random.default_rng(4).choice(569, 142, replace=False))
    train = write_tables({p: f[~f.customer_id.isin(new_ids)] for p, f in frames.items()}, directory)
    new = write_tables({p: f[f.customer_id.isin(new_ids)].sample(frac=1.0, random_state=1)
                        for p, f in frames.items()}, directory, prefix="new_")
    return train, new


def rows_of(files: Mapping[str, Path], directory: Path, ids, parties=None) -> dict[str, str]:
    """Each party's file cut to ``ids``, in a shuffled order of its own, as new files."""
    keep = set(ids)
    frames = {}
    for i, p in enumerate(parties or files):
        frame = pd.read_csv(files[p])
        frames[p] = frame[frame.customer_id.isin(keep)].sample(frac=1.0, random_state=i)
    return {p: str(path) for p, path in write_tables(frames, directory).items()}


def probabilities(frame: pd.DataFrame) -> np.ndarray:
    """The ``proba_<class>`` columns of a predictions frame, as a matrix."""
    return frame[[c for c in frame.columns if c.startswith("proba_")]].to_numpy()
