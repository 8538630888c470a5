"""Issue 26, hardening of a deployed party: stopping, atomic outputs, the CA key, bounded config reads,
one ID rule, and no error text that suggests an unsafe workaround.
"""

from __future__ import annotations

import ast
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file

from securevfl.cli import main
from securevfl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _child_env() -> dict[str, str]:
    """The child processes import this tree first, one torch thread each."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else ""), "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1"}


# ------------------------------------------------------------------ 1. SIGTERM / SIGINT stop a party cleanly


def _tables(directory: Path, parties: tuple[str, ...], n: int = 400) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    ids = [f"c{i:04d}" for i in range(n)]
    paths = {}
    for k, name in enumerate(parties):
        frame = pd.DataFrame({"customer_id": ids, **{f"{name}{j}": rng.normal(size=n) for j in range(4)}})
        if k == 0:
            frame["churn"] = np.where(rng.random(n) < 0.5, "yes", "no")
        paths[name] = directory / f"{name}.csv"
        frame.to_csv(paths[name], index=False)
    return paths


def _loopback_federation(directory: Path, parties: tuple[str, ...], epochs: int) -> Path:
    job = SPLITNN_JOB.replace("epochs = 2", f"epochs = {epochs}").replace("batch_size = 64", "batch_size = 16")
    return loopback_federation_file(directory, parties, parties[0], job,
                                    network="peer_timeout_s = 20\nheartbeat_s = 0.5\nconnect_timeout_s = 60")


class _Party:
    """One ``securevfl party`` process with its output collected line by line."""

    def __init__(self, fed: Path, name: str, data: Path, checkpoints: Path) -> None:
        self.name = name
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "securevfl.cli", "party", "--federation", str(fed), "--as", name,
             "--data", str(data), "--device", "cpu", "--insecure", "--checkpoint-dir", str(checkpoints)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_child_env(), start_new_session=True)
        self.pump = threading.Thread(target=self._read, daemon=True)
        self.pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(5)
        self.pump.join(2)


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated by SIGTERM"),
                                                pytest.param(signal.SIGINT, 130, "interrupted by SIGINT",
                                                             marks=pytest.mark.slow)])
def test_a_signalled_party_aborts_its_peers_and_exits_at_once(tmp_path, sig, code, word):
    parties = ("bank", "shop", "clinic")
    files = _tables(tmp_path, parties)
    fed = _loopback_federation(tmp_path, parties, epochs=500)
    checkpoints = tmp_path / "checkpoints"
    procs = {p: _Party(fed, p, files[p], checkpoints) for p in parties}
    try:
        deadline = time.monotonic() + 120
        while not any("epoch 2/" in line for line in procs["bank"].lines):
            assert time.monotonic() < deadline, "training never started: " + procs["bank"].output
            assert all(p.proc.poll() is None for p in procs.values()), {n: p.output for n, p in procs.items()}
            time.sleep(0.05)
        os.kill(procs["bank"].proc.pid, sig)  # the process only, as systemctl stop / docker stop do
        sent = time.monotonic()
        procs["bank"].proc.wait(timeout=10)
        stopped = time.monotonic() - sent
        for p in ("shop", "clinic"):
            procs[p].proc.wait(timeout=max(0.1, sent + 8 - time.monotonic()))
        peers_stopped = time.monotonic() - sent
    finally:
        for p in procs.values():
            p.kill()
    outputs = {n: p.output for n, p in procs.items()}
    assert procs["bank"].proc.returncode == code, outputs
    assert stopped < 5, outputs
    assert peers_stopped < 5 + 1, outputs  # within 5 s of the ABORT (sent by bank at once)
    assert word in outputs["bank"]
    for p in ("shop", "clinic"):
        assert procs[p].proc.returncode == 2, outputs
        errors = [line for line in procs[p].lines if line.startswith("error:")]
        assert len(errors) == 1 and "bank stopped" in errors[0] and word in errors[0], outputs
        assert "Traceback" not in outputs[p]
    from securevfl.methods.engine.checkpoint import CheckpointStore

    for p in parties:  # every checkpoint left behind is complete (written to a temporary file, then renamed)
        store = CheckpointStore(checkpoints, p)
        assert store.completed_epochs(), p
        for epoch in store.completed_epochs():
            assert store.load(epoch)["epoch"] == epoch


def test_launch_forwards_sigterm_to_every_party(tmp_path):
    parties = ("bank", "shop")
    files = _tables(tmp_path, parties)
    fed = _loopback_federation(tmp_path, parties, epochs=500)
    proc = subprocess.Popen([sys.executable, "-m", "securevfl.cli", "launch", str(fed), "--insecure", "--device",
                             "cpu", *(f"--data={p}={files[p]}" for p in parties)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_child_env(),
                            start_new_session=True)
    lines: list[str] = []
    pump = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    pump.start()
    try:
        deadline = time.monotonic() + 120
        while not any("epoch 2/" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
        pump.join(5)
        # no party outlives launch: every port of the federation is free again
        out = "".join(lines)
        assert proc.returncode == 143, out
        assert "terminated by SIGTERM" in out, out
        for p in parties:
            assert not _party_running(fed, p), out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        # launch runs each party in its own session: kill any left over by the federation file path
        for pid in _pids_with(str(fed)):
            os.kill(pid, signal.SIGKILL)


def _pids_with(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _party_running(fed: Path, party: str) -> bool:
    return any(f"--as\0{party}\0".encode() in (Path("/proc") / str(pid) / "cmdline").read_bytes()
               for pid in _pids_with(str(fed)) if (Path("/proc") / str(pid)).exists())


def test_interrupted_carries_its_exit_code():
    from securevfl.errors import Interrupted, PartyFailure

    term, intr = Interrupted(signal.SIGTERM), Interrupted(signal.SIGINT)
    assert (term.exit_code, intr.exit_code) == (143, 130)
    assert str(term) == "terminated by SIGTERM"
    assert PartyFailure("bank", "training", term).exit_code == 143


# ------------------------------------------------------------------ 2. atomic outputs


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    from psi.atomic import atomic_path, write_text

    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no partial file left
    write_text(target, "new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_atomic_path_keeps_the_suffix_and_the_mode(tmp_path):
    from psi.atomic import atomic_path, write_bytes

    with atomic_path(tmp_path / "plot.png") as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".png"
        tmp.write_bytes(b"png")
    key = tmp_path / "k.key"
    write_bytes(key, b"secret", mode=0o600)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_a_report_is_written_through_the_atomic_helper(tmp_path, monkeypatch):
    import psi.atomic
    from securevfl.report.run_report import RunReport

    report = RunReport(method="m", dataset="d", metrics={"accuracy": 1.0}, cost={}, config={}, wall_s=0.0)
    monkeypatch.setattr(RunReport, "to_markdown", lambda self: "# report\n")
    calls = []
    real = psi.atomic.atomic_path

    def spy(path, *args, **kwargs):
        calls.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(psi.atomic, "atomic_path", spy)
    report.save(tmp_path / "run.json")
    assert calls == ["run.json", "run.md"]


def test_psi_outputs_are_written_through_the_atomic_helper(tmp_path, monkeypatch):
    import psi
    import psi.atomic

    for name, ids in (("a", ["x", "y", "z"]), ("b", ["y", "z", "w"])):
        pd.DataFrame({"id": ids}).to_csv(tmp_path / f"{name}.csv", index=False)
    calls = []
    real = psi.atomic.atomic_path

    def spy(path, *args, **kwargs):
        calls.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(psi.atomic, "atomic_path", spy)
    psi.run_files({"a": tmp_path / "a.csv", "b": tmp_path / "b.csv"}, "id", tmp_path / "out", workers=1)
    assert sorted(calls) == ["a_aligned.csv", "a_unaligned.csv", "b_aligned.csv", "b_unaligned.csv",
                             "psi_report.json"]


# ------------------------------------------------------------------ 3. the CA key in its own folder


def test_certs_keep_the_ca_key_in_a_private_folder(tmp_path, capsys):
    out = tmp_path / "certs"
    assert main(["certs", "--parties", "bank,shop", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["bank.key", "bank.pem", "ca", "ca.pem", "shop.key", "shop.pem"]
    assert sorted(p.name for p in (out / "ca").iterdir()) == ["ca.key"]
    assert stat.S_IMODE((out / "ca").stat().st_mode) == 0o700
    assert stat.S_IMODE((out / "ca" / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "bank.key").stat().st_mode) == 0o600
    assert str(out / "ca" / "ca.key") in printed.replace("\n", "")
    assert main(["certs", "--parties", "bank,shop", "--out", str(out)]) == 2  # never overwrites silently
    docs = (ROOT / "docs" / "deploy.md").read_text()
    assert "ca/ca.key" in docs


# ------------------------------------------------------------------ 4. bounded config reads


def test_federation_from_dev_zero_is_refused_at_once(capsys):
    started = time.monotonic()
    rc = main(["party", "--federation", "/dev/zero", "--as", "bank"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "/dev/zero" in err and "not a regular file" in err, err
    assert time.monotonic() - started < 10


def test_a_huge_federation_file_is_refused_naming_the_limit(tmp_path, capsys):
    from securevfl.checks import MAX_CONFIG_BYTES
    from securevfl.deploy.federation_file import load_federation

    big = tmp_path / "fed.toml"
    with open(big, "wb") as handle:
        handle.write(b"# " + b"x" * (MAX_CONFIG_BYTES + 10) + b"\n")
    with pytest.raises(ConfigError, match=r"fed\.toml.*larger than 1 MiB"):
        load_federation(big)
    rc = main(["launch", str(big), "--data", "bank=x.csv"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "1 MiB" in err, err


def test_bench_results_are_read_with_a_bound():
    from securevfl.bench.results import load_results

    with pytest.raises(ConfigError, match="not a regular file"):
        load_results("/dev/zero")


# ------------------------------------------------------------------ 5. one ID rule for psi and train


ODD_IDS = ["plain", " lead", "trail ", "\ttab\t", "\u00a0nbsp\u00a0", "\ufeffbom", "in side", "Case", "e\u0301",
           "NA", "null", "007"]


def test_psi_and_train_read_the_same_ids_from_the_same_file(tmp_path):
    from psi.ids import prepare_ids
    from psi.io import read_ids
    from securevfl.data.files import party_table_from_file

    path = tmp_path / "a.csv"
    pd.DataFrame({"customer_id": ODD_IDS, "x": np.arange(len(ODD_IDS), dtype=float),
                  "churn": ["yes", "no"] * (len(ODD_IDS) // 2)}).to_csv(path, index=False, encoding="utf-8-sig")
    table, _ = party_table_from_file("a", path, id_column="customer_id", label_column="churn", is_active=True)
    for normalize in ((), ("strip",), ("strip", "casefold", "nfc")):
        via_psi = prepare_ids(read_ids(path, "customer_id"), normalize).items
        via_train = prepare_ids(list(table.ids), normalize).items
        assert via_psi == via_train, normalize
    stripped = prepare_ids(read_ids(path, "customer_id"), ("strip",)).items
    assert stripped == ["plain", "lead", "trail", "tab", "nbsp", "bom", "in side", "Case", "e\u0301", "NA", "null",
                        "007"]  # a missing-value marker is a feature cell's business, never an ID's


def test_blank_and_duplicate_ids_are_refused_by_both_paths(tmp_path):
    from psi.errors import PSIDataError
    from psi.ids import prepare_ids
    from psi.io import read_ids
    from securevfl.data.files import party_table_from_file
    from securevfl.errors import DataError

    for ids, what in ((["a", " \t"], "empty"), (["a", "b", "a"], "duplicate")):
        path = tmp_path / f"{what}.csv"
        pd.DataFrame({"customer_id": ids, "x": np.arange(len(ids), dtype=float)}).to_csv(path, index=False)
        with pytest.raises(PSIDataError, match=what):
            prepare_ids(read_ids(path, "customer_id"))
        with pytest.raises(DataError, match=what):
            party_table_from_file("b", path, id_column="customer_id", label_column="churn", is_active=False)


def test_streamed_parquet_ids_refuse_blank_ids_too(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from psi.errors import PSIDataError
    from psi.source import ParquetIDs

    path = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"id": ["a", "\u00a0\t", "c"]}), path)
    for normalize in ((), ("strip",)):
        with pytest.raises(PSIDataError, match="empty ID at row 1"):
            list(ParquetIDs(path, "id", normalize=normalize).chunks(8))


# ------------------------------------------------------------------ 6. no unsafe workaround in any message


UNSAFE = ("weights_only=false", "weights_only` set to `false", "allow_pickle=true", "pickle.load", "verify=false",
          "cert_none", "check_hostname=false", "allow_small_key=true")


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """Every string literal but docstrings (which document an option; a message would suggest it)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append((node.lineno, node.value))
    return found


def test_no_string_literal_suggests_an_unsafe_workaround():
    offenders = []
    for folder in ("securevfl", "psi", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in _string_literals(path):
                lowered = text.lower().replace(" ", "")
                hits = [u for u in UNSAFE if u.replace(" ", "") in lowered]
                if hits:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {hits}")
    assert not offenders, "\n".join(offenders)


def test_an_unreadable_checkpoint_error_does_not_repeat_torchs_advice(tmp_path):
    from securevfl.errors import DataError
    from securevfl.methods.engine.checkpoint import CheckpointStore

    store = CheckpointStore(tmp_path, "bank")
    store.directory.mkdir(parents=True)
    import torch

    torch.save({"epoch": 1, "evil": _NotATensor()}, store.path(1))  # an object torch refuses to load as weights
    with pytest.raises(DataError) as info:
        store.load(1)
    text = str(info.value).lower()
    assert "weights_only" not in text and "arbitrary code" not in text and "trusted source" not in text, text
    assert str(store.path(1)) in str(info.value)


class _NotATensor:
    pass
