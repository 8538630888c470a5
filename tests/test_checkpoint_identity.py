"""Checkpoints carry their run's identity: a fresh run never takes over a used directory, and
--resume continues only the run every party checkpointed, on the same job and the same data."""

import re

import pytest

import securevfl
from securevfl.cli import main
from securevfl.errors import ConfigError, PartyFailure
from securevfl.methods.engine.checkpoint import CheckpointStore

KW = dict(parties=2, epochs=3, seed=2, alignment="plaintext")


pytestmark = pytest.mark.one_torch_thread  # tests/conftest.py


def _interrupt_at(epoch: int):
    def progress(**info):
        if info["epoch"] == epoch:
            raise RuntimeError(f"interrupted after epoch {epoch}")
    return progress


def _columns(reverse_passive: bool = False) -> dict[str, list[str]]:
    from sklearn.datasets import load_breast_cancer

    names = [str(n) for n in load_breast_cancer().feature_names]
    passive = names[15:][::-1] if reverse_passive else names[15:]
    return {"active": names[:15], "passive1": passive}


def _refusal(excinfo: pytest.ExceptionInfo[PartyFailure]) -> str:
    assert isinstance(excinfo.value.cause, ConfigError), excinfo.value
    return str(excinfo.value.cause)


def test_a_fresh_run_into_a_used_directory_is_refused_and_overwrite_moves_the_old_files_aside(tmp_path):
    securevfl.train("splitnn", checkpoint_dir=tmp_path, **{**KW, "epochs": 4})  # an old run: epochs 3 and 4
    old = {p: CheckpointStore(tmp_path, p).path(4).read_bytes() for p in ("active", "passive1")}
    with pytest.raises(PartyFailure) as excinfo:
        securevfl.train("splitnn", checkpoint_dir=tmp_path, **KW)
    message = _refusal(excinfo)
    assert re.search(r"active has epochs \[3, 4\] of run [0-9a-f]{8}", message), message
    assert "passive1 has epochs [3, 4]" in message and "--overwrite-checkpoints" in message
    assert "\n" not in message
    assert CheckpointStore(tmp_path, "active").completed_epochs() == [3, 4]  # nothing was touched

    run = securevfl.train("splitnn", checkpoint_dir=tmp_path, checkpoint_overwrite=True, **KW)
    assert run.metrics == securevfl.train("splitnn", **KW).metrics
    for party in ("active", "passive1"):
        store = CheckpointStore(tmp_path, party)
        assert store.completed_epochs() == [2, 3]  # the new run's own checkpoints survive
        aside = [d for d in store.directory.iterdir() if d.is_dir()]
        assert len(aside) == 1 and aside[0].name.startswith("previous-")
        assert (aside[0] / "epoch-0004.pt").read_bytes() == old[party]  # moved, not deleted
    # and the new run resumes as its own
    CheckpointStore(tmp_path, "active").path(3).unlink()
    CheckpointStore(tmp_path, "passive1").path(3).unlink()
    assert securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, **KW).extra["resumed_from_epoch"] == 2


def test_resume_after_a_run_on_other_data_is_refused_naming_the_party(tmp_path):
    with pytest.raises(PartyFailure, match="interrupted"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, features=_columns(), progress=_interrupt_at(2), **KW)
    with pytest.raises(PartyFailure) as excinfo:  # passive1's table has its columns in another order
        securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, features=_columns(True), **KW)
    message = _refusal(excinfo)
    assert "cannot resume" in message and "passive1's checkpoints were trained on other data" in message
    assert "active's checkpoints" not in message  # the active party's data did not change


def test_resume_of_another_run_is_refused(tmp_path):
    # two runs of the same job on the same data: the active party kept the first run's checkpoints
    securevfl.train("splitnn", checkpoint_dir=tmp_path / "one", **KW)
    securevfl.train("splitnn", checkpoint_dir=tmp_path / "two", **KW)
    (tmp_path / "two" / "active").rename(tmp_path / "two" / "stale")
    (tmp_path / "one" / "active").rename(tmp_path / "two" / "active")
    with pytest.raises(PartyFailure) as excinfo:
        securevfl.train("splitnn", checkpoint_dir=tmp_path / "two", resume=True, **KW)
    message = _refusal(excinfo)
    assert "different runs" in message and "active has epochs [2, 3] of run" in message, message


def test_resume_where_one_party_lost_its_checkpoints_is_refused_naming_it(tmp_path):
    with pytest.raises(PartyFailure, match="interrupted"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, progress=_interrupt_at(2), **KW)
    for path in CheckpointStore(tmp_path, "passive1").directory.iterdir():
        path.unlink()
    with pytest.raises(PartyFailure) as excinfo:
        securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, **KW)
    message = _refusal(excinfo)
    assert "passive1 has no checkpoint" in message and "active has epochs [1, 2] of run" in message, message


def test_resume_with_nothing_to_resume_is_refused(tmp_path):
    with pytest.raises(PartyFailure) as excinfo:
        securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, **KW)
    assert "nothing to resume" in _refusal(excinfo)


