"""The split-learning engine: a new method in a few lines, resume, early stopping, refusals."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch

import securevfl
from securevfl.errors import ConfigError, DataError, PartyFailure
from securevfl.eval import classification_metrics
from securevfl.federation.runtime import run_parties
from securevfl.methods import TrainConfig
from securevfl.methods.engine import PartySide, side_role
from securevfl.methods.engine.checkpoint import CheckpointStore
from securevfl.methods.engine.loop import Phase
from securevfl.methods.splitnn import SplitNN, SplitNNOptions
from securevfl.seeding import party_generator

pytestmark = pytest.mark.one_torch_thread  # tests/conftest.py


# -- a new method: SplitNN whose passive parties add Gaussian noise to their embeddings ----------

@dataclass(frozen=True)
class NoiseOptions(SplitNNOptions):
    sigma: float = 0.5


class NoisySplitNN(SplitNN):
    """SplitNN with N(0, sigma^2) noise on every embedding a passive party sends."""

    name = "noisy-splitnn"
    Options = NoiseOptions

    def bottom(self, side: PartySide) -> torch.nn.Module:
        side.state.generators["noise"] = party_generator(self.config.seed, f"{side.name}/noise")
        return super().bottom(side)

    def encode(self, side: PartySide, h: torch.Tensor, phase: str) -> torch.Tensor:
        noise = torch.randn(h.shape, generator=side.state.generators["noise"]) * self.options.sigma
        return (h + noise.to(h.device)).detach()

# -- (the method ends here: 19 lines) ------------------------------------------------------------


def _scenario():
    from securevfl.api import RunConfig, build_scenario
    from securevfl.data import PartitionSpec

    return build_scenario(RunConfig(partition=PartitionSpec(parties=2, seed=0), alignment="plaintext"))


def _run_method(method, scenario):
    result = run_parties(method.roles(scenario), active=scenario.active)
    outcome = result.results[scenario.active]
    return outcome, classification_metrics(outcome.y_true, outcome.scores)


def test_a_splitnn_variant_is_a_few_hooks_and_runs_end_to_end():
    scenario = _scenario()
    config = TrainConfig(epochs=3, seed=0)
    plain, plain_metrics = _run_method(SplitNN(config), scenario)
    silent, silent_metrics = _run_method(NoisySplitNN(TrainConfig(epochs=3, seed=0, options={"sigma": 0.0})),
                                         scenario)
    noisy, noisy_metrics = _run_method(NoisySplitNN(TrainConfig(epochs=3, seed=0, options={"sigma": 2.0})),
                                       scenario)
    assert silent.history == plain.history and silent_metrics == plain_metrics  # sigma=0 is SplitNN
    assert noisy.history != plain.history  # the noise reached the active party's top model
    assert noisy_metrics["accuracy"] > 0.6  # and the noisy run still learns


# -- checkpoint and resume ---------------------------------------------------------------------

def _interrupt_at(epoch: int):
    def progress(**info):
        if info["epoch"] == epoch:
            raise RuntimeError(f"interrupted after epoch {epoch}")
    return progress


@pytest.mark.parametrize("method,parties,options", [
    ("splitnn", 2, {}),
    ("easter", 4, {"secagg": "dh"}),
    ("entity-aug", 3, {"drop_prob": 0.3}),  # checkpoints the host's queues and the guests' drop generators
    ("tabvfl", 3, {"fail_prob": 0.4, "latent_quality": False, "pretrain_epochs": 1}),  # resumes inside finetuning
])
def test_resume_after_an_interrupted_run_gives_the_uninterrupted_metrics(tmp_path, method, parties, options):
    kw = dict(parties=parties, epochs=4, seed=3, options=options, alignment="plaintext")
    uninterrupted = securevfl.train(method, **kw)
    with pytest.raises(PartyFailure, match="interrupted after epoch 2"):
        securevfl.train(method, checkpoint_dir=tmp_path, progress=_interrupt_at(2), **kw)
    party_dirs = sorted(p.name for p in tmp_path.iterdir())
    assert len(party_dirs) == parties  # each party wrote its own checkpoints
    assert all(CheckpointStore(tmp_path, p).completed_epochs()[-1] == 2 for p in party_dirs)
    resumed = securevfl.train(method, checkpoint_dir=tmp_path, resume=True, **kw)
    assert resumed.extra["resumed_from_epoch"] == 2
    assert resumed.metrics == uninterrupted.metrics
    assert resumed.history == uninterrupted.history


@pytest.mark.parametrize("interrupt", [2, 4, 8])
def test_resume_with_early_stopping_in_two_phases(tmp_path, interrupt):
    # TabVFL: pretraining stops early after epoch 4 (best 3); finetuning runs epochs 7-12. Interrupted
    # inside pretraining, at the epoch it stopped, and inside finetuning, the resumed run must end as the
    # uninterrupted one: the same skipped epochs, best weights restored per phase, history and metrics.
    kw = dict(parties=3, epochs=6, seed=3, early_stopping=1, val_fraction=0.25, alignment="plaintext",
              lr=1e-3, batch_size=32,  # the run-wide defaults this schedule was found with (not TabVFL's own)
              options={"pretrain_epochs": 6, "latent_quality": False})
    uninterrupted = securevfl.train("tabvfl", **kw)
    assert uninterrupted.extra["early_stopping"]["phases"]["pretrain"]["stopped_after_epoch"] == 4
    with pytest.raises(PartyFailure, match=f"interrupted after epoch {interrupt}"):
        securevfl.train("tabvfl", checkpoint_dir=tmp_path, progress=_interrupt_at(interrupt), **kw)
    resumed = securevfl.train("tabvfl", checkpoint_dir=tmp_path, resume=True, **kw)
    assert resumed.extra["resumed_from_epoch"] == interrupt
    assert resumed.extra["early_stopping"] == uninterrupted.extra["early_stopping"]
    assert resumed.history == uninterrupted.history
    assert resumed.metrics == uninterrupted.metrics


def test_resume_takes_the_last_epoch_every_party_completed(tmp_path):
    kw = dict(parties=3, epochs=3, seed=1, alignment="plaintext")
    uninterrupted = securevfl.train("splitnn", **kw)
    securevfl.train("splitnn", checkpoint_dir=tmp_path, **kw)
    CheckpointStore(tmp_path, "passive2").path(3).unlink()  # passive2 died before saving epoch 3
    resumed = securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, **kw)
    assert resumed.extra["resumed_from_epoch"] == 2
    assert resumed.metrics == uninterrupted.metrics


def test_resume_refuses_another_jobs_checkpoint(tmp_path):
    kw = dict(parties=2, epochs=2, alignment="plaintext")
    securevfl.train("splitnn", checkpoint_dir=tmp_path, seed=1, **kw)
    with pytest.raises(PartyFailure, match="belong to another job"):
        securevfl.train("splitnn", checkpoint_dir=tmp_path, resume=True, seed=1, lr=0.01, **kw)


def test_a_damaged_checkpoint_is_a_clear_error(tmp_path):
    store = CheckpointStore(tmp_path, "active")
    store.directory.mkdir(parents=True)
    store.path(1).write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="cannot be read"):
        store.load(1)


# -- early stopping ----------------------------------------------------------------------------

def test_early_stopping_restores_the_best_weights():
    kw = dict(parties=2, seed=0, lr=0.05, embedding_dim=32, hidden=(128,), alignment="plaintext")
    stopped = securevfl.train("splitnn", epochs=40, early_stopping=2, **kw)
    info = stopped.extra["early_stopping"]
    val = [h["val_loss"] for h in stopped.history]
    assert info["best_epoch"] == 1 + int(np.argmin(val))
    assert info["stopped_after_epoch"] == len(stopped.history) < 40  # it stopped
    assert info["stopped_after_epoch"] == info["best_epoch"] + 2  # after `patience` epochs without improvement
    # the weights evaluated are those of the best epoch: the same as a run that ends there
    ends_at_best = securevfl.train("splitnn", epochs=info["best_epoch"], early_stopping=2, **kw)
    assert stopped.metrics == ends_at_best.metrics


def test_a_minimum_improvement_stops_on_a_plateau_of_tiny_gains():
    """``min_improvement``: an epoch counts as better only if the validation loss falls by more than it."""
    kw = dict(parties=2, seed=0, epochs=12, early_stopping=2, batch_size=32, alignment="plaintext")
    plain = securevfl.train("splitnn", **kw)
    val = [h["val_loss"] for h in plain.history]
    threshold = 0.02
    gated = securevfl.train("splitnn", min_improvement=threshold, **kw)
    best, best_epoch, waited, expected = float("inf"), 0, 0, None
    for epoch, loss in enumerate(val, start=1):  # the same losses until the gated run stops
        if loss < best - threshold:
            best, best_epoch, waited = loss, epoch, 0
        else:
            waited += 1
            if waited >= 2:
                expected = epoch
                break
    info = gated.extra["early_stopping"]
    assert expected is not None and expected < len(plain.history)  # the gate stops a run that kept improving a little
    assert info["stopped_after_epoch"] == expected and info["best_epoch"] == best_epoch
    with pytest.raises(ConfigError, match="min_improvement"):
        securevfl.train("splitnn", min_improvement=-1.0)


class ScriptedPhases(PartySide):
    """Two unsupervised phases with scripted validation losses; the weight w is set to the epoch number.

    ``pre`` is validated jointly (the active party's loss decides for both parties), ``fine`` locally
    (each party on its own losses). w after a phase shows which epoch's weights were restored.
    """

    LOSSES = {"active": {1: 5, 2: 4, 3: 3, 4: 3.5, 5: 3.6, 6: 3.7, 7: 1, 8: 1,  # pre: best 3, stops after 5
                         9: 2, 10: 1, 11: 3, 12: 4, 13: 5, 14: 6},            # fine: best 10, stops after 12
              "passive1": {9: 3, 10: 4, 11: 5, 12: 1, 13: 1, 14: 1}}           # fine: best 9, stops after 11

    def phases(self):
        return (Phase("pre", 8, supervised=False, stopping="joint"),
                Phase("fine", 6, supervised=False, stopping="local"))

    def weight(self):
        return float(self.w.weight.detach())

    def build(self, ctx):
        self.w = self.state.modules["w"] = torch.nn.Linear(1, 1, bias=False)
        self.seen: dict[str, object] = {"starts": {}, "validation_rows": set()}

    def batches(self, epoch):
        self.epoch = epoch + 1
        self.seen["starts"].setdefault(self.phase.name, self.weight())
        self.seen["train_rows"] = set(self.rows.tolist())
        return [self.rows]

    def train_batch(self, ctx, batch):
        with torch.no_grad():
            self.w.weight.fill_(self.epoch)
        return ({"loss": 0.0}, len(batch)) if ctx.is_active else None

    def validation_loss(self, ctx, rows):
        self.seen["validation_rows"] |= set(rows.tolist())
        if self.phase.name == "pre" and not ctx.is_active:
            return None  # joint: the active party decides
        return float(self.LOSSES[ctx.name][int(self.weight())])

    def evaluate(self, ctx, X, phase):
        return None

    def outcome(self, ctx, evaluation, record):
        return {**self.seen, "final": self.weight(), "phases": record.phases}


def test_early_stopping_per_phase_stops_restores_the_best_and_lets_local_phases_decide_alone():
    from securevfl.data.scenario import PartyData
    from securevfl.methods import create_method

    method = create_method("splitnn", TrainConfig(epochs=1, early_stopping=2, val_fraction=0.25, seed=0))
    data = PartyData(name="p", feature_names=("f",), X_train=np.zeros((20, 1)), X_test=np.zeros((4, 1)),
                     X_unaligned=np.zeros((0, 1)), ids_train=np.arange(20), ids_unaligned=np.arange(0),
                     y_train=np.zeros(20))
    sides = {"active": ScriptedPhases(method, data, ("passive1",)), "passive1": ScriptedPhases(method, data)}
    result = run_parties({n: side_role(s) for n, s in sides.items()}, active="active", seed=0)
    active, passive = result.results["active"], result.results["passive1"]
    # pre (joint): best epoch 3, stopped after 5; both parties start `fine` from epoch 3's weights
    assert active["phases"]["pre"] == {"best_epoch": 3, "stopped_after_epoch": 5}
    assert active["starts"]["fine"] == passive["starts"]["fine"] == 3.0
    # fine (local): each party stops on its own losses and ends on its own best epoch
    assert active["phases"]["fine"] == {"best_epoch": 10, "stopped_after_epoch": 12}
    assert passive["phases"]["fine"] == {"best_epoch": 9, "stopped_after_epoch": 11}
    assert (active["final"], passive["final"]) == (10.0, 9.0)
    # the validation rows are carved from the training rows: 5 of 20, disjoint from those trained on
    assert len(active["validation_rows"]) == 5 and not active["validation_rows"] & active["train_rows"]


def test_methods_off_the_engine_refuse_early_stopping_and_checkpoints(tmp_path):
    with pytest.raises(ConfigError, match="does not support early stopping"):
        securevfl.train("apcvfl", epochs=1, early_stopping=2)
    with pytest.raises(ConfigError, match="resume needs a checkpoint directory"):
        securevfl.train("splitnn", epochs=1, resume=True)


def test_the_meter_splits_time_and_bytes_by_phase():
    report = securevfl.train("splitnn", parties=2, epochs=2, alignment="plaintext")
    phases = report.cost["phases"]
    assert list(phases) == ["setup", "train", "evaluate"]
    assert sum(p["bytes"] for p in phases.values()) == report.cost["total_bytes"]
    assert phases["train"]["bytes"] > phases["evaluate"]["bytes"] > 0 and phases["setup"]["bytes"] == 0
    tab = securevfl.train("tabvfl", parties=2, epochs=1, alignment="plaintext", options={"latent_quality": False})
    assert list(tab.cost["phases"]) == ["setup", "pretrain", "finetune", "evaluate"]
    assert tab.extra["efficiency"]["pretrain_bytes"] == tab.cost["phases"]["pretrain"]["bytes"]


def test_scheme_options_reach_the_aggregation_through_dotted_method_options():
    from securevfl.methods import create_method

    method = create_method("easter", TrainConfig(options={"secagg": "paillier", "secagg.key_bits": "3072",
                                                          "secagg.key_holder": "passive2"}))
    assert method.options.secagg_options == {"key_bits": "3072", "key_holder": "passive2"}
    scheme = method.options.aggregation()
    assert scheme.options.key_bits == 3072 and scheme.options.key_holder == "passive2"
    with pytest.raises(ConfigError, match="key_bitz"):
        create_method("easter", TrainConfig(options={"secagg": "paillier", "secagg.key_bitz": 3072}))
    with pytest.raises(ConfigError, match="unknown option group"):
        create_method("splitnn", TrainConfig(options={"secagg.key_bits": 3072}))
