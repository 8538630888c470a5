"""A party's fitted preprocessing saved as bytes and read back (issue 27): same outputs, no code run on reading.

New rows after the run hold what training never saw (a new category, a blank where training had none,
a date years later): the loaded encoder encodes them exactly as the one that was saved. A payload that
would run code when read (a pickle, a skops file naming another type) is refused before it can.
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import struct
import zipfile

import numpy as np
import pandas as pd
import pytest
from skops import io as skops_io

from securevfl.data.columns import ColumnSpec
from securevfl.data.preprocess import PartyEncoder, fit_party_encoder
from securevfl.errors import ModelError, SecureVFLError
from securevfl.model import preprocessing
from securevfl.model.preprocessing import MAGIC, TRUSTED_TYPES, dump_encoder, load_encoder

SPEC = ColumnSpec(categorical=("code",), dates=("signup",))


def training_frame(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Every column kind: numbers with and without blanks, a text and a datetime date, small and wide categories."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 80, n).astype(float)
    age[rng.random(n) < 0.1] = np.nan
    job = rng.choice(["nurse", "teacher", "driver", "chef"], n).astype(object)
    job[:3] = "pilot"  # a rare level: the "infrequent" column
    job[3:8] = None
    start = pd.Timestamp("2020-01-01")
    return pd.DataFrame({
        "age": age,
        "income": rng.normal(3000, 800, n).round(2),
        "signup": (start + pd.to_timedelta(rng.integers(0, 900, n), "D")).strftime("%Y-%m-%d"),
        "joined": start + pd.to_timedelta(rng.integers(0, 2000, n), "D"),
        "job": job,
        "city": [f"c{c:02d}" for c in rng.integers(0, 40, n)],
        "code": rng.integers(0, 6, n),
        "flag": rng.random(n) < 0.3,
    })


def new_frame() -> pd.DataFrame:
    """Rows scored after the run: unseen levels and dates, blanks in columns that had none in training."""
    return pd.DataFrame({
        "age": [np.nan, 1e6, 40.0, 30.0, np.nan],
        "income": [np.nan, 2500.0, np.nan, -1e9, 3000.0],
        "signup": ["2031-07-04", None, "2019-12-31", "2020-02-29", None],
        "joined": pd.to_datetime(["2040-01-01", None, "2021-05-05", "1999-09-09", None]),
        "job": ["astronaut", None, "nurse", "pilot", "chef"],
        "city": ["c999", None, "c01", "brand-new", "c39"],
        "code": [77, 0, 5, -3, 2],
        "flag": [True, None, False, True, None],
    })


ENCODERS = {
    "one-hot and hashed": (SPEC, True),
    "embedded codes": (ColumnSpec(categorical=("code",), dates=("signup",), embed=True), True),
    "not standardised, no rare level": (ColumnSpec(categorical=("code",), dates=("signup",), min_frequency=1), False),
}


@pytest.fixture(scope="module", params=list(ENCODERS))
def encoder(request) -> PartyEncoder:
    spec, standardize = ENCODERS[request.param]
    return fit_party_encoder(training_frame(), spec, standardize=standardize, where="bank.csv (party bank)")


def _schema_types(blob: bytes) -> set[str]:
    stack = [json.loads(zipfile.ZipFile(io.BytesIO(blob)).read("schema.json"))]
    found = set()
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "__loader__" in node:
                found.add(f"{node['__module__']}.{node['__class__']}")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _split(data: bytes) -> tuple[bytes, bytes]:
    """(magic, length and header) and the skops body of a saved encoder."""
    start = len(MAGIC) + 4
    (size,) = struct.unpack(">I", data[len(MAGIC):start])
    return data[: start + size], data[start + size :]


# ------------------------------------------------------------------ round trip


def test_the_loaded_encoder_encodes_new_rows_exactly_as_the_saved_one(encoder):
    loaded = load_encoder(dump_encoder(encoder), where="bank.model")
    new = new_frame()
    expected = encoder.transform(new)  # never an error for an unseen level, blank or date
    assert expected.shape == (len(new), encoder.width) and np.isfinite(expected).all()
    assert np.array_equal(loaded.transform(new), expected)
    assert np.array_equal(loaded.transform(training_frame()), encoder.transform(training_frame()))


def test_names_summary_and_kinds_are_kept(encoder):
    loaded = load_encoder(dump_encoder(encoder))
    assert loaded.columns == encoder.columns and loaded.kinds == encoder.kinds
    assert loaded.feature_names == encoder.feature_names and loaded.width == encoder.width
    assert loaded.summary == encoder.summary and loaded.where == "bank.csv (party bank)"
    assert {"signup", "joined"} <= set(loaded.summary["dates"]) and "age" in loaded.summary["imputed"]
    assert "age_missing" in loaded.feature_names and "income_missing" not in loaded.feature_names
    if "embedded" in loaded.summary:
        assert loaded.summary["embedded"] == encoder.summary["embedded"] and "city_code" in loaded.feature_names
    else:
        assert loaded.summary["hashed"] == {"city": {"levels": 40, "buckets": 16}}
        assert "city_hash0" in loaded.feature_names


def test_every_column_kind_is_covered_and_needs_exactly_the_trusted_types():
    blobs = [dump_encoder(fit_party_encoder(training_frame(), spec, standardize=standardize))
             for spec, standardize in ENCODERS.values()]
    assert set().union(*(_schema_types(_split(b)[1]) for b in blobs)) == set(TRUSTED_TYPES)
    one_hot = fit_party_encoder(training_frame(), SPEC)
    assert "job_(infrequent)" in one_hot.feature_names and one_hot.summary["hashed"]["city"]["levels"] == 40
    assert set(one_hot.summary["one_hot"]) == {"job", "code", "flag"}
    embedded = fit_party_encoder(training_frame(), ENCODERS["embedded codes"][0])
    assert set(embedded.summary["embedded"]) == {"job", "city", "code", "flag"}
    assert embedded.transform(new_frame())[0, embedded.feature_names.index("job_code")] == 0  # unseen: code 0


def test_a_party_without_columns_round_trips():
    empty = fit_party_encoder(pd.DataFrame({"note": ["a", "b"]}), ColumnSpec(drop=("note",)), where="shop")
    assert empty.transformer is None
    loaded = load_encoder(dump_encoder(empty))
    assert loaded == empty and loaded.transform(new_frame()).shape == (5, 0)


def test_a_summary_that_is_not_json_cannot_be_saved(encoder):
    odd = PartyEncoder(encoder.columns, encoder.kinds, encoder.feature_names, {"rows": np.int64(3), "bad": {1, 2}},
                       encoder.where, encoder.transformer)
    with pytest.raises(ModelError, match=r"summary\['bad'\] is a set, not plain JSON"):
        dump_encoder(odd)


# ------------------------------------------------------------------ payloads that would run code


class Boom:
    """Creates its marker file when built from a saved state: what a hostile payload does on loading."""

    def __init__(self, marker: str):
        self.marker = marker

    def __setstate__(self, state: dict) -> None:
        with open(state["marker"], "w") as handle:
            handle.write("ran")


class PickleBoom:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # unpickling opens (creates) the marker file


BOOM = f"{Boom.__module__}.{Boom.__qualname__}"


def test_a_skops_payload_that_runs_code_is_refused_before_it_runs(encoder, tmp_path):
    live, marker = tmp_path / "live", tmp_path / "marker"
    skops_io.loads(skops_io.dumps(Boom(str(live))), trusted=[BOOM])
    assert live.exists()  # the payload is real: trusting its type runs it
    head, _ = _split(dump_encoder(encoder))
    hidden = copy.deepcopy(encoder.transformer)
    hidden.extra = Boom(str(marker))  # inside a genuine fitted transformer
    for body in (skops_io.dumps(Boom(str(marker))), skops_io.dumps(hidden)):
        with pytest.raises(ModelError, match=rf"^bank\.model: .* holds the type {BOOM}, which"):
            load_encoder(head + body, where="bank.model")
    assert not marker.exists()


@pytest.mark.parametrize("function", ["builtins.eval", "os.system", "builtins.exec", "subprocess.call"])
def test_a_schema_naming_a_dangerous_function_is_refused(function, tmp_path):
    encoder = fit_party_encoder(training_frame(), ENCODERS["embedded codes"][0])  # has a FunctionTransformer
    head, body = _split(dump_encoder(encoder))
    module, name = function.rsplit(".", 1)
    source = zipfile.ZipFile(io.BytesIO(body))
    schema = json.loads(source.read("schema.json"))
    stack, swapped = [schema], 0
    while stack:  # the FunctionTransformer's function becomes ``function``
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("__loader__") == "FunctionNode":
                node["__module__"], node["__class__"], swapped = module, name, swapped + 1
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    assert swapped >= 1  # in the transformers as given and as fitted
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for member in source.namelist():
            target.writestr(member, json.dumps(schema) if member == "schema.json" else source.read(member))
    with pytest.raises(ModelError, match=rf"^bank\.model: .* holds the type {function}, which .*; refusing"):
        load_encoder(head + out.getvalue(), where="bank.model")


def test_a_pickle_is_refused_and_never_unpickled(encoder, tmp_path):
    live, marker = tmp_path / "live", tmp_path / "marker"
    function, args = PickleBoom(str(live)).__reduce__()  # what unpickling the payload would call
    function(*args).close()
    assert live.exists()  # the payload is real (shown without unpickling anything)
    blob = pickle.dumps(PickleBoom(str(marker)))
    head, _ = _split(dump_encoder(encoder))
    with pytest.raises(ModelError, match=r"^x: not a saved securevfl preprocessing"):
        load_encoder(blob, where="x")
    with pytest.raises(ModelError, match=r"^x: the saved preprocessing's transformer is unreadable \(BadZipFile\)"):
        load_encoder(head + blob, where="x")
    with pytest.raises(ModelError):
        load_encoder(MAGIC + struct.pack(">I", len(blob)) + blob, where="x")  # a pickle as the header
    assert not marker.exists()


# ------------------------------------------------------------------ malformed input


def test_truncated_bytes_are_a_model_error(encoder):
    data = dump_encoder(encoder)
    head, _ = _split(data)
    cuts = sorted({0, 1, len(MAGIC), len(MAGIC) + 2, len(MAGIC) + 4, len(head) // 2, len(head) - 1, len(head) + 1,
                   len(head) + 100, (len(head) + len(data)) // 2, len(data) - 30, len(data) - 1})
    for cut in cuts:
        with pytest.raises(ModelError, match=r"^bank\.model: "):
            load_encoder(data[:cut], where="bank.model")


def test_random_and_wrong_bytes_are_a_model_error(encoder):
    rng = np.random.default_rng(1)
    head, body = _split(dump_encoder(encoder))
    header = json.loads(head[len(MAGIC) + 4:])

    def with_header(**changes: object) -> bytes:
        text = json.dumps({**header, **changes}).encode()
        return MAGIC + struct.pack(">I", len(text)) + text + body

    bad = [rng.bytes(2000), MAGIC + rng.bytes(2000), head + rng.bytes(2000), MAGIC + struct.pack(">I", 5) + b"[[[[[",
           MAGIC + struct.pack(">I", 100_000) + b"[" * 100_000, MAGIC + struct.pack(">I", 2) + b"{}",
           with_header(version=2), with_header(columns="age"), with_header(kinds={"age": "numeric"}),
           with_header(feature_names=header["feature_names"][:-1]), with_header(transformer=False),
           with_header(summary=[1]), b"", "text"]
    for data in bad:
        with pytest.raises(ModelError) as error:
            load_encoder(data, where="bank.model")  # type: ignore[arg-type]
        assert str(error.value).startswith("bank.model: ") and "\n" not in str(error.value)
        assert isinstance(error.value, SecureVFLError) and isinstance(error.value, ValueError)


def test_oversized_input_and_header_are_refused_before_parsing(encoder, monkeypatch):
    claim = MAGIC + struct.pack(">I", preprocessing.MAX_HEADER_BYTES + 1)
    with pytest.raises(ModelError, match=r"header claims \d+ bytes, over"):
        load_encoder(claim + b"{}")
    data = dump_encoder(encoder)
    monkeypatch.setattr(preprocessing, "MAX_BYTES", len(data) - 1)
    with pytest.raises(ModelError, match=r"^preprocessing: the saved preprocessing is \d+ bytes, over the limit"):
        load_encoder(data)



def test_parties_loading_their_parts_on_threads_take_turns_in_skops(monkeypatch):
    """numpy parses .npy headers with ast.literal_eval, whose CPython 3.11 state every thread shares.

    Two threads inside the AST constructor at once (a garbage collection whose callback or finalizer yields
    the interpreter lock can switch them there) fail with "SystemError: AST constructor recursion depth
    mismatch": it happened once in a threaded federation of the suite. So skops loads take turns.
    """
    import threading
    import time

    blob = dump_encoder(fit_party_encoder(training_frame(), SPEC))
    real, inside, most = skops_io.loads, [0], [0]
    count = threading.Lock()

    def watched(*args, **kwargs):
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            time.sleep(0.05)  # long enough for every other thread to arrive
            return real(*args, **kwargs)
        finally:
            with count:
                inside[0] -= 1

    monkeypatch.setattr(preprocessing.skops_io, "loads", watched)
    threads = [threading.Thread(target=load_encoder, args=(blob,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most[0] == 1