def test_an_honest_interrupt_and_resume_is_bit_identical(tmp_path):
    uninterrupted = securevfl.train("splitnn", **KW)
    with pytest.raises(PartyFailure, match="interrupted"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, progress=_interrupt_at(2), **KW)
    resumed = securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, **KW)
    assert resumed.extra["resumed_from_epoch"] == 2
    assert resumed.history == uninterrupted.history and resumed.metrics == uninterrupted.metrics


def test_overwrite_with_resume_or_without_a_directory_is_a_config_error():
    with pytest.raises(ConfigError, match="overwrite"):
        securevfl.train("splitnn", checkpoint_dir="x", resume=True, checkpoint_overwrite=True, **KW)
    with pytest.raises(ConfigError, match="overwrite"):
        securevfl.train("splitnn", checkpoint_overwrite=True, **KW)


def test_cli_train_twice_into_one_checkpoint_dir_is_one_line_and_exit_2(tmp_path, capsys):
    args = ["train", "--method", "splitnn", "--dataset", "breast-cancer", "--parties", "2", "--epochs", "1",
            "--quiet", "--checkpoint-dir", str(tmp_path / "ckpt"), "--report", str(tmp_path / "r.json")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert "already" in err and "--overwrite-checkpoints" in err and "Traceback" not in err
    assert main([*args, "--overwrite-checkpoints"]) == 0


# -- the agreement's messages: a peer's status is validated field by field -----------------------

def _status(**changes):
    status = {"mode": "resume", "overwrite": False, "epochs": [1, 2], "run": "ab" * 16, "job": "cd" * 32,
              "problem": ""}
    return {**status, **changes}


@pytest.mark.parametrize("bad", [
    None, [], {"mode": "resume"}, _status(mode="restart"), _status(overwrite=1), _status(epochs="1,2"),
    _status(epochs=[2, 1]), _status(epochs=[True]), _status(epochs=[0]), _status(epochs=list(range(1, 40))),
    _status(run="zz" * 16), _status(run="ab"), _status(job=7), _status(problem="because"),
    {**_status(), "extra": 1},
])
def test_a_malformed_checkpoint_status_is_a_protocol_error(bad):
    from securevfl.errors import ProtocolError
    from securevfl.methods.engine.resume import _check_status

    with pytest.raises(ProtocolError, match="shop sent a malformed checkpoint status"):
        _check_status("shop", bad)


def test_the_active_party_decides_for_everyone():
    from securevfl.methods.engine.resume import _decide

    run = "ab" * 16
    ok = {"bank": _status(), "shop": _status(epochs=[2, 3])}
    assert _decide(ok, "bank") == (2, run)
    assert "shop's checkpoints were trained on other data" in _decide({**ok, "shop": _status(problem="data")}, "bank")
    assert "different runs" in _decide({**ok, "shop": _status(run="ef" * 16)}, "bank")
    assert "disagree on --resume" in _decide({**ok, "shop": _status(mode="fresh")}, "bank")
    assert "another job" in _decide({**ok, "shop": _status(job="ee" * 32)}, "bank")
    fresh = {p: _status(mode="fresh", epochs=[], run="") for p in ("bank", "shop")}
    start, new_run = _decide(fresh, "bank")
    assert start == 0 and re.fullmatch("[0-9a-f]{32}", new_run) and new_run != _decide(fresh, "bank")[1]
    used = {**fresh, "shop": _status(mode="fresh")}
    assert "shop has epochs [1, 2] of run abababab" in _decide(used, "bank")
    assert _decide({**used, "shop": _status(mode="fresh", overwrite=True)}, "bank")[0] == 0


class _Passive:
    """A passive party's context that receives a scripted decision from the active party."""

    def __init__(self, decision):
        self.is_active, self.name, self.active, self.sent = False, "passive1", "active", []
        self.decision = decision

    def send(self, dst, tag, value):
        self.sent.append((dst, tag, value))

    def recv(self, src, tag):
        return self.decision


@pytest.mark.parametrize("decision, message", [
    ({"start": 3, "run": None}, "malformed run decision"),
    ({"start": "2", "run": "ab" * 16}, "malformed run decision"),
    ({"start": 5, "run": "RUN"}, "malformed run decision"),
    ({"start": 9, "run": "SAME"}, "asked passive1 to resume epoch 9"),  # an epoch it does not have
    ({"start": 2, "run": "ab" * 16}, "asked passive1 to resume epoch 2 of run abababab"),  # another run
    ({"refuse": "x" * 9000}, "malformed refusal"),
    ({"refuse": "two\nlines"}, "malformed refusal"),
    ({"start": 2}, "malformed run decision"),
])
def test_a_passive_party_checks_the_active_partys_decision_against_what_it_holds(tmp_path, decision, message):
    from types import SimpleNamespace

    from securevfl.errors import ProtocolError
    from securevfl.methods.engine.resume import _agree_run

    with pytest.raises(PartyFailure, match="interrupted"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, progress=_interrupt_at(2), **KW)
    store = CheckpointStore(tmp_path, "passive1")
    stamp = store.load(2)["identity"]
    if decision.get("run") == "SAME":
        decision = {**decision, "run": stamp["run"]}
    config = SimpleNamespace(resume=True, checkpoint_overwrite=False, checkpoint_dir=str(tmp_path))
    side = SimpleNamespace(config=config, passives=())
    with pytest.raises(ProtocolError, match=message):
        _agree_run(_Passive(decision), side, store, stamp["job"], stamp["data"])
