"""A deployed party tells its operator what it does (issue 28, item 4), and runs under systemd as deploy/ says.

One run serves most tests: the ``ExecStart`` line of ``deploy/securevfl-party@.service`` (its
specifiers and environment file substituted as systemd would) for every party of a mutual-TLS
federation on loopback, which writes JSON logs (``--log-format json --log-file``); clinic's service
starts late, so that the others wait for it. Every process started here is stopped here.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pytest
from deployed_threads import SPLITNN_JOB, loopback_federation_file
from net_helpers import free_port
from org_tables import organisation_frames, write_tables

from securevfl.cli import main
from securevfl.cli.deploy import log_options
from securevfl.deploy.certs import make_dev_pki
from securevfl.deploy.progress import PartyWatch
from securevfl.errors import ConfigError, PeerTimeoutError
from securevfl.federation.meter import Meter
from securevfl.federation.runtime import Channel, PartyContext
from securevfl.federation.transport import InProcessTransport

PARTIES = ("bank", "shop", "clinic")
LATE, LATE_S = "clinic", 6.5
EPOCHS = 2  # SPLITNN_JOB's
REQUIRED = {"time", "level", "party", "phase", "event", "message"}
UNIT = Path(__file__).resolve().parents[1] / "deploy" / "securevfl-party@.service"
PARTY = [sys.executable, "-m", "securevfl.cli", "party"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, Path]:
    return write_tables(organisation_frames(0), tmp_path_factory.mktemp("tables"))


def _stop(children: Mapping[str, subprocess.Popen]) -> None:
    for child in children.values():
        if child.poll() is None:
            child.kill()
        child.wait(5)


def _wait_for(path: Path, text: str, child: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert child.poll() is None and time.monotonic() < deadline, f"{path} never showed {text!r}"
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------- the run


def unit_service(text: str) -> dict[str, str]:
    """The [Service] section of a unit file: key -> value (continuation lines joined, comments dropped)."""
    section, values, pending = "", {}, ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def specifiers(value: str, party: str, root: Path) -> str:
    """systemd's specifiers of a system unit: %i (the instance), %S (/var/lib), %L (/var/log), %% (a %)."""
    table = {"i": party, "S": str(root / "var/lib"), "L": str(root / "var/log"), "%": "%"}

    def one(match: re.Match[str]) -> str:
        assert match.group(1) in table, f"the test does not model the specifier %{match.group(1)}"
        return table[match.group(1)]

    return re.sub(r"%(.)", one, value)


