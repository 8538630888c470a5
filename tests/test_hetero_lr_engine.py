"""hetero-lr on the split-learning engine: early stopping on encrypted validation scores, checkpoints and resume."""

import pytest

import securevfl
from securevfl.errors import PartyFailure
from securevfl.methods.engine.checkpoint import CheckpointStore

SMALL_KEY = {"key_bits": 1024, "insecure_allow_small_key": True}
KW = dict(dataset="breast-cancer", parties=2, batch_size=128, seed=0, alignment="plaintext")


def test_patience_stops_hetero_lr_early_and_keeps_the_best_weights():
    # A step size this large overshoots after the first epoch: the validation loss rises and training stops.
    options = {**SMALL_KEY, "lr": 2.0}
    stopped = securevfl.train("hetero-lr", epochs=10, early_stopping=2, options=options, **KW)
    info = stopped.extra["early_stopping"]
    val = [h["val_loss"] for h in stopped.history]
    assert info["best_epoch"] == 1 + val.index(min(val))
    assert info["stopped_after_epoch"] == len(stopped.history) == info["best_epoch"] + 2 < 10
    assert all("train_loss" in h for h in stopped.history)  # the monitored Taylor loss, as without patience
    # the weights evaluated are those of the best epoch: the same as a run that ends there
    ends_at_best = securevfl.train("hetero-lr", epochs=info["best_epoch"], early_stopping=2, options=options, **KW)
    assert stopped.metrics == ends_at_best.metrics
    assert stopped.extra["hetero_lr"]["active_weights"] == ends_at_best.extra["hetero_lr"]["active_weights"]


def _interrupt_at(epoch):
    def progress(**info):
        if info.get("epoch") == epoch:
            raise RuntimeError(f"interrupted after epoch {epoch}")
    return progress


def test_hetero_lr_resumes_an_interrupted_run_with_the_uninterrupted_result(tmp_path):
    kw = dict(epochs=3, options=SMALL_KEY, **KW)
    uninterrupted = securevfl.train("hetero-lr", **kw)
    with pytest.raises(PartyFailure, match="interrupted after epoch 2"):
        securevfl.train("hetero-lr", checkpoint_dir=tmp_path, progress=_interrupt_at(2), **kw)
    # every party checkpoints, the arbiter (no column, no weights) included
    assert sorted(p.name for p in tmp_path.iterdir()) == ["active", "arbiter", "passive1"]
    assert all(CheckpointStore(tmp_path, p).completed_epochs()[-1] == 2 for p in ("active", "arbiter", "passive1"))
    resumed = securevfl.train("hetero-lr", checkpoint_dir=tmp_path, resume=True, **kw)  # the arbiter makes a new key
    assert resumed.extra["resumed_from_epoch"] == 2
    assert resumed.metrics == uninterrupted.metrics
    assert resumed.history == uninterrupted.history
