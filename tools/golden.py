"""Golden before/after record of every method and privacy option: prove a refactor changed no result.

``record`` trains every registered method (and each privacy option that applies to it) on small
Breast Cancer organisation tables, in ONE process through the Python API, then scores the held-out
rows with the saved model; a few representative runs are also trained and scored DEPLOYED
(``securevfl launch --insecure`` on loopback, one process per party). Per run it keeps the metrics,
the test predictions (SHA-256 of the scores rounded to 1e-6, plus the first rows), bytes and
messages per link, the other deterministic cost figures, and the scoring predictions' digest.
``compare`` prints every difference between two records and exits 1 if there is any::

    PYTHONPATH=. .venv/bin/python tools/golden.py record --quick --out /tmp/new.json
    PYTHONPATH=. .venv/bin/python tools/golden.py compare tools/golden/baseline-quick.json /tmp/new.json

``--quick`` (about 4 minutes on a shared 2-core machine) covers every method at its default privacy
option plus every secure-aggregation scheme and both SecureBoost encryption settings; the full
record adds the other Paillier backends, key agreements, C-VFL's compressors and entity
resolutions, and more deployed runs. A record notes the commit it was made at (``meta``, which
``compare`` does not compare). What is left out, and why, is in :data:`NOT_REPRODUCIBLE`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' organisation tables
from org_tables import THREE, organisation_frames, rows_of, write_tables  # noqa: E402

FORMAT = 1
PARTIES = ("bank", "shop", "clinic")
#: Every organisation's columns of the 30 (by position); fewshot-vfl's active party holds only the label.
LABEL_ONLY = {"bank": slice(0, 0), "shop": slice(0, 15), "clinic": slice(15, 30)}
PAILLIER_KEY_BITS = 512  # securevfl.privacy.paillier.keys.MIN_TEST_KEY_BITS: a golden run, not a secure one
SMALL_KEY = {"key_bits": PAILLIER_KEY_BITS, "insecure_allow_small_key": True}
SCORE_BATCH = 37  # scoring batches that do not divide the held-out rows

#: Small options per method (as their tests use) so that the record runs in minutes.
APC = {"max_epochs": 2, "active_encoder": "16,32", "passive_encoder": "16,32", "joint_encoder": "32,16",
       "student_encoder": "32,16"}
BASE_OPTIONS: dict[str, dict[str, Any]] = {
    "aggvfl": {"embedding_size": 16}, "easter": {"embedding_size": 16},
    "apcvfl": APC, "apcvfl-ablation": APC, "apcvfl-splitnn": APC,
    "vfedtrans": {"max_epochs": 2, "student_hidden": "32"},
    "fewshot-vfl": {"active_epochs": 5, "mu": 2},
    "hetero-lr": dict(SMALL_KEY),
    "secureboost": {**SMALL_KEY, "trees": 4, "max_depth": 3},
}
SPLITS = {"fewshot-vfl": LABEL_ONLY}
#: Methods whose length is an option of their own (SecureBoost: ``trees``), refusing ``epochs``.
NO_EPOCHS = ("secureboost",)

#: Figures left out of a record because they differ between two runs of the same code.
NOT_REPRODUCIBLE = {
    # wall-clock and CPU timings (keys ending in _s, "timings", "wall_seconds", ...): the machine's load;
    # memory (peak_rss_mb): the allocator and what the process ran before
    "timings": "wall-clock / CPU time, peak memory",
    # Paillier ciphertexts (hetero-lr, secureboost, secagg=paillier) are residues of a fresh random key and
    # fresh obfuscation: the codec writes big integers in as many bytes as they need, so the byte counts of
    # links that carry them vary by a few bytes between runs (messages do not); so do the squarings of
    # SecureBoost's ciphertext compression (operations.compress_squarings: the random exponent's bits).
    # Kept: messages, every other operation count, and the bytes of runs without Paillier.
    "paillier_bytes": "byte counts and compress_squarings of runs sending Paillier ciphertexts (fresh random key)",
    # vfedtrans' FedSVD masks are fresh secrets in every run: its latents, so its metrics and scores, agree
    # only to floating-point rounding (tests/test_deploy_processes.py: 0.02 on the metrics); kept: the
    # messages and bytes per link (fixed-size float arrays).
    "vfedtrans_values": "vfedtrans metrics, predictions, losses and other floats (fresh FedSVD masks)",
}
PAILLIER_METHODS = ("hetero-lr", "secureboost")
TIME_KEYS = ("timings", "wall_seconds", "workers", "executor")
#: Measurements of the machine, not of the run: ``peak_rss_mb`` (the tabnet family's efficiency figures).
MACHINE_KEYS = ("rss", "memory")


@dataclasses.dataclass(frozen=True)
class Run:
    """One golden run: a method, its options, where the tables come from, and how it is run."""

    method: str
    options: Mapping[str, Any]
    variant: str = ""  # the privacy option that distinguishes it, e.g. "secagg=dh"
    deployed: bool = False

    @property
    def name(self) -> str:
        where = "deployed" if self.deployed else "inprocess"
        return f"{where}/{self.method}" + (f"[{self.variant}]" if self.variant else "")


# ------------------------------------------------------------------------------------- which runs

def privacy_variants(method: str, quick: bool) -> list[tuple[str, dict[str, Any]]]:
    """(variant, options) per privacy option that ``method``'s declared options accept.

    Read from the method's options dataclass: ``secagg`` -> every registered aggregation scheme,
    ``encrypt`` (SecureBoost) -> on and off, and in the full record ``backend`` -> every Paillier backend,
    ``key_agreement`` -> every key agreement (with ``secagg=dh``), ``compress`` / ``resolution`` -> their
    declared choices. The first variant is the method's default.
    """
    from securevfl.methods import method_class
    from securevfl.privacy.aggregation.registry import aggregation_names
    from securevfl.privacy.paillier.registry import available_backends
    from securevfl.privacy.primitives.key_agreement import KEY_AGREEMENT_NAMES

    options = method_class(method).Options
    fields = {f.name: f.default for f in dataclasses.fields(options)} if dataclasses.is_dataclass(options) else {}
    variants: list[tuple[str, dict[str, Any]]] = [("", {})]
    if "secagg" in fields:
        default = fields["secagg"]
        variants = [(f"secagg={default}", {"secagg": default})]
        for scheme in aggregation_names():
            if scheme == default:
                continue
            extra = {"secagg.key_bits": PAILLIER_KEY_BITS, "secagg.insecure_allow_small_key": True} \
                if scheme == "paillier" else {}
            variants.append((f"secagg={scheme}", {"secagg": scheme, **extra}))
        if not quick:
            variants += [(f"secagg=dh,key_agreement={k}", {"secagg": "dh", "key_agreement": k})
                         for k in KEY_AGREEMENT_NAMES if k != fields["key_agreement"]]
    if "encrypt" in fields:
        variants.append(("encrypt=false", {"encrypt": False}))
    if not quick and "backend" in fields:
        variants += [(f"backend={b}", {"backend": b}) for b in available_backends() if b != fields["backend"]]
    if not quick and method == "cvfl":
        variants.append(("compress=topk", {"compress": "topk"}))
    if not quick and method == "entity-aug":
        from securevfl.methods.entity_aug.options import RESOLUTIONS

        variants += [(f"resolution={r}", {"resolution": r}) for r in RESOLUTIONS if r != fields["resolution"]]
    return variants


def in_process_runs(quick: bool) -> list[Run]:
    """Every registered method, at each privacy option that applies to it."""
    from securevfl.methods import method_names

    return [Run(m, {**BASE_OPTIONS.get(m, {}), **options}, variant)
            for m in method_names() for variant, options in privacy_variants(m, quick)]


def deployed_runs(quick: bool) -> list[Run]:
    """Representative deployed runs: split learning, secure aggregation, Paillier roles, a standalone model."""
    runs = [Run("splitnn", {}, deployed=True),
            Run("easter", {**BASE_OPTIONS["easter"], "secagg": "dh"}, "secagg=dh", deployed=True),
            Run("hetero-lr", BASE_OPTIONS["hetero-lr"], "arbiter", deployed=True),
            Run("secureboost", BASE_OPTIONS["secureboost"], deployed=True),
            Run("local", {}, deployed=True)]
    if not quick:
        runs += [Run("aggvfl", {**BASE_OPTIONS["aggvfl"], "secagg": "pairwise"}, "secagg=pairwise", deployed=True),
                 Run("apcvfl-splitnn", BASE_OPTIONS["apcvfl-splitnn"], deployed=True),
                 Run("entity-aug", {}, deployed=True)]
    return runs


# ------------------------------------------------------------------------------------- digests

def _round(value: Any) -> Any:
    """Floats to 1e-9 (JSON-stable), recursively; numpy scalars to Python."""
    if isinstance(value, dict):
        return {str(k): _round(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_round(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return round(value, 9)
    return value


def _is_time(key: str) -> bool:
    return (key.endswith("_s") or key in TIME_KEYS or "seconds" in key or key.startswith("wall")
            or any(m in key for m in MACHINE_KEYS))


def without_floats(value: Any) -> Any:
    """``value`` without its floats (recursively)."""
    if isinstance(value, dict):
        return {k: without_floats(v) for k, v in value.items() if not isinstance(v, float)}
    if isinstance(value, list):
        return [without_floats(v) for v in value if not isinstance(v, float)]
    return value


def without_keys(value: Any, part: str) -> Any:
    """``value`` without the keys that contain ``part`` (recursively)."""
    if isinstance(value, dict):
        return {k: without_keys(v, part) for k, v in value.items() if part not in str(k)}
    if isinstance(value, list):
        return [without_keys(v, part) for v in value]
    return value


def without_times(value: Any) -> Any:
    """``value`` without the wall-clock and CPU timings (keys ending in ``_s``, ``timings``, ...) and memory."""
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if not _is_time(str(k))}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


def array_digest(values: Any) -> dict[str, Any]:
    """SHA-256 of an array rounded to 1e-6 (as text), its shape, its last column's sum and its first rows."""
    a = np.asarray(values, dtype=np.float64)
    text = "\n".join(",".join(f"{x:.6f}" for x in np.atleast_1d(row)) for row in a.reshape(len(a), -1))
    text = text.replace("-0.000000", "0.000000")
    return {"shape": list(a.shape), "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "sum": round(float(a.reshape(len(a), -1)[:, -1].sum()), 6), "first": np.round(a[:3], 6).tolist()}


def strings_digest(values: Any) -> str:
    """SHA-256 of the values as lines of text (IDs, class names)."""
    return hashlib.sha256("\n".join(map(str, values)).encode()).hexdigest()


def predictions_digest(frame: pd.DataFrame) -> dict[str, Any]:
    """A predictions frame (ID, prediction, proba_<class>) as digests."""
    proba = [c for c in frame.columns if c.startswith("proba_")]
    out: dict[str, Any] = {"rows": len(frame), "ids_sha256": strings_digest(frame.iloc[:, 0]),
                           "prediction_sha256": strings_digest(frame["prediction"]), "columns": list(frame.columns)}
    if proba:
        out["proba"] = array_digest(frame[proba].to_numpy())
    elif pd.api.types.is_numeric_dtype(frame["prediction"]):
        out["values"] = array_digest(frame["prediction"].to_numpy())
    return out


def report_record(method: str, report: Mapping[str, Any]) -> dict[str, Any]:
    """The reproducible figures of a run report (a dict: ``RunReport.to_dict()`` or a report file)."""
    cost = without_times(report["cost"])
    cost.pop("network_model", None)  # the configured model, not a result
    wire = cost.pop("wire", None)  # deployed: gRPC frames include heartbeats (timing); keep the payload per link
    if isinstance(wire, dict):
        cost["wire_payload_bytes"] = {link: e.get("payload_bytes") for link, e in wire.get("links", {}).items()}
    out = {"metrics": report["metrics"], "cost": cost, "history": without_times(report.get("history", [])),
           "parties": {p: {k: v for k, v in e.items() if k != "preprocessing"} for p, e in report["parties"].items()},
           "extra": without_times(report.get("extra", {}))}
    if method == "vfedtrans":  # NOT_REPRODUCIBLE["vfedtrans_values"]
        out["metrics"] = out["history"] = "(not reproducible: fresh FedSVD masks)"
        out["extra"] = without_floats(out["extra"])
    return out


def _drop_paillier_bytes(method: str, options: Mapping[str, Any], record: dict[str, Any]) -> None:
    """NOT_REPRODUCIBLE["paillier_bytes"]: byte counts of runs that send Paillier ciphertexts."""
    encrypted = (method in PAILLIER_METHODS and options.get("encrypt", True)) or options.get("secagg") == "paillier"
    if not encrypted:
        return
    cost = record["cost"]
    for key in ("total_bytes", "network_path", "simulated_network_s"):
        cost.pop(key, None)
    if "comm" in cost:
        cost["comm"].pop("bytes", None)
    for phase in cost.get("phases", {}).values():
        phase.pop("bytes", None)
    for party in cost.get("per_party", {}).values():
        party.pop("bytes_sent", None)
    cost.pop("wire_payload_bytes", None)
    record["extra"] = without_keys(without_keys(record.get("extra", {}), "bytes"), "squarings")


# ------------------------------------------------------------------------------------- one run

@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Results depend on torch's thread count (float summation order): one thread, as ``launch`` gives a party."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def record_in_process(run: Run, tables: Mapping[str, Path], work: Path, epochs: int) -> dict[str, Any]:
    """Train in one process, keep the report's figures and test predictions, score the held-out rows."""
    import securevfl
    from securevfl.model.scoring import load_model

    model = work / "model"
    with one_torch_thread():
        length = {} if run.method in NO_EPOCHS else {"epochs": epochs}
        report = securevfl.train(run.method, data_files={p: str(tables[p]) for p in PARTIES},
                                 id_column="customer_id", label_column="churn", batch_size=64, seed=0,
                                 device="cpu", options=dict(run.options), model_dir=model, **length)
        out = report_record(run.method, report.to_dict())
        held = report.test_predictions
        if held is not None:
            out["test_predictions"] = {"ids_sha256": strings_digest(held["ids"]),
                                       "scores": array_digest(held["scores"])}
        if model.exists():
            saved = load_model(model)
            parties = tuple(p for p in PARTIES if p in saved.parts)
            ids = held["ids"] if held is not None else pd.read_csv(tables["bank"]).customer_id
            new = rows_of(tables, work / "new", ids, parties)
            frame = securevfl.predict(saved, data=new, id_column="customer_id", device="cpu", exchange_rows=SCORE_BATCH)
            out["scoring"] = {"parties": list(parties), "metrics": frame.attrs.get("metrics", {}),
                              "predictions": predictions_digest(frame)}
    if run.method == "vfedtrans":
        out.pop("test_predictions", None)
        out.get("scoring", {}).pop("metrics", None)
        out.get("scoring", {}).get("predictions", {}).pop("proba", None)
        out.get("scoring", {}).get("predictions", {}).pop("prediction_sha256", None)
    _drop_paillier_bytes(run.method, run.options, out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


HELPERS = {"hetero-lr": ("arbiter",), "vfedtrans": ("keygen", "server")}


def federation_file(directory: Path, run: Run, epochs: int) -> Path:
    """A plaintext loopback federation file for ``run`` (tests/deployed_threads.py's, with data-less helpers)."""
    helpers = HELPERS.get(run.method, ())
    parties = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{_free_port()}"' for p in PARTIES)
    parties += "".join(f'\n[parties.{h}]\naddress = "127.0.0.1:{_free_port()}"\ndata = false' for h in helpers)
    options = "\n".join(f"{k} = {_toml_value(v)}" for k, v in run.options.items())
    length = "" if run.method in NO_EPOCHS else f"epochs = {epochs}\n"
    path = directory / "fed.toml"
    path.write_text(f'[federation]\nactive = "bank"\ninsecure = true\n\n{parties}\n\n'
                    f"[network]\npeer_timeout_s = 20\nheartbeat_s = 0.5\nconnect_timeout_s = 60\n\n"
                    f'[job]\nmethod = "{run.method}"\n{length}batch_size = 64\nseed = 0\n'
                    f'id_column = "customer_id"\nlabel_column = "churn"\n\n[job.options]\n{options}\n')
    return path


def _launch(fed: Path, files: Mapping[str, str | None], *args: str, log: Path) -> None:
    """``securevfl launch FED --insecure`` as a child process (its parties one process each), one torch thread each."""
    data = [a for p, f in files.items() if f is not None for a in ("--data", f"{p}={f}")]
    cmd = [sys.executable, "-m", "securevfl.cli", "launch", str(fed), "--insecure", "--device", "cpu",
           "--timeout", "300", *data, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("a") as out:
        code = subprocess.call(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        raise RuntimeError(f"launch exited {code}: {' '.join(cmd)}\n{log.read_text()[-3000:]}")


def record_deployed(run: Run, tables: Mapping[str, Path], work: Path, epochs: int) -> dict[str, Any]:
    """Train with ``launch`` (a report file), then score the held-out rows with ``launch --predict``."""
    fed = federation_file(work, run, epochs)
    files: dict[str, str | None] = {p: str(tables[p]) for p in PARTIES}
    files.update({h: None for h in HELPERS.get(run.method, ())})
    model, report_path, log = work / "model", work / "report.json", work / "launch.log"
    _launch(fed, files, "--report", str(report_path), "--model-dir", str(model), log=log)
    out = report_record(run.method, json.loads(report_path.read_text()))
    saved = sorted(p.name for p in model.iterdir()) if model.exists() else []
    # a deployed report carries no test predictions: score every row of the training tables (the parties'
    # intersection), the same rows in every record
    if saved == ["bank"]:  # a standalone model: the active party scores alone (launch --predict refuses it)
        import securevfl

        frame = securevfl.predict(model, data={"bank": str(tables["bank"])}, id_column="customer_id",
                                  device="cpu", exchange_rows=SCORE_BATCH)
        out["scoring"] = {"parties": saved, "how": "in one process (standalone)",
                          "metrics": frame.attrs.get("metrics", {}), "predictions": predictions_digest(frame)}
    elif saved:
        predictions = work / "predictions.csv"
        scoring_files = {p: (files[p] if p in saved else None) for p in files}
        _launch(fed, scoring_files, "--predict", "--model-dir", str(model), "--out", str(predictions),
                "--exchange-rows", str(SCORE_BATCH), log=log)
        out["scoring"] = {"parties": saved, "how": "launch --predict",
                          "predictions": predictions_digest(pd.read_csv(predictions))}
    _drop_paillier_bytes(run.method, run.options, out)
    return out


# ------------------------------------------------------------------------------------- record / compare

def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(out: Path, quick: bool, only: str = "") -> dict[str, Any]:
    """Every golden run's figures, written to ``out`` as JSON."""
    import torch

    import securevfl

    epochs = 2
    runs = [r for r in in_process_runs(quick) + deployed_runs(quick) if only in r.name]
    result: dict[str, Any] = {
        "meta": {"format": FORMAT, "commit": _git("rev-parse", "HEAD"),
                 "dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "securevfl")),
                 "quick": quick, "epochs": epochs, "securevfl": securevfl.__version__, "torch": torch.__version__,
                 "python": sys.version.split()[0], "not_recorded": NOT_REPRODUCIBLE, "wall_s": {}},
        "runs": {}}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        root = Path(tmp)
        tables = {name: write_tables(organisation_frames(5, split=split, categories={"shop": "segment"}),
                                     root / "tables" / name)
                  for name, split in (("three", THREE), ("label-only", LABEL_ONLY))}
        for i, run in enumerate(runs):
            work = root / f"run{i}"
            work.mkdir()
            files = tables["label-only" if SPLITS.get(run.method) is LABEL_ONLY else "three"]
            t0 = time.monotonic()
            try:
                recorder = record_deployed if run.deployed else record_in_process
                result["runs"][run.name] = recorder(run, files, work, epochs)
            except Exception as exc:  # noqa: BLE001 - a failing run is a recorded figure too
                result["runs"][run.name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            took = time.monotonic() - t0
            result["meta"]["wall_s"][run.name] = round(took, 1)
            print(f"{run.name}: {took:.1f} s" + (" ERROR" if "error" in result["runs"][run.name] else ""),
                  file=sys.stderr, flush=True)
    result["meta"]["total_wall_s"] = round(time.monotonic() - started, 1)
    result = _round(result)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return result


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": leaf}`` (lists are leaves)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


MISSING = "<missing>"


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """Every (run, key, old, new) that differs between two records' ``runs`` (``meta`` is not compared)."""
    differences = []
    old_runs, new_runs = old.get("runs", {}), new.get("runs", {})
    for run in sorted(set(old_runs) | set(new_runs)):
        if run not in old_runs or run not in new_runs:
            differences.append((run, "(run)", "present" if run in old_runs else MISSING,
                                "present" if run in new_runs else MISSING))
            continue
        a, b = flatten(old_runs[run]), flatten(new_runs[run])
        for key in sorted(set(a) | set(b)):
            if a.get(key, MISSING) != b.get(key, MISSING):
                differences.append((run, key, a.get(key, MISSING), b.get(key, MISSING)))
    return differences


def main(argv: list[str] | None = None) -> int:
    """``record`` or ``compare`` (see the module docstring); the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="run every golden run and write its figures")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--quick", action="store_true",
                     help="every secure-aggregation scheme, 5 deployed runs; no other backends or key agreements")
    rec.add_argument("--only", default="", help="only runs whose name contains this (for debugging)")
    cmp = commands.add_parser("compare", help="print every difference; exit 1 if any")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        result = record(args.out, args.quick, args.only)
        errors = [name for name, r in result["runs"].items() if "error" in r]
        print(f"{len(result['runs'])} runs in {result['meta']['total_wall_s']} s -> {args.out}"
              + (f"; {len(errors)} failed: {', '.join(errors)}" if errors else ""))
        return 0
    old, new = (json.loads(p.read_text()) for p in (args.old, args.new))
    if old.get("meta", {}).get("quick") != new.get("meta", {}).get("quick"):
        print("warning: comparing a --quick record with a full one", file=sys.stderr)
    differences = compare(old, new)
    for run, key, a, b in differences:
        print(f"{run}  {key}: {json.dumps(a)} -> {json.dumps(b)}")
    print(f"{len(differences)} differences")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
