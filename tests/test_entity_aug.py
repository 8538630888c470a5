import json

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import securevfl
from securevfl.cli import main
from securevfl.data import DatasetOptions, PartitionSpec, load_dataset, partition
from securevfl.data.scenario import scenario_from_partition
from securevfl.errors import ConfigError, ProtocolError
from securevfl.federation.runtime import run_parties
from securevfl.methods.base import TrainConfig, batch_plan, create_method
from securevfl.methods.entity_aug import EntityAugOptions
from securevfl.methods.entity_aug.augmentation import (
    ActivationQueue,
    entity_schedule,
    interpolate_labels,
    interpolated_loss,
    soft_binary_cross_entropy,
    soft_cross_entropy,
)

# -- label interpolation (Algorithm 1, line 11) ------------------------------------------------


def test_interpolation_weights_by_activation_dimension():
    # guest 1 (width 16) sent a "0", guest 2 (width 48) a "1": the label is 1/4 zero, 3/4 one
    y = interpolate_labels([np.array([0, 2]), np.array([1, 2])], [16, 48], n_classes=3)
    np.testing.assert_allclose(y, [[0.25, 0.75, 0.0], [0.0, 0.0, 1.0]])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_interpolated_labels_sum_to_one_and_match_the_formula(data):
    n_classes = data.draw(st.integers(2, 7))
    n_parts = data.draw(st.integers(1, 5))
    rows = data.draw(st.integers(1, 9))
    labels = [np.array(data.draw(st.lists(st.integers(0, n_classes - 1), min_size=rows, max_size=rows)))
              for _ in range(n_parts)]
    weights = data.draw(st.lists(st.integers(1, 512), min_size=n_parts, max_size=n_parts))
    y = interpolate_labels(labels, weights, n_classes)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    expected = sum(w * np.eye(n_classes)[lab] for w, lab in zip(weights, labels)) / sum(weights)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    if all((lab == labels[0]).all() for lab in labels):  # the same entity everywhere: its own label
        np.testing.assert_allclose(y, np.eye(n_classes)[labels[0]], rtol=1e-6)


@pytest.mark.parametrize("labels, weights", [
    ([np.array([0])], [1, 2]),                      # one weight too many
    ([np.array([0]), np.array([1])], [0, 0]),       # no positive weight
    ([np.array([0]), np.array([1, 1])], [1, 1]),    # rows differ
])
def test_interpolation_rejects_bad_input(labels, weights):
    with pytest.raises(ConfigError):
        interpolate_labels(labels, weights, 2)


def _bce_with_logits_by_hand(z: np.ndarray, t: np.ndarray) -> float:
    p = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    return float(-np.mean(t * np.log(p) + (1 - t) * np.log(1 - p)))


def test_the_papers_bce_on_interpolated_labels_is_one_option_away():
    assert EntityAugOptions().loss == "ce" and EntityAugOptions(loss="bce").loss == "bce"
    z = np.array([[2.0, -1.0, 0.5], [-0.3, 0.8, -2.2]], dtype=np.float32)
    t = interpolate_labels([np.array([0, 2]), np.array([1, 2])], [16, 48], n_classes=3)  # [.25 .75 0], [0 0 1]
    expected = _bce_with_logits_by_hand(z, t)
    got = interpolated_loss("bce", torch.as_tensor(z), torch.as_tensor(t))
    assert float(got) == pytest.approx(expected, rel=1e-6)
    assert float(soft_binary_cross_entropy(torch.as_tensor(z), torch.as_tensor(t))) == pytest.approx(expected, rel=1e-6)
    ce = interpolated_loss("ce", torch.as_tensor(z), torch.as_tensor(t))
    assert float(ce) != pytest.approx(expected, rel=1e-3)  # the two losses differ
    with pytest.raises(ConfigError, match="loss must be one of bce, ce"):
        EntityAugOptions(loss="mse")


