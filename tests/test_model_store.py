"""The storage layer of saved model parts (securevfl.model.store): round trip, refusals, atomicity."""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from securevfl.errors import ModelError, SecureVFLError
from securevfl.model import store
from securevfl.model.store import (
    CARD,
    MANIFEST,
    PartManifest,
    check_same_model,
    flatten_state,
    list_parts,
    model_card,
    read_part,
    tensors_from_bytes,
    tensors_to_bytes,
    unflatten_state,
    write_part,
)

JOB = "3f2a" + "0" * 60
PARTIES = {"shop": "active", "bank": "passive"}


def manifest(party: str = "bank", **changes: object) -> PartManifest:
    role = PARTIES.get(party, "passive")
    base: dict[str, object] = dict(
        party=party, role=role, method="splitnn", job_fingerprint=JOB, parties=dict(PARTIES),
        task="classification", schema={"id": "customer_id", "columns": {"age": "numeric", "city": "categorical"}},
        options={"epochs": 3, "hidden": (16, 8)}, privacy={"secagg": False, "defenses": {}},
        classes=["no", "yes"] if role == "active" else [],
    )
    base.update(changes)
    return PartManifest(**base)  # type: ignore[arg-type]


def weights() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return flatten_state({
        "bottom": {"layers.0.weight": torch.randn(4, 3, generator=gen), "layers.0.bias": torch.zeros(4)},
        "top": {"weight": torch.randn(2, 4, generator=gen, dtype=torch.float64),
                "steps": torch.tensor([7], dtype=torch.int64)},
    })


def files() -> dict[str, bytes]:
    return {"weights.safetensors": tensors_to_bytes(weights()), "preprocess.json": b'{"scaler": [1.0, 2.0]}'}


REPORT = {"metrics": {"accuracy": 0.875, "auc": 0.91, "per_party": {"shop": {"x": 1.0}}},
          "parties": {"shop": {"rows": 100, "features": 5, "aligned": 80},
                      "bank": {"rows": 90, "features": 3, "aligned": 80}},
          "notes": ["bank learns only the gradients of its embeddings"]}


def saved(tmp_path: Path, party: str = "bank", **changes: object) -> Path:
    return write_part(tmp_path, manifest(party, **changes), files(), report=REPORT)


# -- round trip -----------------------------------------------------------------------------


def test_a_part_round_trips_exactly(tmp_path: Path) -> None:
    folder = saved(tmp_path)
    assert folder == tmp_path / "bank"
    assert sorted(os.listdir(folder)) == sorted([MANIFEST, CARD, "weights.safetensors", "preprocess.json"])
    part = read_part(tmp_path, "bank", job_fingerprint=JOB, method="splitnn")
    assert part.files == files()
    assert part.path == folder
    expected = replace(manifest(), files=part.manifest.files, created=part.manifest.created)
    assert part.manifest == expected
    assert part.manifest.options["hidden"] == [16, 8]  # stored as JSON: tuples become lists
    assert part.manifest.securevfl_version and part.manifest.torch_version == torch.__version__
    assert part.manifest.created.endswith("+00:00")
    loaded = tensors_from_bytes(part.files["weights.safetensors"], "weights.safetensors")
    original = weights()
    assert loaded.keys() == original.keys()
    for name, tensor in original.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor)
    modules = unflatten_state(loaded)
    assert set(modules) == {"bottom", "top"} and set(modules["bottom"]) == {"layers.0.weight", "layers.0.bias"}
    assert list(tmp_path.iterdir()) == [folder]  # no partial folder left behind


def test_manifest_json_round_trip_and_strict_fields() -> None:
    m = replace(manifest("shop"), created="2025-01-01T00:00:00+00:00", files={"w.safetensors": "a" * 64})
    assert PartManifest.from_json(m.to_json(), "m") == m
    raw = json.loads(m.to_json())
    with pytest.raises(ModelError, match=r"m: unknown manifest field\(s\) 'surprise'"):
        PartManifest.from_json(json.dumps({**raw, "surprise": 1}).encode(), "m")
    with pytest.raises(ModelError, match="m: manifest lacks field"):
        PartManifest.from_json(json.dumps({k: v for k, v in raw.items() if k != "schema"}).encode(), "m")
    with pytest.raises(ModelError, match="m: field 'role'"):
        PartManifest.from_json(json.dumps({**raw, "role": "boss"}).encode(), "m")
    with pytest.raises(ModelError, match="m: not a valid manifest"):
        PartManifest.from_json(b"[" * 100_000, "m")
    with pytest.raises(ModelError, match="more than the"):
        PartManifest.from_json(b" " * (store.MAX_MANIFEST_BYTES + 1), "m")


