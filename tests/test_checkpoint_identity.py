"""Checkpoints carry their run's identity: a fresh run never takes over a used directory, and
--resume continues only the run every party checkpointed, on the same job and the same data."""

import re

import pytest
import torch

import securevfl
from securevfl.cli import main
from securevfl.errors import ConfigError, PartyFailure
from securevfl.methods.engine.checkpoint import CheckpointStore

KW = dict(parties=2, epochs=3, seed=2, alignment="plaintext")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Float sums depend on the thread count; an exact comparison needs one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