def environment_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd reads them (comments, blank lines and surrounding quotes dropped)."""
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            value = value.strip()
            values[key.strip()] = value[1:-1] if value[:1] == value[-1:] and value[:1] in "\"'" else value
    return values


def exec_start(line: str, env: Mapping[str, str]) -> list[str]:
    """ExecStart's words: ``${VAR}`` is one word, a lone ``$VAR`` splits at white space (systemd.service(5))."""
    words: list[str] = []
    for word in shlex.split(line):
        lone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if lone:
            words += env.get(lone.group(1), "").split()
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env[m.group(1)], word))
    return words


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, tables) -> dict[str, dict]:
    """The unit's ExecStart run for every party of a TLS federation, as systemd would; clinic's service starts
    LATE_S s after bank's began connecting. Every party's exit code, JSON log lines and console (its journal)."""
    root = tmp_path_factory.mktemp("systemd")
    pki = root / "etc/securevfl/certs"
    make_dev_pki(PARTIES, pki)
    addresses = "\n".join(f'[parties.{p}]\naddress = "127.0.0.1:{free_port()}"' for p in PARTIES)
    federation = root / "etc/securevfl/federation.toml"
    federation.write_text(f'[federation]\nactive = "bank"\n\n{addresses}\n\n[tls]\ndir = "{pki}"\n\n'
                          f"[network]\npeer_timeout_s = 20\nheartbeat_s = 0.5\n\n[job]\n{SPLITNN_JOB}\n")
    service = unit_service(UNIT.read_text())
    example = (UNIT.parent / "securevfl-party.env.example").read_text()
    logs = {p: root / f"var/log/securevfl/{p}.log" for p in PARTIES}
    children: dict[str, subprocess.Popen] = {}
    try:
        for p in PARTIES:
            env_file = Path(specifiers(service["EnvironmentFile"], p, root))
            assert env_file == Path(f"/etc/securevfl/{p}.env")
            env_file = root / env_file.relative_to("/")  # the test's /etc
            env_file.write_text(example.replace("/etc/securevfl/federation.toml", str(federation))
                                .replace("/srv/securevfl/bank.csv", str(tables[p])).replace("=4", "=1"))
            env = environment_file(env_file)
            for directory, base in (("StateDirectory", "var/lib"), ("LogsDirectory", "var/log")):
                (root / base / specifiers(service[directory], p, root)).mkdir(parents=True, exist_ok=True)
            argv = exec_start(specifiers(service["ExecStart"], p, root), env)
            assert argv[:2] == ["/opt/securevfl/bin/securevfl", "party"]
            if p == LATE:
                _wait_for(logs["bank"], '"event": "start"', children["bank"])
                time.sleep(LATE_S)
            children[p] = subprocess.Popen([*PARTY, *argv[2:]], cwd=specifiers(service["WorkingDirectory"], p, root),
                                           env={**ENV, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True)
        consoles = {p: c.communicate(timeout=150)[0] for p, c in children.items()}
    finally:
        _stop(children)
    return {p: {"code": children[p].returncode, "lines": logs[p].read_text().splitlines(), "console": consoles[p],
                "state": root / "var/lib/securevfl" / p} for p in PARTIES}


def _events(run: Mapping[str, dict], party: str) -> list[dict]:
    return [json.loads(line) for line in run[party]["lines"]]


def test_json_logs_are_one_object_per_line_with_the_required_keys(logged_run):
    for party in PARTIES:
        lines = logged_run[party]["lines"]
        assert len(lines) > 10
        for line in lines:
            event = json.loads(line)  # one object per line: every line parses alone
            assert isinstance(event, dict) and REQUIRED <= set(event), line
            assert event["party"] == party and event["level"] in ("info", "warning", "error"), line
            when = dt.datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
            assert when.utcoffset() == dt.timedelta(0) and event["time"].endswith("Z")


def test_every_party_logs_psi_epochs_costs_and_done(logged_run, tables):
    for party in PARTIES:
        events = _events(logged_run, party)
        kinds = [e["event"] for e in events]
        assert kinds[0] == "start" and kinds[-1] == "done", kinds
        start = events[0]
        assert start["role"] == ("active" if party == "bank" else "passive") and start["method"] == "splitnn"
        assert {e["peer"] for e in events if e["event"] == "link_up"} == set(PARTIES) - {party}
        psi = {e["event"]: e for e in events if e["phase"] == "psi"}
        assert {"psi_start", "psi_sent", "psi_received", "psi_pair", "psi_done"} <= set(psi), kinds
        assert psi["psi_start"]["rows"] == len(pd.read_csv(tables[party]))
        agreed = [e for e in events if e["event"] == "plan"][0]["rows"]  # every row of the active party (the default)
        held = psi["psi_done"]["rows"]  # the rows this party holds of them
        assert held == agreed if party == "bank" else 0 < held < agreed
        epochs = [e for e in events if e["event"] == "epoch"]
        assert [e["epoch"] for e in epochs] == list(range(1, EPOCHS + 1)), kinds
        assert all(e["bytes"] > 0 for e in epochs) and epochs[-1]["bytes"] > epochs[0]["bytes"]
        assert ("loss" in epochs[0]) == (party == "bank")  # only the active party has the loss
        assert "cost" in kinds
        assert events[-1]["rows"] == agreed and events[-1]["wall_s"] > 0 and events[-1]["bytes"] > 0
        # the console shows the same events as readable lines
        assert f"[{party}] epoch {EPOCHS}/{EPOCHS}" in logged_run[party]["console"]


def test_no_id_appears_in_any_log_line(logged_run, tables):
    ids = set()
    for path in tables.values():
        ids |= set(pd.read_csv(path, dtype={"customer_id": str})["customer_id"])
    pattern = re.compile("|".join(re.escape(i) for i in sorted(ids)))
    for party in PARTIES:
        for line in (*logged_run[party]["lines"], *logged_run[party]["console"].splitlines()):
            assert not pattern.search(line), line


def test_the_parties_say_whom_they_wait_for(logged_run):
    for party in ("bank", "shop"):
        waits = [e for e in _events(logged_run, party) if e["event"] == "waiting"]
        assert waits and all(e["peer"] == LATE for e in waits), waits
        assert waits[0]["waited_s"] >= 5 and waits[0]["phase"] == "connect"
        assert f"[{party}] waiting for {LATE} to connect" in logged_run[party]["console"]


def test_a_warning_level_log_holds_no_info_event_and_keeps_the_failure(tmp_path, tables, capfd):
    """bank alone, its peers never up: 6 s of connecting (a waiting report at info) and then the failure."""
    fed = loopback_federation_file(tmp_path, PARTIES, "bank", SPLITNN_JOB,
                                   network="peer_timeout_s = 20\nheartbeat_s = 0.5\nconnect_timeout_s = 6")
    log = tmp_path / "bank.log"
    code = main(["party", "--federation", str(fed), "--as", "bank", "--data", str(tables["bank"]), "--insecure",
                 "--device", "cpu", "--log-level", "warning", "--log-format", "json", "--log-file", str(log)])
    assert code == 2
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in events] == ["failed"] and events[0]["level"] == "error"
    assert "shop" in events[0]["error"] and events[0]["error"] in events[0]["message"]
    console = capfd.readouterr().err
    assert "[bank]" not in console and "error:" in console  # no info line; the failure once, as the error line