def test_host_trains_on_bce_of_the_interpolated_labels_with_loss_bce(monkeypatch):
    # Spy on the host's loss in a real misaligned run: recompute each step's value by hand.
    from securevfl.methods.entity_aug import sides
    seen = []
    real = sides.interpolated_loss

    def spy(name, logits, targets):
        value = real(name, logits, targets)
        seen.append((name, logits.detach().numpy().copy(), targets.numpy().copy(), float(value.detach())))
        return value

    monkeypatch.setattr(sides, "interpolated_loss", spy)
    r = securevfl.train("entity-aug", "breast-cancer", parties=3, active_features=0, epochs=1, batch_size=64,
                        alignment="plaintext", options={"misalign": True, "resolution": "ids", "loss": "bce"})
    assert seen and all(name == "bce" for name, *_ in seen)
    for _, z, t, value in seen:
        assert value == pytest.approx(_bce_with_logits_by_hand(z, t), rel=1e-5)
        np.testing.assert_allclose(t.sum(axis=1), 1.0, rtol=1e-6)
    mixed = np.concatenate([t for *_, t, _ in seen])
    assert np.any((mixed > 0) & (mixed < 1))  # misaligned: some rows carry an interpolated (soft) label
    assert r.extra["entity_aug"]["loss"] == "bce"
    ce = securevfl.train("entity-aug", "breast-cancer", parties=3, active_features=0, epochs=1, batch_size=64,
                         alignment="plaintext", options={"misalign": True, "resolution": "ids", "loss": "ce"})
    assert ce.history[0]["train_loss"] != pytest.approx(r.history[0]["train_loss"], rel=1e-3)


def test_soft_cross_entropy_equals_hard_loss_on_one_hot_targets():
    logits = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 2, 1, 1, 0])
    hard = torch.nn.functional.cross_entropy(logits, y)
    assert torch.allclose(soft_cross_entropy(logits, torch.eye(3)[y]), hard)


# -- schedules and queue -------------------------------------------------------------------------


def test_fully_aligned_schedule_is_splitnn_batch_order():
    order = entity_schedule(100, 0, 100, seed=4, epoch=2, party="passive1")
    assert np.array_equal(order, np.concatenate(list(batch_plan(100, 32, 4, 2))))


def test_aligned_slots_agree_across_guests_and_extra_rows_fill_the_rest():
    n_aligned, length = 10, 60
    a = entity_schedule(n_aligned, 50, length, seed=1, epoch=0, party="passive1")
    b = entity_schedule(n_aligned, 45, length, seed=1, epoch=0, party="passive2")
    slots_a, slots_b = np.flatnonzero(a < n_aligned), np.flatnonzero(b < n_aligned)
    assert np.array_equal(slots_a, slots_b) and np.array_equal(a[slots_a], b[slots_b])
    assert sorted(a[slots_a]) == list(range(n_aligned))
    assert sorted(a[a >= n_aligned]) == list(range(n_aligned, 60))  # every extra row once
    extra_b = b[b >= n_aligned]  # 45 rows for 50 slots: all used, 5 reused
    assert set(extra_b) == set(range(n_aligned, 55)) and len(extra_b) == 50
    assert not np.array_equal(a[a >= n_aligned] - n_aligned, extra_b[:50] - n_aligned)  # own orders


def test_misaligned_schedule_is_an_independent_permutation():
    a = entity_schedule(30, 20, 50, seed=0, epoch=0, party="passive1", misalign=True)
    b = entity_schedule(30, 20, 50, seed=0, epoch=0, party="passive2", misalign=True)
    assert sorted(a) == sorted(b) == list(range(50))
    assert (a != b).mean() > 0.5


def test_min_epoch_size_rotates_through_extra_rows():
    seen = set()
    for epoch in range(20):
        seen |= set(entity_schedule(5, 40, 15, seed=0, epoch=epoch, party="p")) - set(range(5))
    assert seen == set(range(5, 45))