def test_manifest_construction_is_validated() -> None:
    with pytest.raises(ModelError, match="'classes' must be empty at a passive party"):
        manifest("bank", classes=["a"])
    with pytest.raises(ModelError, match="'classes' is empty at the active party"):
        manifest("shop", classes=[])
    with pytest.raises(ModelError, match="must list bank as active"):
        manifest("bank", role="active", parties={"bank": "passive", "shop": "active"})
    with pytest.raises(ModelError, match="job_fingerprint"):
        manifest(job_fingerprint="not-hex")
    with pytest.raises(ModelError, match="target_scale"):
        manifest("bank", target_scale={"mean": 0.0, "std": 1.0})
    with pytest.raises(ModelError, match="'options' is not JSON data"):
        manifest(options={"f": object()})
    ok = manifest("shop", task="regression", classes=[], target_scale={"mean": 2.5, "std": 0.5})
    assert ok.target_scale == {"mean": 2.5, "std": 0.5}
    assert isinstance(ModelError("x"), SecureVFLError) and isinstance(ModelError("x"), ValueError)


def test_flatten_refuses_a_dotted_module_and_unflatten_splits_on_the_first_dot() -> None:
    with pytest.raises(ModelError, match="without '.'"):
        flatten_state({"a.b": {"w": torch.zeros(1)}})
    assert set(unflatten_state({"m.a.b.c": torch.zeros(1)})["m"]) == {"a.b.c"}
    with pytest.raises(ModelError, match="not named 'module.parameter'"):
        unflatten_state({"nodot": torch.zeros(1)}, "w.safetensors")


def test_the_card_says_what_the_model_is(tmp_path: Path) -> None:
    folder = write_part(tmp_path, manifest("shop", extra={"learns": "shop learns the bank's embeddings."}), files(),
                        report=REPORT)
    card = (folder / CARD).read_text()
    part = read_part(tmp_path, "shop")
    for text in ("# securevfl model part: shop (active)", "splitnn", "bank (passive)", "no, yes",
                 "customer_id", "| accuracy | 0.8750 |", "| bank | 90 | 3 | 80 |", "shop learns the bank's",
                 "bank learns only the gradients", part.manifest.created, part.manifest.files["preprocess.json"],
                 "privacy secagg: false"):
        assert text in card, text
    assert model_card(part.manifest, None).startswith("# securevfl model part: shop")
    odd = model_card(replace(part.manifest, classes=["a|b", "c"]), None)
    assert "| classes (output order) | a\\|b, c |" in odd


# -- refusals -------------------------------------------------------------------------------


def test_a_tampered_file_is_refused(tmp_path: Path) -> None:
    folder = saved(tmp_path)
    path = folder / "weights.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"bank/weights\.safetensors does not match its SHA-256"):
        read_part(tmp_path, "bank")


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    folder = saved(tmp_path)
    path = folder / "preprocess.json"
    path.write_bytes(path.read_bytes()[:5])
    with pytest.raises(ModelError, match=r"preprocess\.json does not match"):
        read_part(tmp_path, "bank")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    (saved(tmp_path) / "preprocess.json").unlink()
    with pytest.raises(ModelError, match=r"preprocess\.json is missing"):
        read_part(tmp_path, "bank")


