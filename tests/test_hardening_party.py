"""A deployed party that lies about its sizes is named and refused before anyone allocates by the lie.

The row-count lie of issue 26: a passive party announces ``rows = 2**35`` in the setup's table
shape. Before the fix every party built a placeholder table of that size (killed by the kernel, or a
``MemoryError`` traceback under a memory cap). Now the active party checks the count against the set
size the passive party showed in PSI and every party sizes its peers' placeholders by its own PSI
result, so every process exits 2 at once naming the liar, and no honest process grows.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file
from org_tables import organisation_frames, write_tables

from securevfl.data.partition import PartyTable
from securevfl.data.scenario import take_rows
from securevfl.deploy.plan import MAX_FEATURES, PartyShape, parse_plan
from securevfl.errors import ProtocolError

PARTIES = ("bank", "shop", "clinic")
#: Each party process gets this address-space cap, so a regression fails with a MemoryError instead of
#: taking the machine's memory (6 GiB: a honest party of this test peaks near 0.4 GiB of RSS).
ADDRESS_SPACE = 6 << 30

_DEVIANT = """
import os, sys
from securevfl.deploy import plan
from securevfl.federation import meter
PATCH
from securevfl.cli import main
sys.exit(main(sys.argv[1:]))
"""
#: A passive party that announces 2**35 rows.
ROW_LIE = """
honest = plan.PartyShape.to_wire
plan.PartyShape.to_wire = lambda self: {**honest(self), "rows": 2**35}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(11), tmp_path_factory.mktemp("tables"))


def _federation(directory: Path, recv_timeout: float = 20.0) -> Path:
    return loopback_federation_file(directory, PARTIES, "bank", SPLITNN_JOB,
                                    network=f"peer_timeout_s = 8\nheartbeat_s = 0.5\nrecv_timeout_s = {recv_timeout}")


def _cap_memory() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _run(fed: Path, files: dict[str, Path], liar: str | None = None, patch: str = "",
         timeout: float = 90.0, report: Path | None = None) -> dict[str, tuple[int, str, int, float]]:
    """Every party as its own process; per party (exit code, output, peak RSS in bytes, seconds to exit)."""
    import psutil

    children, peaks, outputs = {}, {p: 0 for p in PARTIES}, {p: [] for p in PARTIES}
    ended: dict[str, float] = {}
    started = time.monotonic()
    for p in PARTIES:
        head = ([sys.executable, "-c", _DEVIANT.replace("PATCH", textwrap.dedent(patch))] if p == liar
                else [sys.executable, "-m", "securevfl.cli"])
        tail = ["--report", str(report)] if report is not None and p == "bank" else []
        children[p] = subprocess.Popen([*head, "party", "--federation", str(fed), "--as", p, "--data", str(files[p]),
                                        "--device", "cpu", "--insecure", *tail],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
                                       start_new_session=True,
                                       preexec_fn=_cap_memory)

    def pump(p: str) -> None:
        for line in children[p].stdout:
            outputs[p].append(line)

    threads = [threading.Thread(target=pump, args=(p,), daemon=True) for p in PARTIES]
    for t in threads:
        t.start()
    try:
        handles = {p: psutil.Process(c.pid) for p, c in children.items()}
        deadline = started + timeout
        while len(ended) < len(PARTIES) and time.monotonic() < deadline:
            for p, c in children.items():
                if p in ended:
                    continue
                if c.poll() is not None:
                    ended[p] = time.monotonic() - started
                    continue
                try:
                    peaks[p] = max(peaks[p], handles[p].memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.02)
    finally:
        for c in children.values():
            if c.poll() is None:
                os.killpg(c.pid, signal.SIGKILL)
            c.wait(5)
        for t in threads:
            t.join(2)
    assert len(ended) == len(PARTIES), {p: "".join(o)[-2000:] for p, o in outputs.items()}
    return {p: (children[p].returncode, "".join(outputs[p]), peaks[p], ended[p]) for p in PARTIES}


def test_a_row_count_lie_is_named_at_once_and_allocates_nothing(tmp_path, files):
    # a receive timeout far above the bound: a party that refuses the lie at once ends in seconds (most of
    # them process start), one that waits for its timeout instead takes over 60 s, even on a loaded machine
    lied = _run(_federation(tmp_path, recv_timeout=60.0), files, liar="shop", patch=ROW_LIE)
    for p, (code, output, _, _) in lied.items():
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1, f"{p}: {output[-3000:]}"
        assert "shop" in errors[0] and "rows" in errors[0], errors[0]
        assert "Traceback" not in output and "MemoryError" not in output, output[-3000:]
    # the honest parties grew no more than the liar, which sizes its own table by its true rows and stops at
    # the same step (placeholders by the lie would be 2**35 rows: far beyond twice a party's ~0.5 GiB)
    for p in ("bank", "clinic"):
        assert lied[p][2] < 2 * lied["shop"][2], (p, lied[p][2], lied["shop"][2])
        assert lied[p][3] < 40.0  # well within the receive timeout (60 s), not at it