def test_queue_reuses_the_last_activation_when_a_guest_misses_a_step():
    q = ActivationQueue()
    with pytest.raises(ProtocolError):
        q.read()
    first, second = torch.ones(2, 3), torch.zeros(2, 3)
    q.put(first, np.array([4, 5]))
    assert q.read()[2] is True
    q.put(second, np.array([6, 7]))
    act, labels, fresh = q.read()
    assert act is second and list(labels) == [6, 7] and fresh
    act, labels, fresh = q.read()  # nothing new arrived: the last one again
    assert act is second and list(labels) == [6, 7] and not fresh and q.reused == 1


def test_options_are_validated():
    for bad in ({"arch": "resnet"}, {"drop_prob": 1.0}, {"drop_prob": -1.0}, {"epoch_size": "all"},
                {"resolution": "x"}):
        with pytest.raises(ConfigError):
            EntityAugOptions(**bad)


# -- end to end ----------------------------------------------------------------------------------


def _run(dataset, spec, config, **data_opts):
    scenario = scenario_from_partition(partition(load_dataset(dataset, DatasetOptions(**data_opts)), spec))
    method = create_method("entity-aug", config)
    return scenario, run_parties(method.roles(scenario), active=scenario.active, seed=config.seed)


def test_one_guest_full_alignment_reduces_to_splitnn():
    # plaintext alignment: both runs must see the same agreed row order (PSI's order is random)
    kw = dict(dataset="breast-cancer", parties=2, active_features=0, epochs=3, seed=3, alignment="plaintext",
              batch_size=32, early_stopping=0)  # the engine's defaults (splitnn's own would stop early, in 128s)
    ea = securevfl.train("entity-aug", options={"bottom": "mlp", "loss": "ce"}, **kw)  # SplitNN uses CE
    split = securevfl.train("splitnn", require_all_parties=True, **kw)
    for a, b in zip(ea.history, split.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
    assert ea.metrics["auc"] == pytest.approx(split.metrics["auc"], abs=1e-9)
    assert ea.metrics["accuracy"] == split.metrics["accuracy"]


def test_defaults_beat_splitnn_on_the_aligned_rows_at_five_percent_overlap():
    """Issue 31: with its defaults entity-aug beats its baseline (SplitNN on the aligned rows only) by >= 3 points.

    digits, 5 % of the training rows held by every party, the rest spread over the two guests (the
    setting the method is for, README's command); 30 epochs, seed 0. Measured (seeds 0-2): default
    ``ce`` 0.958 / 0.975 / 0.972, the paper's ``bce`` 0.942 / 0.967 / 0.964, SplitNN 0.550 / 0.714 /
    0.614. (With BCE as the default, the two-party run with no rows to augment with lost to SplitNN:
    0.369 vs 0.533.)
    """
    kw = dict(dataset="digits", parties=3, preset="entity-aug", aligned_ratio=0.05, unaligned="spread", epochs=30,
              seed=0, device="cpu", alignment="plaintext")
    ea = securevfl.train("entity-aug", **kw)
    split = securevfl.train("splitnn", require_all_parties=True, **kw)
    assert ea.extra["entity_aug"]["loss"] == "ce"
    assert ea.metrics["accuracy"] >= split.metrics["accuracy"] + 0.03


def test_dropped_steps_reuse_the_last_activation():
    spec = PartitionSpec(parties=3, active_features=0, aligned_ratio=0.3, unaligned="spread", seed=0)
    config = TrainConfig(epochs=2, batch_size=32, options={"drop_prob": 0.3, "resolution": "ids"})
    scenario, result = _run("breast-cancer", spec, config)
    extra = result.results["active"].extra["entity_aug"]
    steps = 2 * extra["steps_per_epoch"]
    for g in ("passive1", "passive2"):
        guest = result.results[g]
        assert guest["dropped_steps"] > 0 and guest["sent_steps"] + guest["dropped_steps"] == steps
        assert extra["reused_activations"][g] == guest["dropped_steps"]
        # host -> guest: the labelled positions, the plan, then one gradient per step it sent
        assert result.meters["active"].snapshot().messages[f"active->{g}"] == 2 + guest["sent_steps"]


def test_psi_finds_exactly_the_rows_the_host_labels():
    # disjoint: each guest's rows outside the intersection are NOT at the host, so PSI drops them
    spec = PartitionSpec(parties=3, active_features=0, aligned_ratio=0.5, unaligned="disjoint", seed=0)
    _, result = _run("breast-cancer", spec, TrainConfig(epochs=1))
    extra = result.results["active"].extra["entity_aug"]
    assert extra["labelled_entities"] == {"passive1": extra["aligned_rows"], "passive2": extra["aligned_rows"]}
    # spread: every unaligned row is labelled at the host, so all of a guest's rows are used
    spec = PartitionSpec(parties=3, active_features=0, aligned_ratio=0.5, unaligned="spread", seed=0)
    scenario, result = _run("breast-cancer", spec, TrainConfig(epochs=1))
    extra = result.results["active"].extra["entity_aug"]
    for g in ("passive1", "passive2"):
        data = scenario.party_data(g)
        assert extra["labelled_entities"][g] == len(data.X_train) + len(data.X_unaligned)


def test_psi_and_plaintext_id_resolution_train_the_same_model():
    kw = dict(dataset="breast-cancer", parties=3, active_features=0, aligned_ratio=0.3, unaligned="spread",
              epochs=2, alignment="plaintext")
    a = securevfl.train("entity-aug", options={"resolution": "psi"}, **kw)
    b = securevfl.train("entity-aug", options={"resolution": "ids"}, **kw)
    assert [h["train_loss"] for h in a.history] == pytest.approx([h["train_loss"] for h in b.history])
    assert a.cost["crypto_s"].get("psi.pairwise", 0) > 0 and "psi.pairwise" not in b.cost["crypto_s"]


def test_image_strips_with_little_overlap_beat_aligned_only_splitnn():
    kw = dict(dataset="digits", parties=3, active_features=0, aligned_ratio=0.05, unaligned="spread",
              epochs=6, batch_size=32, seed=0, alignment="plaintext")
    # Softmax CE (the default since issue 31), named as measured: the paper's BCE learns 10 classes more
    # slowly in 6 epochs (0.50 here); docs/entity_aug.md compares the two losses over full runs.
    ea = securevfl.train("entity-aug", options={"loss": "ce"}, **kw)
    split = securevfl.train("splitnn", options={"bottom": "cnn"}, require_all_parties=True, **kw)
    # Measured at seed 0: 0.85 vs 0.12 (72 aligned rows; each guest adds ~680 of its own).
    assert ea.metrics["accuracy"] > split.metrics["accuracy"] + 0.2
    assert ea.extra["entity_aug"]["weights"] == {"passive1": 16, "passive2": 16}


@pytest.mark.parametrize("options", [{"arch": "credit-card"}, {"arch": "parkinsons", "misalign": True}])
def test_paper_architectures_and_host_features_run(options):
    r = securevfl.train("entity-aug", "synthetic", parties=3, active_features=6, aligned_ratio=0.4,
                        unaligned="spread", epochs=2, n_samples=300, n_features=20, options=options)
    # Two epochs on 300 balanced rows: the ranking is learnt before the threshold (measured at the default seed:
    # AUC 0.75 at accuracy 0.48 with credit-card, AUC 0.83 at accuracy 0.73 with parkinsons); a random one is 0.5.
    assert r.metrics["auc"] > 0.6, r.metrics
    w = r.extra["entity_aug"]["weights"]
    assert set(w) == {"active", "passive1", "passive2"} and len(set(w.values())) == 1


def test_entity_aug_from_cli(tmp_path):
    out = tmp_path / "ea.json"
    rc = main(["train", "--method", "entity-aug", "--dataset", "breast-cancer", "--parties", "3",
               "--partition", "entity-aug", "--aligned-ratio", "0.2", "--unaligned", "spread", "--epochs", "2",
               "--option", "drop_prob=0.2", "--option", "misalign=true", "--quiet", "--report", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["method"] == "entity-aug" and report["config"]["train"]["options"]["drop_prob"] == 0.2
    assert sum(report["extra"]["entity_aug"]["reused_activations"].values()) > 0
    assert report["parties"]["active"]["features"] == 0  # the preset made a label-only host


@settings(max_examples=60, deadline=None)
@given(n_aligned=st.integers(0, 40), extra_a=st.integers(0, 60), extra_b=st.integers(0, 60),
       slack=st.integers(0, 50), epoch=st.integers(0, 5))
def test_schedule_laws(n_aligned, extra_a, extra_b, slack, epoch):
    length = max(1, n_aligned + slack)
    assume(n_aligned + extra_a > 0 and n_aligned + extra_b > 0)  # every guest has a row to schedule
    a = entity_schedule(n_aligned, extra_a, length, seed=7, epoch=epoch, party="g1")
    b = entity_schedule(n_aligned, extra_b, length, seed=7, epoch=epoch, party="g2")
    assert len(a) == length and a.min() >= 0 and a.max() < n_aligned + extra_a
    if extra_a and extra_b:  # aligned rows: once each, in the same slots with the same entity
        assert np.array_equal(np.flatnonzero(a < n_aligned), np.flatnonzero(b < n_aligned))
        assert np.array_equal(a[a < n_aligned], b[b < n_aligned])
        assert sorted(a[a < n_aligned]) == list(range(n_aligned))
    if extra_a >= length - n_aligned:  # enough own rows: none repeated within the epoch
        assert len(set(a)) == length


def test_only_aligned_rows_and_min_epoch_size():
    spec = PartitionSpec(parties=3, active_features=0, aligned_ratio=0.3, unaligned="spread", seed=0)
    _, result = _run("breast-cancer", spec, TrainConfig(epochs=1, options={"use_unaligned": False}))
    extra = result.results["active"].extra["entity_aug"]
    assert extra["epoch_length"] == extra["aligned_rows"] == result.results["passive1"]["entities"]
    _, result = _run("breast-cancer", spec, TrainConfig(epochs=1, options={"epoch_size": "min"}))
    extra = result.results["active"].extra["entity_aug"]
    assert extra["epoch_length"] == min(extra["labelled_entities"].values())


def test_host_rejects_keys_outside_its_labelled_entities():
    from securevfl.errors import PartyFailure
    spec = PartitionSpec(parties=2, active_features=0, seed=0)
    scenario = scenario_from_partition(partition(load_dataset("breast-cancer"), spec))
    method = create_method("entity-aug", TrainConfig(epochs=1, options={"resolution": "ids"}))
    data = scenario.party_data("passive1")

    def rogue_guest(ctx):
        ctx.send(ctx.active, "entity-aug.setup.ids", [str(v) for v in data.ids_train])
        labelled = ctx.recv(ctx.active, "entity-aug.setup.labelled")
        ctx.recv(ctx.active, "entity-aug.setup.plan")
        ctx.send(ctx.active, "entity-aug.train.activation", (torch.zeros(2, 16), np.array([0, len(labelled) + 5])))

    roles = {"active": method.roles(scenario)["active"], "passive1": rogue_guest}
    with pytest.raises(PartyFailure) as info:
        run_parties(roles, active="active", seed=0)
    assert info.value.party == "active" and isinstance(info.value.cause, ProtocolError)
    assert "entity key outside" in str(info.value.cause)


def test_missed_steps_with_an_active_party_that_holds_features():
    # Regression: a reused full-batch activation met the host's short last batch and the label
    # arrays differed in length ("label arrays differ in length: [7, 32]").
    report = securevfl.train("entity-aug", "breast-cancer", parties=2, epochs=3, seed=1,
                             options={"drop_prob": 0.3}, alignment="plaintext")
    assert report.extra["entity_aug"]["reused_activations"]["passive1"] > 0
    assert report.metrics["accuracy"] > 0.8