def test_an_unlisted_file_is_refused(tmp_path: Path) -> None:
    (saved(tmp_path) / "extra.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="does not list: extra.bin"):
        read_part(tmp_path, "bank")


def test_a_file_over_the_bound_is_refused_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved(tmp_path)
    monkeypatch.setattr(store, "MAX_FILE_BYTES", 10)
    with pytest.raises(ModelError, match=r"bank/\w+\.\w+ is [\d,]+ bytes, more than the 10 allowed"):
        read_part(tmp_path, "bank")


def test_a_listed_file_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    folder = saved(tmp_path)
    (tmp_path / "elsewhere.json").write_bytes((folder / "preprocess.json").read_bytes())
    (folder / "preprocess.json").unlink()
    (folder / "preprocess.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ModelError, match=r"preprocess\.json is not a regular file"):
        read_part(tmp_path, "bank")


def test_a_part_copied_from_another_party_is_refused(tmp_path: Path) -> None:
    saved(tmp_path, "shop")
    os.rename(tmp_path / "shop", tmp_path / "bank")
    with pytest.raises(ModelError, match="is the part of shop, not of bank"):
        read_part(tmp_path, "bank")
    with pytest.raises(ModelError, match="is the part of shop, not of bank"):
        list_parts(tmp_path)


def test_a_part_of_another_job_or_method_is_refused(tmp_path: Path) -> None:
    saved(tmp_path)
    with pytest.raises(ModelError, match="saved by job 3f2a00000000…, not this job 999999999999…"):
        read_part(tmp_path, "bank", job_fingerprint="9" * 64)
    with pytest.raises(ModelError, match="is a splitnn model, not easter"):
        read_part(tmp_path, "bank", method="easter")


def test_an_incompatible_format_version_is_refused(tmp_path: Path) -> None:
    folder = saved(tmp_path)
    raw = json.loads((folder / MANIFEST).read_bytes())
    raw["format_version"] = 2
    raw["future_field"] = "ignored: the version is checked first"
    (folder / MANIFEST).write_text(json.dumps(raw))
    with pytest.raises(ModelError, match=r"saved by an incompatible securevfl \(format 2, this reads 1\)"):
        read_part(tmp_path, "bank")


def test_a_missing_part_names_the_parties_present(tmp_path: Path) -> None:
    saved(tmp_path, "shop")
    with pytest.raises(ModelError, match=r"no part for bank in .* \(parties saved: shop\)"):
        read_part(tmp_path, "bank")
    with pytest.raises(ModelError, match="no party saved there"):
        read_part(tmp_path / "nowhere", "bank")


def test_an_existing_part_is_kept_unless_overwrite(tmp_path: Path) -> None:
    saved(tmp_path)
    before = read_part(tmp_path, "bank")
    with pytest.raises(ModelError, match=r"bank already holds a model \(splitnn, job 3f2a0000…, created .*\); "
                                         "pass --overwrite-model to replace it"):
        saved(tmp_path, options={"epochs": 9})
    assert read_part(tmp_path, "bank") == before
    write_part(tmp_path, manifest(options={"epochs": 9}), {"only.bin": b"new"}, overwrite=True)
    after = read_part(tmp_path, "bank")
    assert after.manifest.options == {"epochs": 9} and after.files == {"only.bin": b"new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]  # the old part is gone, no leftovers


def test_a_folder_that_is_not_a_part_is_never_replaced(tmp_path: Path) -> None:
    (tmp_path / "bank").mkdir()
    (tmp_path / "bank" / "epoch-0001.pt").write_bytes(b"checkpoint")
    with pytest.raises(ModelError, match="holds no saved model"):
        write_part(tmp_path, manifest(), files(), overwrite=True)
    assert (tmp_path / "bank" / "epoch-0001.pt").read_bytes() == b"checkpoint"
    (tmp_path / "shop").mkdir()  # an empty folder is taken over
    write_part(tmp_path, manifest("shop"), files())
    assert read_part(tmp_path, "shop").files == files()


def test_bad_file_and_party_names_are_refused(tmp_path: Path) -> None:
    for name in ("../evil", "a/b", ".hidden", "", MANIFEST, "model.md", "x" * 200):
        with pytest.raises(ModelError, match="cannot save the part of bank"):
            write_part(tmp_path, manifest(), {name: b"x"})
    with pytest.raises(ValueError, match="party"):
        read_part(tmp_path, "../bank")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", [False, True])
def test_a_write_failing_midway_leaves_nothing_half_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           existing: bool) -> None:
    if existing:
        saved(tmp_path)
        before = read_part(tmp_path, "bank")
    real = store._write_new
    calls = []

    def failing(path: Path, data: bytes) -> None:
        calls.append(path.name)
        if len(calls) == 2:
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(store, "_write_new", failing)
    with pytest.raises(OSError, match="disk full"):
        write_part(tmp_path, manifest(options={"epochs": 99}), files(), overwrite=True)
    assert len(calls) == 2
    if existing:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]
        assert read_part(tmp_path, "bank") == before
    else:
        assert list(tmp_path.iterdir()) == []


def test_a_failed_swap_restores_the_old_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved(tmp_path)
    before = read_part(tmp_path, "bank")
    real = os.rename

    def rename(src: object, dst: object) -> None:
        if ".partial-" in str(src):
            raise OSError("rename failed")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(store.os, "rename", rename)
    with pytest.raises(OSError, match="rename failed"):
        write_part(tmp_path, manifest(options={"epochs": 99}), files(), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank"]
    assert read_part(tmp_path, "bank") == before


# -- weights that cannot run code -----------------------------------------------------------


def test_malformed_safetensors_are_refused() -> None:
    good = tensors_to_bytes({"w": torch.ones(3)})
    header_length = int.from_bytes(good[:8], "little")
    bad_header = good[:8] + b"[" + good[9:]  # the JSON header no longer parses
    for data in (b"", b"short", (10**12).to_bytes(8, "little") + b"{}", bad_header, good[: 8 + header_length + 3]):
        with pytest.raises(ModelError, match="w.safetensors is not a valid safetensors file"):
            tensors_from_bytes(data, "w.safetensors")


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.path, "w"))  # unpickling this would create the marker file