def test_a_wait_in_a_receive_is_reported_every_few_seconds(caplog):
    caplog.set_level(logging.INFO, logger="securevfl")
    transport = InProcessTransport(["a", "b"])
    meter = Meter("a")
    ctx = PartyContext(name="a", active="a", passives=("b",), peers=("b",), meter=meter,
                       channel=Channel("a", transport, meter, threading.Event(), recv_timeout=1.7))
    ctx.stage = "train epoch 3"

    def role(c: PartyContext) -> None:
        c.recv("b", "splitnn.gradient")

    with PartyWatch("a", every=0.5, poll=0.05) as watch, pytest.raises(PeerTimeoutError):
        watch.role(role)(ctx)
    waits = [r.securevfl_event for r in caplog.records if getattr(r, "securevfl_event", {}).get("event") == "waiting"]
    times = [w["waited_s"] for w in waits]  # at 0.5 s, 1.0 s, ... (the watcher may be late, never early)
    assert len(times) >= 2 and times[0] >= 0.5 and all(b - a >= 0.4 for a, b in zip(times, times[1:])), times
    assert all(w["peer"] == "b" and w["tag"] == "splitnn.gradient" and w["stage"] == "train epoch 3" for w in waits)
    assert "waiting for b (train epoch 3: splitnn.gradient)" in caplog.records[-1].getMessage()


def test_launch_gives_every_party_its_log_file_in_one_folder(tmp_path):
    options = log_options(PARTIES, tmp_path / "logs", "INFO", "json")
    assert options["shop"] == ["--log-level", "info", "--log-format", "json", "--log-file",
                               str(tmp_path / "logs" / "shop.log")]
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="give a folder"):
        log_options(PARTIES, tmp_path / "file", "info", "text")
    with pytest.raises(ConfigError, match="--log-level"):
        log_options(PARTIES, None, "verbose", "text")


# ---------------------------------------------------------------------------------------------- systemd


def test_the_systemd_unit_runs_every_party(logged_run):
    assert all(run["code"] == 0 for run in logged_run.values()), logged_run
    report = json.loads((logged_run["bank"]["state"] / "report.json").read_text())
    assert report["metrics"]["accuracy"] > 0.5
    for p in PARTIES:
        events = _events(logged_run, p)
        assert events[0]["tls"] is True and events[-1]["event"] == "done"
        assert f"[{p}] epoch {EPOCHS}/{EPOCHS}" in logged_run[p]["console"]  # the journal's lines


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_accepts_the_unit(tmp_path):
    """systemd-analyze verify: known sections and keys, an executable command (here: this Python)."""
    (tmp_path / UNIT.name).write_text(UNIT.read_text().replace("/opt/securevfl/bin/securevfl", sys.executable))
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "securevfl-party@bank.service")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Unknown" not in done.stderr + done.stdout, done.stderr


def test_the_docs_show_the_units_command_line_and_json_events():
    doc = (UNIT.parents[1] / "docs" / "deploy.md").read_text()
    shown = unit_service(re.search(r"```ini\n(ExecStart=.*?)```", doc, flags=re.S).group(1).replace(
        "ExecStart", "[Service]\nExecStart", 1))
    assert shown["ExecStart"] == unit_service(UNIT.read_text())["ExecStart"]
    lines = re.search(r"```jsonl\n(.*?)```", doc, flags=re.S).group(1).splitlines()
    assert lines and all(REQUIRED <= set(json.loads(line)) for line in lines)


def test_secureboost_progress_says_trees_at_every_party(caplog):
    """The active party's rounds are trees, not epochs; a passive party says which tree it served (issue 46)."""
    caplog.set_level(logging.INFO, logger="securevfl")
    transport = InProcessTransport(["a", "b"])
    contexts = {}
    for name in ("a", "b"):
        meter = Meter(name)
        contexts[name] = PartyContext(name=name, active="a", passives=("b",), peers=("a", "b"), meter=meter,
                                      channel=Channel(name, transport, meter, threading.Event()))
    with PartyWatch("a") as watch:
        watch.role(lambda c: c.progress(epoch=3, epochs=50, loss=0.4, unit="trees"))(contexts["a"])
    with PartyWatch("b") as watch:
        watch.role(lambda c: (c.progress(tree=1), c.progress(tree=2)))(contexts["b"])
    messages = [r.getMessage() for r in caplog.records if getattr(r, "securevfl_event", None)]
    assert any("tree 3/50 loss=0.4000" in m for m in messages), messages
    assert any("tree 1 served" in m for m in messages) and not any("tree 2 served" in m for m in messages)