@pytest.mark.slow  # 23 s: the default suite's time budget
def test_a_party_lost_at_the_cost_summary_leaves_the_finished_report(tmp_path, files):
    report = tmp_path / "run.json"
    # dies after training, before its costs: once what it sent last has had time to leave (a crash at
    # once could take its last evaluation message with it, which is a loss during evaluation)
    crash = "import time\nmeter.MeterSnapshot.to_wire = lambda self: (time.sleep(2.0), os._exit(9))"
    runs = _run(_federation(tmp_path), files, liar="clinic", patch=crash, report=report)
    code, output, _, _ = runs["bank"]
    assert code == 0, output[-3000:]
    assert runs["clinic"][0] == 9
    written = json.loads(report.read_text())
    assert set(written["metrics"]) >= {"accuracy", "auc"}
    assert list(written["cost"]["missing"]) == ["clinic"]
    assert any("costs of clinic are missing" in n for n in written["notes"])


# ------------------------------------------------------------------ the checks themselves, in one process


def test_a_shape_is_checked_against_what_psi_showed():
    honest = {"rows": 510, "aligned": 421, "features": 13}
    assert PartyShape.from_wire(honest, "shop", aligned=421, rows=510) == PartyShape(510, 421, 13)
    with pytest.raises(ProtocolError, match=r"shop: rows = 34359738368, but its PSI set had 510 IDs"):
        PartyShape.from_wire({**honest, "rows": 2**35}, "shop", aligned=421, rows=510)
    with pytest.raises(ProtocolError, match=r"shop: aligned = 420, but PSI aligned 421"):
        PartyShape.from_wire({**honest, "aligned": 420}, "shop", aligned=421)
    with pytest.raises(ProtocolError, match=rf"shop: features = {MAX_FEATURES + 1} is not an integer"):
        PartyShape.from_wire({**honest, "features": MAX_FEATURES + 1}, "shop")
    for bad in ({**honest, "rows": -1}, {**honest, "rows": True}, {**honest, "rows": 2.0}, {**honest, "x": 1}, []):
        with pytest.raises(ProtocolError, match="shop"):
            PartyShape.from_wire(bad, "shop")


def test_the_plan_names_the_party_whose_shape_is_wrong():
    train, test = np.arange(0, 8, dtype=np.int64), np.arange(8, 10, dtype=np.int64)
    shape = {"rows": 12, "aligned": 10, "features": 3}
    plan = {"train": train, "test": test, "task": "classification", "n_classes": 2,
            "shapes": {"bank": shape, "shop": shape, "clinic": {**shape, "features": 10**9}}}
    with pytest.raises(ProtocolError, match=r"clinic \(sent by bank\): features"):
        parse_plan(plan, "bank", "shop", PARTIES, 10)
    plan["shapes"]["clinic"] = {**shape, "aligned": 9, "rows": 9}
    with pytest.raises(ProtocolError, match=r"clinic \(sent by bank\): aligned = 9, but PSI aligned 10"):
        parse_plan(plan, "bank", "shop", PARTIES, 10)
    plan["shapes"]["clinic"] = shape
    plan["n_classes"] = 10**9
    with pytest.raises(ProtocolError, match="n_classes"):
        parse_plan(plan, "bank", "shop", PARTIES, 10)


def test_a_peer_placeholder_costs_no_memory_per_row():
    n, width = 2**33, 2**10  # 32 TiB as real zeros
    features = np.broadcast_to(np.float32(0), (n, width))
    table = PartyTable("shop", ids=np.broadcast_to(np.array("#", dtype=object), (n,)), features=features,
                       feature_names=tuple(f"f{i}" for i in range(width)), columns=None)
    rows = np.array([0, 5, n - 1])
    picked = take_rows(table.features, rows)
    assert picked.shape == (3, width) and not picked.any() and picked.base is not None
    assert take_rows(table.ids, rows).tolist() == ["#"] * 3
    with pytest.raises(IndexError):
        take_rows(table.features, np.array([n]))
    own = np.arange(12.0).reshape(4, 3)
    assert np.array_equal(take_rows(own, np.array([3, 1])), own[[3, 1]])