def test_a_pickle_renamed_to_safetensors_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    payload = pickle.dumps(_Marker(str(marker)))
    torch_payload = tmp_path / "model.pt"
    torch.save({"w": _Marker(str(marker))}, torch_payload)
    assert not marker.exists()
    for data in (payload, torch_payload.read_bytes()):
        with pytest.raises(ModelError, match="not a valid safetensors file"):
            tensors_from_bytes(data, "weights.safetensors")
    folder = write_part(tmp_path / "model", manifest(), {"weights.safetensors": payload})
    part = read_part(tmp_path / "model", "bank")  # the digest matches: it is what was saved
    with pytest.raises(ModelError, match="not a valid safetensors file"):
        tensors_from_bytes(part.files["weights.safetensors"], str(folder / "weights.safetensors"))
    assert not marker.exists()


def test_shared_and_non_contiguous_tensors_are_saved() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    data = tensors_to_bytes({"a": base, "tied": base, "t": base.t()})
    out = tensors_from_bytes(data, "w")
    assert torch.equal(out["tied"], base) and torch.equal(out["t"], base.t())
    with pytest.raises(ModelError, match="not a torch.Tensor"):
        tensors_to_bytes({"x": [1, 2]})  # type: ignore[dict-item]


# -- several parts --------------------------------------------------------------------------


def test_list_parts_and_check_same_model(tmp_path: Path) -> None:
    saved(tmp_path, "shop")
    saved(tmp_path, "bank")
    (tmp_path / ".bank.partial-abc").mkdir()  # hidden leftovers are skipped
    (tmp_path / "notes").mkdir()  # a folder without a manifest too
    parts = list_parts(tmp_path)
    assert sorted(parts) == ["bank", "shop"]
    check_same_model(parts)
    other = replace(parts["bank"], job_fingerprint="ab" * 32)
    with pytest.raises(ModelError, match="parts of bank and shop are not of one model: job_fingerprint"):
        check_same_model({"bank": other, "shop": parts["shop"]})
    with pytest.raises(ModelError, match="method is splitnn at bank, easter at shop"):
        check_same_model({"bank": parts["bank"], "shop": replace(parts["shop"], method="easter")})
    with pytest.raises(ModelError, match="given as shop is of bank"):
        check_same_model({"shop": parts["bank"]})
    assert list_parts(tmp_path / "missing") == {}
